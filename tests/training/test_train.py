"""`specli train KIND`: every kind trains on CPU in seconds and writes a drafter that loads with --draft
and stays lossless; a run resumes bit for bit; --time-limit stops with a checkpoint; the data formats
and --regenerate (the target's own greedy answers, cached); bad input stops with one line, exit 2,
nothing written; the memory planner; training.json."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from conftest import CORPUS, build_tokenizer, make_model, save_model
from safetensors import safe_open
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.errors import SpecliError, UsageError
from specli.models import memory
from specli.models.eagle_head import EagleHead, HeadCache, init_weights
from specli.models.head_formats import load_head
from specli.training import checkpoint, data, loop
from specli.training.eagle import head_config, target_pass, unrolled_states
from specli.training.recipe import parse_duration

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
PROMPTS = ["def fibonacci(n):\n", "class Stack:\n    def push(self, item):\n"]
STRATEGY = {"eagle3": "eagle", "eagle1": "eagle", "peagle": "eagle", "pard": "draft", "draft": "draft"}
STRATEGY["heads"] = "heads"


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_pair, tokenizer):
    """Training text (JSONL), held-out prompts (JSONL) and a copy of the target with a chat template."""
    root = tmp_path_factory.mktemp("train-data")
    text = root / "text.jsonl"
    text.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS * 3))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    chat_target = root / "chat-target"
    model = AutoModelForCausalLM.from_pretrained(tiny_pair[0])
    chat_tokenizer = build_tokenizer()
    chat_tokenizer.chat_template = CHAT_TEMPLATE
    save_model(chat_target, model, chat_tokenizer)
    return {"text": text, "prompts": prompts, "chat_target": chat_target}


def train(*args: str, code: int | None = 0):
    """Run `specli train ...` (one thread, short measurement); check the exit code."""
    result = CliRunner().invoke(app, ["train", *args, "--threads", "1"])
    if code is not None:
        assert result.exit_code == code, result.output
    return result


def quick(kind: str, target: Path, out: Path, files, *more: str) -> list[str]:
    """The arguments of a --quick run with the held-out prompts measured briefly."""
    args = [kind, "--target", str(target), "--data", str(files["text"]), "--out", str(out), "--quick"]
    return args + ["--eval-prompts", str(files["prompts"]), "--eval-count", "2", "--eval-tokens", "10", *more]


def greedy_reference(target_dir: Path, prompt_ids: list[int], n: int, eos: set[int]) -> list[int]:
    """transformers' own greedy continuation, cut after the first EOS (as specli stops)."""
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt_ids])
    out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)[0, ids.shape[1] :].tolist()
    cut = next((i + 1 for i, t in enumerate(out) if t in eos), len(out))
    return out[:cut]


# --------------------------------------------------------------------------- every kind


