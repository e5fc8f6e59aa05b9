"""The training data of the SmolLM2-135M drafters (docs/models.md "Drafters for SmolLM2"): one JSONL file
for `specli train --data FILE --regenerate`, built only from what this machine has offline.

    python scripts/smollm2_data.py data/smollm2-train.jsonl   # and data/smollm2-train-heldout.jsonl

Records, in a fixed order (the trainer shuffles windows by its --seed):
- {"prompt": ...}: the bundled prompt sets' prompts except the held-out ones (the first HELD_OUT of
  every category, which `specli bench --limit 4` measures); --regenerate lets SmolLM2 answer them
  through its chat template, so the drafter sees the target's own answers.
- {"text": ...} code: Python's standard library and the pure-Python packages installed beside specli.
- {"text": ...} English: the documentation Debian ships under /usr/share/doc (README, NEWS, guides; no
  changelogs or copyright files), its GNU manuals (/usr/share/info) and the long descriptions of the
  installed packages.

Every document is capped at MAX_CHARS; a budget per kind keeps code and English about even.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import sysconfig
from collections.abc import Iterator
from email.parser import Parser
from importlib import metadata
from pathlib import Path

HELD_OUT = 4  # prompts per category kept out of training (bench --limit 4 measures them)
MAX_CHARS = 12_000
BUDGET = {"code": 4_000_000, "english": 4_000_000}  # characters per kind
DOC_NAMES = ("readme", "news", "guide", "faq", "howto", "todo", "bugs", "tutorial", "intro", "usage")
SKIP_DOCS = ("changelog", "copyright", "license", "copying")


def _order(path: Path) -> str:
    """A stable shuffle: documents are taken in the order of a hash of their path."""
    return hashlib.sha256(str(path).encode()).hexdigest()


def prompts() -> tuple[list[dict], list[dict]]:
    """The bundled sets' prompts: (to train on, held out). The held-out ones are ordered round-robin
    over the categories, so the first N of them (`specli train --eval-count N`) span the categories."""
    from specli.bench.prompts import read_prompts, set_path

    train, held = [], []
    for name in ("chat", "code"):
        seen: dict[str, int] = {}
        for p in read_prompts(set_path(name)):
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] > HELD_OUT:
                train.append({"prompt": p.text})
            else:
                row = {"id": f"{name}-{p.id}", "category": p.category, "prompt": p.text}
                held.append((seen[p.category], name, row))
    return train, [r for _, _, r in sorted(held, key=lambda x: x[:2])]


def _text(path: Path) -> str | None:
    try:
        raw = path.read_bytes()
        raw = gzip.decompress(raw) if path.suffix == ".gz" else raw
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    if "\x00" in text or len(text.strip()) < 200:
        return None
    return text[:MAX_CHARS]


def code_files() -> Iterator[Path]:
    """The standard library's modules and the installed packages' (no tests, no vendored copies)."""
    stdlib, purelib = Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])
    skip = {"test", "tests", "testing", "__pycache__", "site-packages", "idlelib", "_vendor", "vendor"}
    files = [
        p
        for root in (stdlib, purelib)
        for p in root.rglob("*.py")
        if not skip & set(p.relative_to(root).parts[:-1])
    ]
    yield from sorted(files, key=_order)


def doc_files() -> Iterator[Path]:
    files = [
        p
        for p in Path("/usr/share/doc").rglob("*")
        if p.is_file()
        and any(n in p.name.lower() for n in DOC_NAMES)
        and not any(n in p.name.lower() for n in SKIP_DOCS)
        and p.suffix.lower() in ("", ".gz", ".md", ".txt", ".rst", ".debian", ".markdown")
    ]
    files += [p for p in Path("/usr/share/info").glob("*.info*.gz")]  # the GNU manuals
    yield from sorted(files, key=_order)


def descriptions() -> Iterator[str]:
    for dist in sorted(metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        body = Parser().parsestr(dist.read_text("METADATA") or "").get_payload()
        if isinstance(body, str) and len(body.strip()) >= 200:
            yield body[:MAX_CHARS]


def main(out: str) -> None:
    records, held = prompts()
    counts = {"prompt": len(records), "code": 0, "english": 0}
    used = {"code": 0, "english": 0}
    for kind, texts in (
        ("code", (_text(p) for p in code_files())),
        ("english", (t for src in (descriptions(), (_text(p) for p in doc_files())) for t in src)),
    ):
        for text in texts:
            if text is None or used[kind] >= BUDGET[kind]:
                continue
            records.append({"text": text})
            used[kind] += len(text)
            counts[kind] += 1
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    held_out = Path(out).with_name(Path(out).stem + "-heldout.jsonl")
    held_out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in held), encoding="utf-8")
    print(f"{held_out}: {len(held)} held-out prompts (the first {HELD_OUT} of every category)")
    print(
        f"{out}: {counts['prompt']} prompts, {counts['code']} code files ({used['code']:,} chars), "
        f"{counts['english']} English documents ({used['english']:,} chars)"
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/smollm2-train.jsonl")
