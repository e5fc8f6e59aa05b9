"""Tiny models and tokenizers built by the tests themselves (docs/design.md §6): random weights, small vocab.

Everything is saved with `save_pretrained` so tests load through the same path users hit.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

from specli.training.bpe import train_tokenizer

EOS = "<|endoftext|>"
CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
    "    def push(self, item):\n        self.items.append(item)\n",
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens and verifies them.",
    "Hôm nay trời rất đẹp. Ça va très bien, merci! 東京は晴れです。 🙂🚀",
    "import os\nimport sys\n\nfor i in range(10):\n    print(i, os.path.join('a', 'b'))\n",
]


def build_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a few lines (the recipe's own trainer): round-trips any text, EOS id 0."""
    tokenizer = train_tokenizer(CORPUS * 4, vocab_size)
    tokenizer.bos_token = EOS
    return tokenizer


def tiny_config(
    arch: str,
    vocab_size: int,
    *,
    layers: int = 2,
    hidden: int = 64,
    max_positions: int = 256,
    eos_token_id: int | list[int] | None = 0,
    init_range: float = 0.2,
    **overrides,
):
    """A small config of a given architecture; `init_range` large enough that logits are peaked."""
    if arch == "gpt2":
        kw = dict(n_embd=hidden, n_layer=layers, n_head=4, n_positions=max_positions)
    else:
        kw = dict(
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=max_positions,
        )
        if arch in ("phi3",):
            kw["pad_token_id"] = 0
    kw.update(vocab_size=vocab_size, initializer_range=init_range, bos_token_id=0, eos_token_id=eos_token_id)
    kw.update(overrides)
    return AutoConfig.for_model(arch, **kw)


def make_model(arch: str = "llama", vocab_size: int = 384, *, seed: int = 0, **config_kw):
    """An in-memory random model in eval mode (float32, CPU)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(arch, vocab_size, **config_kw))
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.generation_config.pad_token_id = 0
    return model.eval()


def save_model(path: Path, model, tokenizer: PreTrainedTokenizerFast | None = None) -> Path:
    """Save a model (safetensors) and optionally its tokenizer into `path`; returns `path`."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def _old_sliding_cache() -> bool:
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__) < Version("5.18")


OLD_SLIDING_CACHE = _old_sliding_cache()  # sliding layers cannot take forwards in a row before a crop


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models gain nothing from threads, and OpenMP threads on a busy 2-core machine spin-wait."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory, tokenizer) -> tuple[Path, Path]:
    """(target_dir, draft_dir): a 4-layer llama target and a 1-layer llama drafter sharing a tokenizer."""
    root = tmp_path_factory.mktemp("pair")
    vocab = len(tokenizer)
    target = save_model(root / "target", make_model("llama", vocab, layers=4, seed=1), tokenizer)
    draft = save_model(root / "draft", make_model("llama", vocab, layers=1, seed=2), tokenizer)
    return target, draft


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket fails (as a connection error) instead of reaching the network. Files
    that test hub paths use it for every test (pytestmark)."""

    def refuse(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# Each case through the console entry point in one fresh interpreter (one start-up for all): its exit
# code, what it printed on stderr, and whether torch or transformers was imported by then.
_CLI_CASES = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from specli.cli import main
    report = []
    for args in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main(args)
                code = 0
            except SystemExit as e:
                code = e.code
        heavy = [m for m in ("torch", "transformers") if m in sys.modules]
        report.append({"code": code, "stderr": err.getvalue(), "heavy": heavy})
    print(json.dumps(report))
    """
)


def run_cli_cases(cases: list[list[str]], cwd: Path, env: dict[str, str] | None = None) -> list[dict]:
    """[{"code", "stderr", "heavy"}] for each argument list, run by `specli.cli.main` in one subprocess."""
    result = subprocess.run(
        [sys.executable, "-c", _CLI_CASES, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