@pytest.mark.parametrize("kind", ["eagle3", "eagle1", "peagle", "pard", "draft", "heads"])
def test_every_kind_trains_and_its_drafter_loads_losslessly(kind, tiny_pair, files, tmp_path):
    """The written folder loads with --draft at once and greedy output is the target's own generate()
    (catches a folder the loaders refuse, a head shaped for another target, a PARD drafter without its
    mask token); EAGLE heads read back with exactly the tensors trained (catches a broken speculators
    layout: names, d2t/t2d); every kind's weights are bfloat16, as its config says (catches a writer back
    on float16 or float32); the measurement ran through the engine and matched plain decoding."""
    target, init = tiny_pair
    out = tmp_path / kind
    more = ["--init", str(init)] if kind in ("pard", "draft") else []
    train(*quick(kind, target, out, files, *more, "--draft-vocab", "300"))
    report = json.loads((out / "training.json").read_text())
    assert report["finished"] and report["steps_done"] == 4 and report["measurement"]["identical"]
    config = json.loads((out / "config.json").read_text())
    if kind in ("eagle3", "peagle"):
        assert config["speculators_model_type"] == kind
        trained = checkpoint.load(out)["model"]
        head = load_head(out, AutoModelForCausalLM.from_pretrained(target).config)
        for name, tensor in head.state_dict().items():
            expected = (
                trained[name].to(torch.bfloat16) if trained[name].is_floating_point() else trained[name]
            )
            assert torch.equal(tensor.to(expected.dtype), expected), name
        if kind == "eagle3":
            assert config["draft_vocab_size"] == 300
    if kind == "pard":
        assert config["pard_token"] == config["vocab_size"] - 1 and config["para_num"] == 4
    if kind in ("pard", "draft"):
        assert (out / "tokenizer.json").is_file()
    with safe_open(out / "model.safetensors", "pt") as weights:  # drafters in bfloat16, as config.json says
        assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
        floats = {weights.get_tensor(name).dtype for name in weights.keys()} - {torch.long, torch.bool}  # noqa: SIM118
        assert floats == {torch.bfloat16}
    if kind not in ("draft", "heads"):  # the engines serve what it wrote (vLLM: speculators heads, PARD)
        export = [
            "export",
            "vllm",
            "--target",
            str(target),
            "--draft",
            str(out),
            "--strategy",
            STRATEGY[kind],
        ]
        assert CliRunner().invoke(app, export).exit_code == 0
    pair = specli.load(
        target=str(target), draft=str(out), strategy=STRATEGY[kind], device="cpu", threads=None
    )
    result = pair.generate(PROMPTS[0], max_new_tokens=12, temperature=0.0)
    assert result.stats.drafted > 0
    assert result.token_ids == greedy_reference(target, result.prompt_token_ids, 12, pair.eos_ids)


@pytest.mark.parametrize(("kind", "arch"), [("eagle3", "qwen2"), ("peagle", "qwen3"), ("pard", "qwen3")])
def test_other_architectures(kind, arch, tokenizer, files, tmp_path):
    """Qwen2 (attention biases) and Qwen3 (its own head_dim, q/k norms) targets: the written drafter loads
    and stays lossless (catches a head shaped from Llama-only config fields)."""
    vocab = len(tokenizer)
    target = save_model(tmp_path / "t", make_model(arch, vocab, layers=4, seed=5, head_dim=24), tokenizer)
    more = []
    if kind == "pard":
        more = [
            "--init",
            str(
                save_model(
                    tmp_path / "d",
                    make_model(arch, vocab, layers=1, seed=6, tie_word_embeddings=True),
                    tokenizer,
                )
            ),
        ]
    train(*quick(kind, target, tmp_path / "out", files, *more))
    assert json.loads((tmp_path / "out" / "training.json").read_text())["measurement"]["identical"]
    if kind == "pard":  # a tied LM head is written once (catches the embeddings stored twice)
        assert json.loads((tmp_path / "out" / "config.json").read_text())["tie_word_embeddings"]
        with safe_open(tmp_path / "out" / "model.safetensors", "pt") as weights:
            names = set(weights.keys())
        assert "model.embed_tokens.weight" in names
        assert "lm_head.weight" not in names
    pair = specli.load(target=str(target), draft=str(tmp_path / "out"), strategy=STRATEGY[kind], threads=None)
    result = pair.generate(PROMPTS[1], max_new_tokens=10, temperature=0.0)
    assert result.token_ids == greedy_reference(target, result.prompt_token_ids, 10, pair.eos_ids)


