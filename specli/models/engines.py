"""Which engine evaluates the models of a load, as one table (`ENGINE_TABLE`): `torch` (transformers'
forwards, every strategy) and `llama.cpp` (GGUF files in their own quantization; strategies none,
lookup and draft). Each line names the module that loads one model for it (an object implementing the
loop's seam, `specli.engine.model.TargetModel`), what it runs, and what it refuses; choosing an engine,
refusing a strategy or a tree, and loading read the table, so a third engine is one folder under
models/ and one line here (docs/design.md §2, "Engines"). No torch here: the CLI checks --engine
before anything heavy is imported."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from specli.errors import UsageError

AUTO, TORCH, LLAMA = "auto", "torch", "llama.cpp"


@dataclass(frozen=True)
class Engine:
    """One engine. `loader`: the module whose `load_model(name, folder)` gives a model the loop drives
    (None: the torch path of `specli.load`, transformers' own loading); `gguf_only`: it runs GGUF files
    only (auto picks it for a GGUF target when `available` says its package is installed); `refuses`:
    strategy -> why it cannot run here; `no_trees`: why token trees cannot (None: they run); `aliases`:
    other names --engine accepts."""

    loader: str | None = None
    gguf_only: bool = False
    available: str | None = None  # "module:function" -> bool: its package is installed
    refuses: Mapping[str, str] = field(default_factory=dict)
    no_trees: str | None = None
    aliases: tuple[str, ...] = ()


ENGINE_TABLE: Mapping[str, Engine] = MappingProxyType(
    {
        TORCH: Engine(aliases=("transformers", "pytorch")),
        LLAMA: Engine(
            loader="specli.models.llama_cpp.load",
            gguf_only=True,
            available="specli.models.llama_cpp.library:available",
            refuses={
                "self": "it drafts with the target's first layers, which llama.cpp runs only as a whole "
                "model",
                "eagle": "its head reads the target's inner hidden states, which a llama.cpp forward does "
                "not return",
            },
            # A tree round's kept cells stay where the tree put them in llama.cpp's KV buffer, out of
            # position order, and attention summed over the cells in another order rounds differently:
            # measured, greedy lookup trees left plain decoding's output on 2 of 4 editing prompts
            # (docs/design.md §15). Chains are exact.
            no_trees="a tree's kept KV cells sit out of position order there, and attention over them "
            "rounds unlike plain decoding",
            aliases=("llama-cpp", "llamacpp", "llama_cpp"),
        ),
    }
)
ENGINES = (AUTO, *ENGINE_TABLE)


def check_engine(name: str) -> str:
    """`name` as one of ENGINES (aliases: llama-cpp, llamacpp, transformers, ...), else UsageError."""
    value = str(name).strip().lower()
    for engine, entry in ENGINE_TABLE.items():
        if value in entry.aliases:
            value = engine
    if value not in ENGINES:
        raise UsageError(f"unknown engine '{name}'.", f"Use one of: {', '.join(ENGINES)}.")
    return value


def refusal(strategy: str, engine: str = LLAMA) -> str | None:
    """Why `strategy` cannot run on `engine` (None: it runs)."""
    return ENGINE_TABLE[engine].refuses.get(str(strategy))


def _runs(engine: str) -> str:
    strategies = ("none", "lookup", "draft", "self", "eagle", "heads")
    names = [s for s in strategies if s not in ENGINE_TABLE[engine].refuses]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def check_strategies(strategies: Sequence[str], engine: str = LLAMA) -> None:
    """UsageError, one line, for the first strategy `engine` cannot run."""
    for strategy in strategies:
        why = refusal(strategy, engine)
        if why is not None:
            raise UsageError(
                f"strategy '{strategy}' does not run on the {engine} engine: {why}.",
                f"Use --engine torch for it, or --strategy {_runs(engine)}.",
            )


def check_tree(tree: int, engine: str = LLAMA) -> None:
    """UsageError, one line, for token trees on an engine that cannot run them (its `no_trees`)."""
    why = ENGINE_TABLE[engine].no_trees
    if tree > 0 and why is not None:
        raise UsageError(
            f"--tree does not run on the {engine} engine: {why}.",
            f"Drop --tree (chains are exact on {engine}), or use --engine torch for trees.",
        )


def choose(engine: str, *, gguf_target: bool, strategies: Sequence[str], installed: bool) -> str:
    """The engine a load uses. auto: llama.cpp for a GGUF target when llama-cpp-python is installed and
    every strategy runs on it, else torch. llama.cpp asked outright: UsageError (exit 2) for a target
    that is not a GGUF, a strategy it cannot run, or the package missing (naming the install)."""
    engine = check_engine(engine)
    if engine == TORCH:
        return TORCH
    runs = all(refusal(s) is None for s in strategies)
    if engine == AUTO:
        return LLAMA if gguf_target and installed and runs else TORCH
    if not gguf_target:
        raise UsageError(
            "--engine llama.cpp runs GGUF files, and the target is not one.",
            "Pass a .gguf file, an ollama:NAME or a GGUF preset (smollm2-135m, gemma3-270m), or use "
            "--engine torch.",
        )
    check_strategies(strategies)
    if not installed:
        from specli.models.llama_cpp.library import missing_error

        raise missing_error()
    return LLAMA


def installed(engine: str) -> bool:
    """Whether `engine`'s package is installed (an engine without an `available` check always is)."""
    check = ENGINE_TABLE[engine].available
    if check is None:
        return True
    module, _, function = check.partition(":")
    return bool(getattr(importlib.import_module(module), function)())


def model_loader(engine: str) -> Callable[[str, Path], Any]:
    """`load_model(name, folder)` of `engine`'s loader module: one model the loop drives (the engine
    table's `loader`; torch has none here: `specli.load` loads through transformers)."""
    module = ENGINE_TABLE[engine].loader
    if module is None:
        raise ValueError(f"the {engine} engine loads through transformers, not a model loader")
    return importlib.import_module(module).load_model
