"""Training data for `specli train`: where it comes from (`read_data`) and how it becomes token ids
(`render`, `prompt_ids`, `token_stream`). Torch-free except `token_stream`.

Sources (`--data`):
- a JSONL file: {"text": ...} records are text to continue; {"messages": [{"role", "content"}, ...]}
  records are chats, rendered with the target's chat template; {"prompt": ...} or Spec-Bench's
  {"turns": [...]} records are prompts (rendered as `specli generate` renders a prompt: through the chat
  template when the tokenizer has one). Any other file is one text document.
- a folder: every UTF-8 text file under it (hidden folders, __pycache__ and binary files skipped), in
  path order.
- a bundled prompt set: `code` or `chat` (specli/bench/sets/, the sets `specli bench` runs).
- `stdlib`: the running interpreter's standard library sources (the embedded tiny pair's corpus, with
  its own train/validation split).

With --regenerate the target writes the answer to every prompt and chat record first
(specli.training.regenerate); text records are trained on as written; a folder or stdlib has no
prompts to answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specli.errors import UsageError
from specli.training.corpus import is_validation

SETS = ("code", "chat")
STDLIB = "stdlib"
SPLIT_MIN_DOCUMENTS = 20  # fewer documents than this: no validation split (all of them train)
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
_SNIFF = 8192


@dataclass(frozen=True)
class Document:
    """One piece of training data. kind: 'text' (to continue as it is), 'chat' (messages, through the chat
    template) or 'prompt' (a user's prompt: the chat template when the tokenizer has one, as generate
    renders it). name: where it came from (file, file:line), which also decides the validation split."""

    kind: str
    name: str
    text: str = ""
    messages: tuple[dict[str, str], ...] = ()

    @property
    def prompt_text(self) -> str:
        """The text a prompt set would hold for it (to hold evaluation prompts out of training)."""
        if self.kind == "chat":
            users = [m["content"] for m in self.messages if m.get("role") == "user"]
            return users[0] if users else ""
        return self.text


@dataclass(frozen=True)
class DataSet:
    """The documents of a source, split into train and validation; kind: jsonl | file | folder | set |
    stdlib; prompts: whether its records can be answered by the target (--regenerate)."""

    source: str
    kind: str
    train: list[Document]
    validation: list[Document] = field(default_factory=list)

    @property
    def prompts(self) -> bool:
        """Whether --regenerate has something to answer: a prompt or chat record (text records are
        trained on as they are written)."""
        return self.kind in ("jsonl", "set") and any(answerable(d) for d in self.train + self.validation)

    def without(self, texts: Sequence[str]) -> DataSet:
        """The same data without the documents whose prompt text is one of `texts` (held out)."""
        held = set(texts)
        return DataSet(
            self.source,
            self.kind,
            [d for d in self.train if d.prompt_text not in held],
            [d for d in self.validation if d.prompt_text not in held],
        )


# --------------------------------------------------------------------------- reading


def check_source(source: str) -> None:
    """UsageError when --data names nothing there is: stdlib, a bundled set, or an existing file or
    folder (cheap: read_data reads it)."""
    path = Path(source).expanduser()
    if source == STDLIB or source in SETS or path.is_dir() or path.is_file():
        return
    raise UsageError(
        f"no data at '{source}'.",
        f"Give --data a JSONL file, a folder of text files, a bundled set ({', '.join(SETS)}) or {STDLIB}.",
    )


def read_data(source: str) -> DataSet:
    """The documents of --data; UsageError when there is none or it holds no usable text."""
    check_source(source)
    path = Path(source).expanduser()
    if source == STDLIB:
        data = _stdlib()
    elif source in SETS and not path.exists():
        from specli.bench.prompts import read_prompts, set_path

        docs = [Document("prompt", f"{source}:{p.id}", p.text) for p in read_prompts(set_path(source))]
        data = DataSet(source, "set", docs)
    elif path.is_dir():
        data = _split(source, "folder", _folder(path))
    elif path.suffix.lower() in (".jsonl", ".json"):  # a file (check_source)
        data = _split(source, "jsonl", _jsonl(path))
    else:
        data = DataSet(source, "file", [_text_file(path, path.name)] if _readable(path) else [])
    if not any(_usable(d) for d in data.train):
        raise UsageError(f"'{source}' holds no usable text to train on.")
    return DataSet(data.source, data.kind, [d for d in data.train if _usable(d)], data.validation)


def _usable(doc: Document) -> bool:
    if doc.kind == "chat":
        return any(m.get("content", "").strip() for m in doc.messages)
    return bool(doc.text.strip())


def _split(source: str, kind: str, docs: list[Document]) -> DataSet:
    """About 5% of the documents (by a hash of their name) validate, when there are enough of them."""
    if len(docs) < SPLIT_MIN_DOCUMENTS:
        return DataSet(source, kind, docs)
    train = [d for d in docs if not is_validation(d.name)]
    validation = [d for d in docs if is_validation(d.name)]
    return DataSet(source, kind, train, validation) if train else DataSet(source, kind, docs)


def _stdlib() -> DataSet:
    from specli.training.corpus import load_corpus

    corpus = load_corpus()
    train = [Document("text", n, t) for n, t in zip(corpus.train_names, corpus.train, strict=True)]
    validation = [
        Document("text", n, t) for n, t in zip(corpus.validation_names, corpus.validation, strict=True)
    ]
    return DataSet(STDLIB, STDLIB, train, validation)


def _readable(path: Path) -> bool:
    """A UTF-8 text file (no NUL byte in its first 8 kB)."""
    try:
        with path.open("rb") as f:
            if b"\0" in f.read(_SNIFF):
                return False
        path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return True


def _text_file(path: Path, name: str) -> Document:
    return Document("text", name, path.read_text(encoding="utf-8"))


def _folder(root: Path) -> list[Document]:
    files = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in _SKIPPED_DIRS for p in parts) or not path.is_file():
            continue
        files.append(path)
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    return [_text_file(p, p.relative_to(root).as_posix()) for p in files if _readable(p)]


def _jsonl(path: Path) -> list[Document]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read '{path}': {e}.") from None
    docs = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            docs.append(_record(_json_line(path, number, line), f"{path.name}:{number}", path, number))
    return docs


def _json_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError as e:
        raise UsageError(f"{path}:{number}: not a JSON object ({e}).") from None
    if not isinstance(row, dict):
        raise UsageError(f"{path}:{number}: not a JSON object.")
    return row


def _record(row: dict[str, Any], name: str, path: Path, number: int) -> Document:
    """One JSONL record -> a Document; UsageError naming the line when it is none of the known forms."""
    if isinstance(row.get("messages"), list):
        messages = []
        for m in row["messages"]:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
                raise UsageError(f"{path}:{number}: each message needs a 'role' and a 'content' string.")
            messages.append({"role": str(m["role"]), "content": m["content"]})
        return Document("chat", name, messages=tuple(messages))
    if isinstance(row.get("text"), str):
        return Document("text", name, row["text"])
    turns = row.get("turns")
    prompt = turns[0] if isinstance(turns, list) and turns else row.get("prompt")
    if isinstance(prompt, str):
        return Document("prompt", name, prompt)
    raise UsageError(
        f"{path}:{number}: a record needs 'text', 'messages' (a chat) or 'prompt'.",
        'e.g. {"text": "..."} or {"messages": [{"role": "user", "content": "..."}]}',
    )


# --------------------------------------------------------------------------- token ids


def _chat_ids(tokenizer: Any, messages: Sequence[dict[str, str]], generation_prompt: bool) -> list[int]:
    if not getattr(tokenizer, "chat_template", None):
        raise UsageError(
            "the data holds chats ({'messages': ...}) but the target's tokenizer has no chat template.",
            'Give text records ({"text": ...}) instead.',
        )
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=generation_prompt
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render(doc: Document, tokenizer: Any) -> list[int]:
    """A document as the ids to train on: text as it is (no special tokens added); chats through the
    chat template; prompts as `specli generate` encodes them."""
    if doc.kind == "chat":
        return _chat_ids(tokenizer, doc.messages, generation_prompt=doc.messages[-1]["role"] != "assistant")
    if doc.kind == "prompt":
        return prompt_ids(doc, tokenizer)
    return list(tokenizer(doc.text, add_special_tokens=False)["input_ids"])


def answerable(doc: Document) -> bool:
    """Whether --regenerate lets the target answer `doc`: prompts and chats; a text record is data to
    continue as written (code, documentation), never rewritten by the target."""
    return doc.kind in ("prompt", "chat")


def prompt_ids(doc: Document, tokenizer: Any) -> list[int]:
    """The ids the target answers with --regenerate: a chat up to its last non-assistant turn with the
    generation prompt; a prompt as generate encodes it (chat template when there is one); text with the
    tokenizer's special tokens (a continuation; `token_ids` keeps text records as written)."""
    if doc.kind == "chat":
        turns = list(doc.messages)
        while turns and turns[-1]["role"] == "assistant":
            turns.pop()
        return _chat_ids(tokenizer, turns or list(doc.messages), generation_prompt=True)
    if doc.kind == "prompt" and getattr(tokenizer, "chat_template", None):
        return _chat_ids(tokenizer, [{"role": "user", "content": doc.text}], generation_prompt=True)
    return list(tokenizer(doc.text)["input_ids"])


def token_stream(documents: Sequence[Sequence[int]], eos: int):
    """Documents' ids joined, EOS after each one (unless it ends in EOS) -> [N] int64 tensor."""
    import torch

    ids: list[int] = []
    for doc in documents:
        ids.extend(doc)
        if not doc or doc[-1] != eos:
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def encode_texts(tokenizer: Any, documents: Sequence[Document]) -> list[list[int]]:
    """render() for many documents; plain texts in one fast batch."""
    texts = [i for i, d in enumerate(documents) if d.kind == "text"]
    out: list[list[int] | None] = [None] * len(documents)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and texts:
        encoded = backend.encode_batch([documents[i].text for i in texts], add_special_tokens=False)
        for i, enc in zip(texts, encoded, strict=True):
            out[i] = list(enc.ids)
    return [ids if ids is not None else render(d, tokenizer) for ids, d in zip(out, documents, strict=True)]