def test_aux_layers_choose_the_features_the_head_fuses(tiny_pair, files, tmp_path):
    """--aux-layers 1,4 on a 4-layer target: the head is shaped for two features, the speculators config
    names them, the engine reads those hidden states (round info) and output stays the target's (catches
    the option dropped on the way to the head, or a drafter reading the default layers 2, 2, 1)."""
    out = tmp_path / "h"
    train(*quick("eagle3", tiny_pair[0], out, files, "--aux-layers", "1,4"))
    report = json.loads((out / "training.json").read_text())
    assert report["recipe"]["aux_layers"] == [1, 4] and report["config"]["aux_layers"] == [1, 4]
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [1, 4]
    assert report["measurement"]["identical"]
    pair = specli.load(target=str(tiny_pair[0]), draft=str(out), strategy="eagle", threads=None)
    rounds = list(pair.stream(PROMPTS[0], max_new_tokens=10, temperature=0.0, num_draft_tokens=3))
    assert any(r.info.get("target_layers") == [1, 4] for r in rounds)
    assert pair.head.fc.weight.shape[1] == 2 * pair.head.config.target_hidden_size
    ids = [t for r in rounds for t in r.committed]
    assert ids == greedy_reference(tiny_pair[0], pair.encode(PROMPTS[0]), 10, pair.eos_ids)


def test_the_embedded_target(tmp_path):
    """`specli train eagle3 --target embedded:tiny-target --data code --quick` (the bundled code set; the
    evaluation prompts, from the same set, are held out of training)."""
    out = tmp_path / "h"
    train("eagle3", "--target", "embedded:tiny-target", "--data", "code", "--out", str(out), "--quick",
          "--eval-count", "2", "--eval-tokens", "8")  # fmt: skip
    report = json.loads((out / "training.json").read_text())
    assert report["data"]["documents"] == 34 and report["data"]["held_out_prompts"] == 2
    assert report["measurement"]["identical"] and report["config"]["aux_layers"] == [2, 4, 5]


def test_training_json_has_the_recipe_and_the_engine_measurement(tiny_pair, files, tmp_path):
    """training.json holds the recipe and the command, and its α and τ are what `specli bench` would
    measure: the same prompts through specli.load with the written head at the same fixed k (catches a
    measurement by a separate scorer, or of another drafter than the one written)."""
    out = tmp_path / "h"
    compare = ["--compare-with", str(tiny_pair[1])]
    train(
        *quick(
            "eagle3", tiny_pair[0], out, files, "--layers", "2", "--intermediate", "40", "-k", "3", *compare
        )
    )
    report = json.loads((out / "training.json").read_text())
    assert report["recipe"]["layers"] == 2 and report["config"]["num_layers"] == 2
    assert report["config"]["intermediate_size"] == 40  # --intermediate: the head's MLP width
    assert (
        json.loads((out / "config.json").read_text())["transformer_layer_config"]["intermediate_size"] == 40
    )
    assert report["recipe"]["batch_size"] == 2 and report["recipe"]["lr"] == 5e-4
    assert report["command"].startswith("specli train eagle3 --out") and "--layers 2" in report["command"]
    assert report["history"][0]["agree"] and report["validation"] is not None
    trained = report["measurement"]["results"]["trained"]
    assert {
        "accept_prob",
        "mean_acceptance_length",
        "per_position_acceptance",
        "tokens_per_second",
        "speedup",
    } <= set(trained)
    assert "none" in report["measurement"]["results"] and trained["num_draft_tokens"] == 3
    assert report["measurement"]["results"]["compare"]["drafted"] > 0  # --compare-with: the draft model
    pair = specli.load(target=str(tiny_pair[0]), draft=str(out), strategy="eagle", device="cpu", threads=None)
    stats = specli.Stats()
    for prompt in PROMPTS:
        for r in pair.stream(prompt, max_new_tokens=10, temperature=0.0, num_draft_tokens=3, fixed_k=True):
            stats.observe(r)
    assert stats.accept_prob == pytest.approx(trained["accept_prob"])
    assert stats.mean_acceptance_length == pytest.approx(trained["mean_acceptance_length"])


