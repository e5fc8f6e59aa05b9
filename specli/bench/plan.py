"""What a `specli bench` will run, decided before anything loads: the bench's own options as given
(`BenchOptions`: strategies, sweeps, prompts, endpoints, repeats), checked and resolved into a `BenchPlan`
(the strategies once each, the k and tree sweeps, whether models load here or only servers are measured,
the servers, the prompts read from their file). Every usage error of those options comes from here, as a
`UsageError`, before a server is asked or a model loads. Prints nothing; imports neither torch nor httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specli.errors import UsageError
from specli.presets import MAX_DRAFT_TOKENS, MAX_TREE_NODES
from specli.settings import STRATEGIES, check_strategy

if TYPE_CHECKING:
    from specli.bench.endpoint import Endpoint
    from specli.bench.prompts import BenchPrompt

# The command imports this module with the CLI (`specli --help` included): the prompt sets and the endpoint
# client are imported only once a bench runs.


@dataclass(frozen=True)
class BenchOptions:
    """The bench command's own options, as given (the model and generation options travel apart)."""

    strategies: tuple[str, ...] = ()
    prompts: str | None = None  # a prompts file
    prompt_set: str | None = None  # a packaged set (code, chat)
    categories: tuple[str, ...] = ()
    limit: int | None = None
    sweep_k: str | None = None  # '2-8' or '2,4,8'
    sweep_tree: str | None = None  # '0,4,8,16'
    repeats: int = 1
    warmup: int = 1
    compare_hf: bool = False
    json_file: str | None = None
    endpoints: tuple[str, ...] = ()  # [NAME=]URL each
    api_key: str | None = None
    model: str | None = None
    concurrency: int = 1
    timeout: float = 60.0


@dataclass(frozen=True)
class BenchPlan:
    """The options resolved: the strategies asked for (checked, once each; none: the preset's), the k and
    tree sweeps, `local` (models load here: always but for --endpoint alone), the servers, and the prompts
    read from their file or set (None: the model chooses the packaged set once it is loaded)."""

    options: BenchOptions
    strategies: tuple[str, ...]
    ks: tuple[int, ...]
    trees: tuple[int, ...]
    local: bool
    endpoints: list[Endpoint]
    prompts: list[BenchPrompt] | None


def plan_bench(options: BenchOptions, k_given: bool = False, names_models: bool = False) -> BenchPlan:
    """Check and resolve the bench's options; a UsageError for the first one that is wrong, before
    anything loads. `k_given`: --num-draft-tokens was given (a k sweep replaces it); `names_models`:
    --preset, --target or --draft was given (a model is asked for, beside any --endpoint)."""
    strategies = tuple(dict.fromkeys(check_strategy(s) for s in options.strategies))
    ks = parse_sweep(options.sweep_k) if options.sweep_k is not None else ()
    if ks and k_given:
        raise UsageError("give --sweep-k or --num-draft-tokens, not both.")
    trees = parse_sweep_tree(options.sweep_tree) if options.sweep_tree is not None else ()
    if ks and trees:
        raise UsageError("give --sweep-k or --sweep-tree, not both (a tree row keeps the settings' k).")
    if options.prompts and options.prompt_set:
        raise UsageError("give --prompts or --set, not both.")
    local = not options.endpoints or bool(strategies or names_models)
    endpoints = check_endpoints(options, local, ks, trees)
    prompts = read_chosen_prompts(options, local)
    return BenchPlan(options, strategies, ks, trees, local, endpoints, prompts)


