"""Which engine evaluates the models of a load: `torch` (transformers' forwards, every strategy) or
`llama.cpp` (GGUF files in their own quantization; strategies none, lookup and draft). No torch here:
the CLI checks --engine before anything heavy is imported."""

from __future__ import annotations

from collections.abc import Sequence

from specli.errors import UsageError

AUTO, TORCH, LLAMA = "auto", "torch", "llama.cpp"
ENGINES = (AUTO, TORCH, LLAMA)
_ALIASES = {
    "llama-cpp": LLAMA,
    "llamacpp": LLAMA,
    "llama_cpp": LLAMA,
    "transformers": TORCH,
    "pytorch": TORCH,
}
# strategies that need what llama.cpp's forward does not give, and why (the refusal names --engine torch)
_NEEDS_TORCH = {
    "self": "it drafts with the target's first layers, which llama.cpp runs only as a whole model",
    "eagle": "its head reads the target's inner hidden states, which a llama.cpp forward does not return",
}


def check_engine(name: str) -> str:
    """`name` as one of ENGINES (aliases: llama-cpp, llamacpp, transformers, ...), else UsageError."""
    value = str(name).strip().lower()
    value = _ALIASES.get(value, value)
    if value not in ENGINES:
        raise UsageError(f"unknown engine '{name}'.", "Use one of: auto, torch, llama.cpp.")
    return value


def refusal(strategy: str) -> str | None:
    """Why `strategy` cannot run on the llama.cpp engine (None: it runs)."""
    return _NEEDS_TORCH.get(str(strategy))


def check_strategies(strategies: Sequence[str]) -> None:
    """UsageError, one line, for the first strategy the llama.cpp engine cannot run."""
    for strategy in strategies:
        why = refusal(strategy)
        if why is not None:
            raise UsageError(
                f"strategy '{strategy}' does not run on the llama.cpp engine: {why}.",
                "Use --engine torch for it, or --strategy none, lookup or draft.",
            )


def check_tree(tree: int) -> None:
    """UsageError, one line, for token trees on the llama.cpp engine. A tree round's kept cells stay
    where the tree put them in llama.cpp's KV buffer, out of position order, and attention summed over
    the cells in another order rounds differently: measured, greedy lookup trees left plain decoding's
    output on 2 of 4 editing prompts (docs/design.md §15). Chains are exact."""
    if tree > 0:
        raise UsageError(
            "--tree does not run on the llama.cpp engine: a tree's kept KV cells sit out of position "
            "order there, and attention over them rounds unlike plain decoding.",
            "Drop --tree (chains are exact on llama.cpp), or use --engine torch for trees.",
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