@pytest.mark.parametrize("sequential", [False, True])
def test_heads_report_each_heads_top1_agreement_on_held_out_windows(tiny_pair, tmp_path, sequential):
    """`specli train heads`: training.json's validation holds one top-1 agreement per head (head i
    against the target's argmax i places after the next token), measured on the validation split; the
    written folder holds --parallel heads and drafts that many a round (catches a report by draft depth
    of another kind, or a head count lost between recipe, folder and pair); --sequential reaches the
    folder and the pair drafts through the sequential chain."""
    text = tmp_path / "text.jsonl"
    text.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS * 6))  # a validation split
    out = tmp_path / "heads"
    args = ["heads", "--target", str(tiny_pair[0]), "--data", str(text), "--out", str(out), "--quick"]
    train(*args, "--parallel", "3", "--context", "16", "--steps", "8", "--eval-count", "0",
          *(["--sequential"] if sequential else []))  # fmt: skip
    report = json.loads((out / "training.json").read_text())
    agreement = report["validation"]["agreement_by_depth"]
    assert report["validation"]["windows"] > 0 and len(agreement) == 3
    assert all(0.0 <= a <= 1.0 for a in agreement) and len(report["history"][0]["agree"]) == 3
    assert report["config"] == {
        "specli_heads": {
            "num_heads": 3,
            "hidden_size": 64,
            "target": str(tiny_pair[0]),
            "sequential": sequential,
            "intermediate": 0,
        }
    }
    pair = specli.load(target=str(tiny_pair[0]), draft=str(out), strategy="heads", device="cpu", threads=None)
    assert pair.settings().num_draft_tokens == 3
    rounds = pair.generate(prompt_ids=[5, 9, 12, 7], max_new_tokens=8).rounds
    assert any(r.drafted for r in rounds)
    assert all(r.info.get("sequential", False) == sequential for r in rounds if r.drafted)


# --------------------------------------------------------------------------- resume, time limit


def _interrupt_after(monkeypatch, steps: int) -> None:
    """Ctrl-C (a real SIGINT) right after the loop's `steps`-th optimizer step."""
    real, calls = loop.train_step, []

    def step(*args, **kwargs):
        record = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == steps:
            os.kill(os.getpid(), signal.SIGINT)
        return record

    monkeypatch.setattr(loop, "train_step", step)


@pytest.fixture(scope="module")
def dropout_drafter(tmp_path_factory, tokenizer):
    """A drafter whose attention dropout draws from torch's global generator while it trains."""
    model = make_model("llama", len(tokenizer), layers=1, seed=2, attention_dropout=0.3)
    return save_model(tmp_path_factory.mktemp("dropout") / "draft", model, tokenizer)


@pytest.mark.parametrize("kind", ["eagle1", "pard", "heads"])
def test_resume_continues_bit_for_bit(kind, tiny_pair, dropout_drafter, files, tmp_path, monkeypatch):
    """6 steps straight == 3 steps, Ctrl-C, --resume, 3 more: the same weights, optimizer state and
    losses, exactly (catches a data order, feature-noise or packed-layout generator, or torch's own
    generator (the drafter's dropout), that a resumed run starts afresh; an optimizer state or step
    count not restored)."""
    target = tiny_pair[0]
    more = ["--init", str(dropout_drafter)] if kind == "pard" else []
    args = [*more, "--steps", "6", "--eval-count", "0", "--checkpoint-every", "100"]
    train(*quick(kind, target, tmp_path / "straight", files, *args))
    with monkeypatch.context() as patch:
        _interrupt_after(patch, 3)
        train(*quick(kind, target, tmp_path / "halves", files, *args), code=130)
    halfway = json.loads((tmp_path / "halves" / "training.json").read_text())
    assert halfway["stopped"] == "interrupted" and halfway["steps_done"] == 3
    train(kind, "--out", str(tmp_path / "halves"), "--resume")  # remembers --eval-count 0
    assert json.loads((tmp_path / "halves" / "training.json").read_text())["measurement"] is None
    straight, resumed = checkpoint.load(tmp_path / "straight"), checkpoint.load(tmp_path / "halves")
    assert resumed["loop"]["step"] == 6
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    for a, b in zip(
        straight["optimizer"]["state"].values(), resumed["optimizer"]["state"].values(), strict=True
    ):
        assert all(torch.equal(a[key], b[key]) for key in a)
    assert [h["loss"] for h in straight["loop"]["history"]] == [h["loss"] for h in resumed["loop"]["history"]]