def check_endpoints(
    options: BenchOptions, local: bool, ks: tuple[int, ...] = (), trees: tuple[int, ...] = ()
) -> list[Endpoint]:
    """The --endpoint URLs as Endpoints (UsageError for a bad one, a label a local row could have, or
    local-only options when no model loads), after checking the `serve` extra is installed."""
    if not options.endpoints:
        return []
    try:
        import httpx  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as e:
        raise UsageError(
            f"bench --endpoint needs {e.name}, which is not installed.",
            "Install it in the specli checkout: pip install -e '.[serve]'.",
        ) from None
    if not local and options.compare_hf:
        raise UsageError("--compare-hf times a local model.", "Add --strategy (or --preset) to load one.")
    if not local and ks:
        raise UsageError("--sweep-k sweeps local strategies.", "Add --strategy (or --preset) to load one.")
    if not local and trees:
        raise UsageError("--sweep-tree sweeps local strategies: add --strategy (or --preset) to load one.")
    from specli.bench.endpoint import parse_endpoints

    return parse_endpoints(
        list(options.endpoints), options.api_key, options.model, taken=STRATEGIES if local else ()
    )


def read_chosen_prompts(options: BenchOptions, local: bool) -> list[BenchPrompt] | None:
    """The prompts of --prompts or --set (the code set for servers alone: no model chooses one), a bad
    --category or --limit refused now; None when the loaded model will choose the packaged set (then a
    category must be in one of them)."""
    from specli.bench import prompts as prompt_sets

    if options.prompts:
        source: Path | None = Path(options.prompts)
    else:
        source = prompt_sets.set_path(options.prompt_set) if options.prompt_set else None
    if source is None and not local:  # no model to choose the packaged set by
        source = prompt_sets.set_path("code")
    loaded = prompt_sets.read_prompts(source) if source else None
    if loaded is not None:  # a bad --category or --limit fails before anything loads
        prompt_sets.select_prompts(loaded, options.categories, options.limit)
    elif options.categories:  # the packaged set is chosen by the model: the category must be in one of them
        prompt_sets.check_packaged_categories(options.categories)
    return loaded


def parse_sweep(text: str) -> tuple[int, ...]:
    """'2-8' -> (2, 3, ..., 8); '2,4,8' -> (2, 4, 8); each k in 1..MAX_DRAFT_TOKENS. UsageError otherwise."""
    fix = f"Give a range like 2-8 or a list like 2,4,8 (k from 1 to {MAX_DRAFT_TOKENS})."
    try:
        if "-" in text and "," not in text:  # a list may name negative k: "-1,2" is a list
            low, high = (int(part) for part in text.split("-"))
            if low > high:
                raise UsageError(
                    f"--sweep-k '{text}' is a reversed range ({low} > {high}).",
                    f"Write it low-high: {high}-{low}.",
                )
            ks = tuple(range(low, high + 1))
        else:
            ks = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--sweep-k '{text}' is not a range or a list of numbers.", fix) from None
    low_ks = sorted({k for k in ks if k < 1})
    if low_ks:
        named = ", ".join(str(k) for k in low_ks)
        raise UsageError(
            f"--sweep-k '{text}': k {named} {'is' if len(low_ks) == 1 else 'are'} out of range.", fix
        )
    if max(ks) > MAX_DRAFT_TOKENS:
        raise UsageError(f"--sweep-k '{text}' goes past the largest k, {MAX_DRAFT_TOKENS}.", fix)
    return tuple(sorted(set(ks)))


def parse_sweep_tree(text: str) -> tuple[int, ...]:
    """'0,4,8,16,32' -> (0, 4, 8, 16, 32): tree sizes (nodes a round), each 0..MAX_TREE_NODES (0: a chain
    row, beside the trees in the same run), sorted, once each. A one-line UsageError otherwise."""
    fix = f"give a list of tree sizes like 4,8,16,32 (each 1 to {MAX_TREE_NODES}; 0 adds the chain)"
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--sweep-tree '{text}' is not a list of numbers: {fix}.") from None
    bad = sorted({n for n in sizes if not 0 <= n <= MAX_TREE_NODES})
    if bad:
        named = ", ".join(str(n) for n in bad)
        sizes_are = f"size {named} is" if len(bad) == 1 else f"sizes {named} are"
        raise UsageError(f"--sweep-tree '{text}': {sizes_are} out of range: {fix}.")
    return tuple(sorted(set(sizes)))