def test_time_limit_stops_cleanly_with_a_checkpoint_and_resumes(tiny_pair, files, tmp_path):
    """--time-limit stops between two steps before the deadline (a fake clock: each read is one second
    later), checkpoints, writes the drafter so far (it loads) and training.json (not finished); a
    resumed run finishes the steps (catches a deadline that is ignored, or a stop without checkpoint)."""
    from rich.console import Console

    from specli.training.command import Session
    from specli.training.command import train as run

    ticks = iter(range(10**6))
    session = Session(
        out=tmp_path / "h", time_limit=12.0, threads=1, eval_prompts=str(files["prompts"]), eval_count=0,
        clock=lambda: float(next(ticks)),
    )  # fmt: skip
    given = {"target": str(tiny_pair[0]), "data": str(files["text"]), "steps": 40}
    report = run("eagle3", given, session, Console(stderr=True), quick=True)
    assert report["stopped"] == "time limit" and not report["finished"]
    assert 0 < report["steps_done"] < 40
    assert checkpoint.load(tmp_path / "h")["loop"]["step"] == report["steps_done"]
    specli.load(target=str(tiny_pair[0]), draft=str(tmp_path / "h"), strategy="eagle", threads=None)
    train("eagle3", "--out", str(tmp_path / "h"), "--resume", "--eval-count", "0")
    assert json.loads((tmp_path / "h" / "training.json").read_text())["steps_done"] == 40


# --------------------------------------------------------------------------- data


def test_data_formats(tmp_path, files, tokenizer):
    """JSONL text and chat records, a folder (binary and hidden files skipped), a bundled set; chats go
    through the chat template (catches a chat trained on without its template, binary files read as
    text, a prompt set read with the wrong field)."""
    chat_tok = build_tokenizer()
    chat_tok.chat_template = CHAT_TEMPLATE
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    chats = tmp_path / "chat.jsonl"
    chats.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (doc,) = data.read_data(str(chats)).train
    expected = chat_tok("<|user|>hi\n<|assistant|>hello\n", add_special_tokens=False)["input_ids"]
    assert data.render(doc, chat_tok) == expected
    with pytest.raises(UsageError, match="no chat template"):
        data.render(doc, tokenizer)

    folder = tmp_path / "src"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "a.py").write_text("print('a')\n")
    (folder / "b.txt").write_text("some text\n")
    (folder / "weights.bin").write_bytes(b"\0\1\2" * 10)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: main\n")
    assert [d.name for d in data.read_data(str(folder)).train] == ["b.txt", "pkg/a.py"]

    texts = data.read_data(str(files["text"]))
    assert [d.text for d in texts.train[:5]] == CORPUS and texts.kind == "jsonl"
    code = data.read_data("code")
    assert code.kind == "set" and len(code.train) == 36 and code.train[0].kind == "prompt"
    ids = data.encode_texts(tokenizer, texts.train[:2])
    assert ids[0] == tokenizer(CORPUS[0], add_special_tokens=False)["input_ids"]
    stream = data.token_stream(ids, 0)
    assert stream.tolist() == ids[0] + [0] + ids[1] + [0]


def regenerate_args(target: Path, data_file: Path) -> list[str]:
    """A quick `train draft --regenerate` of `target` (its own init) on `data_file`, no measurement."""
    args = ["draft", "--target", str(target), "--init", str(target), "--data", str(data_file), "--regenerate"]
    return args + ["--quick", "--context", "16", "--regenerate-tokens", "8", "--eval-count", "0"]


def regenerated_by(args: list[str], out: Path) -> dict:
    """Run `train` into `out` and return its training.json's data.regenerated record."""
    train(*args, "--out", str(out))
    return json.loads((out / "training.json").read_text())["data"]["regenerated"]


def test_regenerate_trains_on_the_targets_greedy_answers_and_caches_them(files, tmp_path, monkeypatch):
    """--regenerate: every chat prompt answered by the target, greedy (== transformers' generate of the
    prompt rendered through the chat template); a rerun reads the cache and never generates (catches
    answers that are not the target's own, a cache keyed so a rerun misses it)."""
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "cache"))
    chats = tmp_path / "chats.jsonl"
    questions = ["def add(a, b):", "class Stack:", "import os", "The quick brown fox"]
    chats.write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": q}]}) + "\n" for q in questions)
    )
    target = files["chat_target"]
    args = regenerate_args(target, chats)
    regenerated = regenerated_by(args, tmp_path / "one")
    assert regenerated["generated_now"] == 4 and regenerated["from_cache"] == 0
    tok = build_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    lines = [json.loads(line) for line in Path(regenerated["cache"]).read_text().splitlines()]
    for q, row in zip(questions, sorted(lines, key=lambda r: r["i"]), strict=True):
        prompt = data.prompt_ids(data.Document("chat", "q", messages=({"role": "user", "content": q},)), tok)
        assert row["output_ids"] == greedy_reference(target, prompt, 8, {0})

    def refuse(*args, **kwargs):
        raise AssertionError("the target generated again")

    monkeypatch.setattr(specli.pair.Pair, "generate", refuse)
    again = regenerated_by(args, tmp_path / "two")
    assert again["generated_now"] == 0 and again["from_cache"] == 4


def test_regenerate_answers_prompts_and_keeps_text_records_as_written(files, tmp_path, monkeypatch):
    """A JSONL mixing prompts with text: --regenerate answers only the prompts; the text records train
    as written (catches text continued or rewritten by the target, text dropped from the stream); a file
    of text records alone is refused with --regenerate (exit 2, before any weights load)."""
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "cache"))
    mixed = tmp_path / "mixed.jsonl"
    texts = ["def sub(a, b):\n    return a - b\n", "import sys\nprint(sys.argv)\n"]
    records = [{"prompt": "def add(a, b):"}, {"text": texts[0]}, {"prompt": "class Stack:"}]
    records.append({"text": texts[1]})
    mixed.write_text("".join(json.dumps(r) + "\n" for r in records))
    seen: list[list[int]] = []
    real_stream = data.token_stream

    def spy(documents, eos):
        seen.extend(list(d) for d in documents)
        return real_stream(documents, eos)

    monkeypatch.setattr(data, "token_stream", spy)
    args = regenerate_args(files["chat_target"], mixed)
    regenerated = regenerated_by(args, tmp_path / "run")
    assert regenerated["prompts"] == 2 and regenerated["generated_now"] == 2
    assert regenerated["texts_as_written"] == 2
    tok = build_tokenizer()
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] in seen

    only_text = tmp_path / "text.jsonl"
    only_text.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    args[args.index(str(mixed))] = str(only_text)
    result = train(*args, "--out", str(tmp_path / "refused"), code=2)
    assert "holds only text records" in result.output and "Traceback" not in result.output


# --------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def odd_models(tmp_path_factory, tokenizer):
    """A gpt2 target (no EAGLE head can read it) and a drafter with another tokenizer."""
    root = tmp_path_factory.mktemp("odd")
    gpt2 = save_model(root / "gpt2", make_model("gpt2", len(tokenizer), layers=2), tokenizer)
    other_tok = build_tokenizer(300)
    other = save_model(root / "other", make_model("llama", len(other_tok), layers=1), other_tok)
    blank = root / "blank.jsonl"
    blank.write_text('{"text": "   "}\n{"text": ""}\n')
    return {"gpt2": gpt2, "other": other, "blank": blank}


BAD = {
    "unknown kind": (["medusa"], "unknown kind 'medusa'"),
    "head for gpt2": (["eagle3", "--target", "{gpt2}"], "cannot read the hidden states"),
    "no usable text": (["eagle3", "--data", "{blank}"], "no usable text"),
    "tokenizer mismatch": (["pard", "--init", "{other}"], "different tokenizers"),
    "no --init": (["draft"], "--init MODEL"),
    "not empty": (["eagle3", "@stray"], "is not empty"),
    "overwrite a foreign folder": (["eagle3", "--overwrite", "@stray"], "holds no `specli train` output"),
    "nothing to resume": (["eagle3", "--resume"], "nothing to resume"),
    "zero-width MLP": (["eagle3", "--intermediate", "0"], "--intermediate must be at least 1"),
    "aux layer past the top": (["eagle3", "--aux-layers", "2,9"], "between 1 and 4"),
    "aux layers not numbers": (["eagle3", "--aux-layers", "2;3"], "separated by commas"),
    "aux layers for eagle1": (["eagle1", "--aux-layers", "2,3"], "reads the target's final hidden state"),
    "aux layers with --init": (["peagle", "--init", "{other}", "--aux-layers", "2,3"], "drop one"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, tiny_pair, files, odd_models, tmp_path):
    """Each refused before any weights load: exit 2, one error line, the output folder as it was and no
    regeneration cache (catches a check that runs after the folder is made, or that crashes instead)."""
    words, message = BAD[case]
    out = tmp_path / "out"
    if "@stray" in words:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
        words = [w for w in words if w != "@stray"]
    names = {"gpt2": odd_models["gpt2"], "blank": odd_models["blank"], "other": odd_models["other"]}
    words = [w.format(**names) for w in words]
    defaults = {"--target": str(tiny_pair[0]), "--data": str(files["text"])}
    for flag, value in defaults.items():
        if flag not in words:
            words += [flag, value]
    before = sorted(p.name for p in out.iterdir()) if out.exists() else None
    result = train(*words, "--out", str(out), "--quick", code=2)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in result.output, result.output
    assert (sorted(p.name for p in out.iterdir()) if out.exists() else None) == before


def test_resume_refuses_a_changed_recipe(tiny_pair, files, tmp_path):
    out = tmp_path / "h"
    train(*quick("eagle1", tiny_pair[0], out, files, "--steps", "2", "--eval-count", "0"))
    result = train("eagle1", "--out", str(out), "--resume", "--batch-size", "3", code=2)
    assert "--batch-size 3 (checkpoint: 2)" in result.output


# --------------------------------------------------------------------------- memory


def test_training_memory_planner_with_synthetic_sizes():
    """frozen + 16 bytes per trained parameter + activations, 10% on top; the largest batch is the
    exact edge (catches an off-by-one batch, a planner that forgets the optimizer state)."""
    need = memory.TrainingNeed(frozen_bytes=10_000, trained_parameters=1_000, activation_bytes_per_token=10)
    assert need.optimizer_bytes == 16_000
    assert need.total_bytes(4, 100) == int((10_000 + 16_000 + 4_000) * 1.1)
    for available in (need.total_bytes(3, 100), need.total_bytes(4, 100) - 1, need.total_bytes(7, 100)):
        batch = memory.largest_batch(need, 100, available)
        assert need.total_bytes(batch, 100) <= available < need.total_bytes(batch + 1, 100)
    assert memory.largest_batch(need, 100, 26_000) == 0  # not even the weights and optimizer
    memory.check_training_fits(need, 4, 100, "cpu", need.total_bytes(4, 100))  # fits: no error
    with pytest.raises(SpecliError) as caught:
        memory.check_training_fits(need, 8, 100, "cuda:0", need.total_bytes(5, 100))
    assert "--batch-size 5" in caught.value.hint
    with pytest.raises(SpecliError) as caught:
        memory.check_training_fits(need, 1, 1000, "cuda:0", 29_500)
    assert "Not even --batch-size 1" in caught.value.hint


def test_a_run_that_does_not_fit_names_the_largest_batch_and_writes_nothing(
    tiny_pair, files, tmp_path, monkeypatch
):
    monkeypatch.setattr(memory, "free_bytes", lambda device: 30_000_000)
    monkeypatch.delenv("SPECLI_NO_MEMORY_CHECK", raising=False)
    result = train(*quick("eagle3", tiny_pair[0], tmp_path / "h", files, "--batch-size", "64"), code=1)
    assert "not enough memory to train" in result.output and "--batch-size" in result.output
    assert not (tmp_path / "h").exists()


# --------------------------------------------------------------------------- the math


def _chain(
    head: EagleHead, embed, tokens: torch.Tensor, features: torch.Tensor, t: int, j: int
) -> torch.Tensor:
    """What the head computes when drafting the (j+1)-th token after position t: one step over the true
    positions 0..t, then j chained steps on its own states (the true next tokens fed back)."""
    cache = HeadCache()
    fused = head.fuse(features[: t + 1]) if head.config.kind == "eagle3" else features[: t + 1]
    state = head.step(embed(tokens[1 : t + 2]), fused, torch.arange(t + 1), cache)[-1:]
    for i in range(1, j + 1):
        state = head.step(embed(tokens[t + 1 + i : t + 2 + i]), state, torch.tensor([t + i]), cache)
    return state[0]


@pytest.mark.parametrize("layers", [1, 2])
def test_training_time_test_unrolls_what_the_head_computes_when_drafting(layers):
    """Slot t of unroll step j equals the drafting chain, for one- and two-layer heads (catches a deeper
    layer that attends to the wrong keys during training)."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = init_weights(EagleHead(head_config(target, "eagle3", 384, 96, layers)), std=0.2, seed=1).eval()
    tokens = torch.randint(0, 384, (1, 14), generator=torch.Generator().manual_seed(0))
    embed = target.get_input_embeddings()
    object.__setattr__(head, "target_embed", embed)
    with torch.no_grad():
        features, _ = target_pass(target, tokens, head.config.aux_layers)
        states = unrolled_states(head, tokens, features, 3)
        for t, j in ((2, 0), (5, 1), (7, 2), (10, 2)):
            expected = _chain(head, embed, tokens[0], features[0], t, j)
            torch.testing.assert_close(states[j][0, t], expected, atol=1e-4, rtol=1e-4)


def test_packed_parallel_training_is_what_a_two_layer_peagle_head_computes():
    """A 2-layer P-EAGLE head over the packed layout equals its drafting forward over [true pairs, masks]
    (catches a deeper layer run without the packed mask)."""
    from specli.training.pard import pack
    from specli.training.peagle import make_parallel, packed_inputs, packed_states

    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    base = init_weights(EagleHead(head_config(target, "eagle3", 384, 96, 2)), std=0.2, seed=1)
    head = make_parallel(base, target, 383).eval()
    with torch.no_grad():
        head.mask_hidden.copy_(
            torch.randn(head.mask_hidden.shape, generator=torch.Generator().manual_seed(5))
        )
    window = torch.randint(0, 383, (1, 16), generator=torch.Generator().manual_seed(0))
    layout = pack(15, 4, 0.7, torch.Generator().manual_seed(2))
    with torch.no_grad():
        features, _ = target_pass(target, window, head.config.aux_layers)
        states = packed_states(head, *packed_inputs(head, window, features, layout), layout)[0]
        for i in range(0, layout.anchor.numel(), 3):
            t, j = int(layout.anchor[i]), int(layout.offset[i])
            tokens = torch.cat([window[0, 1 : t + 2], torch.full((j,), 383)])
            fill = torch.cat([head.fuse(features[0, : t + 1]), head.placeholders(j)])
            alone = head.step(head.embed_tokens(tokens), fill, torch.arange(t + 1 + j), HeadCache())[-1]
            torch.testing.assert_close(states[i], alone, atol=1e-4, rtol=1e-4)


def test_durations():
    assert parse_duration("2h") == 7200 and parse_duration("1h30m") == 5400 and parse_duration("45") == 45
    with pytest.raises(UsageError):
        parse_duration("soon")
