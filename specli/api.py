"""Python API: `load(...)` a target/drafter pair once, then `generate` or `stream` many times.

import specli
pair = specli.load("llama-8b-1b")               # or load(target="./my-model", draft="./small")
result = pair.generate("def fibonacci(n):", max_new_tokens=64)
print(result.text, result.stats.acceptance_rate)
for round in pair.stream("Hello", temperature=0.7, seed=1):
    print(round.text, end="")                   # what the round added; round.committed: its ids
settings = pair.settings(temperature=0.7, seed=1)  # the same settings, resolved once (specli.settings)
pair.generate("Hello", settings=settings)

`load` runs in four steps: sources (what to load, arguments over the preset) -> checks (configs and
tokenizers only) -> plan (memory and GPUs, `specli.models.plan`) -> weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specli.errors import UsageError
from specli.models import engines, head_formats, loading, plan
from specli.models.blockwise_heads import BlockwiseHeads, HeadsConfig
from specli.models.cached_lm import CachedLM
from specli.models.eagle_head import EagleHead
from specli.models.layer_stack import check_architecture
from specli.models.placement import Placement
from specli.models.plan import ModelToLoad
from specli.pair import Pair
from specli.presets import DEFAULT_PRESET, Preset, resolve_preset
from specli.settings import check_strategy, preset_speculation, resolve_settings
from specli.strategies import Model, Strategy, check_compile, entry
from specli.threads import AUTO, BusyProbe, apply_threads


def check_model_options(*, device: str, dtype: str | None, quant: str | None) -> None:
    """Cheap checks of --device/--dtype/--quant before anything loads."""
    loading.resolve_device(device)
    if dtype is not None:
        loading.resolve_dtype(dtype, torch.device("cpu"))
    if quant is not None and quant not in loading.QUANT_MODES:
        raise UsageError(f"unknown quantization '{quant}'.", "Use one of: none, 8bit, 4bit.")


# --- load: sources -> checks -> plan -> weights ------------------------------------------------------


def preset_for(
    preset: str | Preset | None,
    *,
    target: str | None = None,
    draft: str | None = None,
    strategy: str | Sequence[str] | None = None,
) -> Preset | None:
    """The preset `load` uses: the named one, or the embedded `tiny` one when no target is named (a
    drafter or EAGLE head named alone drafts for the default target, e.g. embedded:tiny-pard)."""
    if isinstance(preset, Preset):
        return preset
    if preset is None and target is None:
        preset = DEFAULT_PRESET
    return resolve_preset(preset) if preset else None


def load(
    preset: str | Preset | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    strategy: str | Sequence[str] | None = None,
    device: str = "auto",
    dtype: str | None = None,
    quant: str | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    download_bars: Callable[[str], Any] | None = None,
    threads: int | str | None = AUTO,
    progress: bool = False,
    compile: bool = False,
    lean: bool = True,
    tree: int | None = None,
    tree_width: int | None = None,
    engine: str | None = None,
) -> Pair:
    """Load a pair from a preset (name, path or Preset) and/or explicit models; explicit arguments win.

    With no preset, target or draft, the embedded `tiny` preset is used (offline, CPU-sized).

    `strategy` may name several strategies (bench runs them all on one pair): everything they need is
    loaded and the first becomes the pair's own. For 'eagle', `draft` names the EAGLE head (else the
    preset's head). A strategy left out whose drafter or head the preset names loads it on the first
    generation that asks for it (once, with the same checks). `dtype` applies to both models, `quant` to
    the target only. Tokenizers and head shapes are checked before any weights load. download_bars(model)
    may return a tqdm class for huggingface_hub's download bars. With device "auto" and several GPUs, a
    target too big for the first GPU is split over as few GPUs as hold it (see `placement`), the drafter
    beside its LM head.

    `threads` sets torch's CPU threads for the process (torch.set_num_threads): a number, "auto" (the
    cores other processes left free while the models loaded, `specli.threads`; torch's default threads
    collapse when another process keeps the CPU busy) or None (leave torch's setting alone).
    `progress=True` shows transformers' and huggingface_hub's own progress bars while loading; by default
    they stay quiet (download_bars, when given, draws the downloads either way).

    `compile=True` runs target and draft model over static KV caches with torch.compile'd forwards (CUDA
    graphs on CUDA; docs/design.md §12): faster steps once warm. Every graph a generation uses is built
    before its first round (`Pair.warm_up`, timed apart as `compile_time`; minutes cold on a CPU), and
    one generation runs at a time per pair. Strategy 'self', sliding-
    window models and models without a static cache are refused (UsageError) before generating.

    `lean=True` (the default) runs the drafter's steps through specli's own forward where it reproduces
    the model (Llama / Mistral / Qwen2 / Qwen3 draft models, every EAGLE head; docs/design.md §13):
    the same proposals at a fraction of the per-step overhead. `Pair.drafter_step()` says which ran.
    A lean step copies the q/k/v weights when first used: after changing a drafter's weights in place,
    load the pair again (or pass lean=False).

    `tree` / `tree_width` set the pair's token trees (None: the preset's; docs/design.md §14): tree > 0
    drafts trees of up to that many nodes a round, tree_width nodes expanded per depth; every generation
    uses them unless it overrides them (`pair.generate(..., tree=0)`). Checked before any weights load:
    a value out of range, or a tree with a strategy that drafts chains only (self), is a UsageError.

    `engine` (None: the preset's, else "auto"): "torch" evaluates the models with transformers;
    "llama.cpp" with llama.cpp, on the GGUF file itself in its own quantization (strategies none,
    lookup, draft and heads, chains only; a drafter that is no GGUF is written as one once into
    specli's cache; needs llama-cpp-python); "auto" picks llama.cpp for a GGUF target when it is
    installed, every strategy runs on it and neither dtype nor quant was asked for, else torch
    (docs/design.md §15).
    `pair.engine` says which ran.
    """
    spec = preset_for(preset, target=target, draft=draft, strategy=strategy)
    wanted = _sources(spec, target=target, draft=draft, strategy=strategy, dtype=dtype, quant=quant)
    chosen = choose_engine(
        engine,
        spec,
        wanted.models[0].name,
        wanted.strategies,
        dtype=dtype,
        quant=quant,
        compile=compile,
        device=device,
    )
    trees = {name: value for name, value in (("tree", tree), ("tree_width", tree_width)) if value is not None}
    if trees:  # their ranges, and a strategy that drafts them, before any weights load
        resolve_settings(spec, strategy=wanted.strategies[0], **trees)
    if compile:
        for name in wanted.strategies:  # before any weights load
            check_compile(name)
    if chosen != engines.TORCH:
        return _load_on(
            chosen,
            spec,
            wanted,
            _Fetcher(allow_pickle, trust_remote_code, download_bars),
            threads,
            progress,
            trees,
        )
    dev = loading.resolve_device(device)
    probe = BusyProbe()  # what other processes use while we load decides threads="auto"
    fetcher = _Fetcher(allow_pickle, trust_remote_code, download_bars)
    with _progress_bars(progress, hub=download_bars is None):
        models, tokenizer, heads = _fetch_and_check(wanted, fetcher)
        needs = [plan.head_need(head, models[0], dev, trust_remote_code) for head in heads.values()]
        placement = plan.plan_pair(models, dev, device, trust_remote_code, heads=needs)
        target_model, draft_model = _load_weights(models, placement, dev, fetcher)
        loaded = _loaded_heads(heads, target_model, fetcher, CachedLM(target_model).output_device)
    apply_threads(threads, probe)
    pair = _pair(
        spec, wanted, models, tokenizer, (target_model, draft_model), placement=placement, compile=compile,
        lean=lean, **loaded,
    )  # fmt: skip
    pair.later = _Later(spec, models[0], fetcher, dtype, progress) if spec is not None else None
    k = pair.parallel_draft_tokens()
    if draft is not None and k is not None:  # a drafter the preset did not pick brings its own k
        pair.speculation = pair.speculation.model_copy(update={"num_draft_tokens": k})
    if trees:
        pair.speculation = pair.speculation.model_copy(update=trees)
    return pair


def _pair(
    spec: Preset | None,
    wanted: _Wanted,
    models: list[ModelToLoad],
    tokenizer: Any,
    weights: tuple[Any, Any | None],
    **options: Any,
) -> Pair:
    """The Pair of loaded `weights` (target, drafter or None) on either engine, with the preset's
    generation and speculation settings (its k is its own strategy's); `options`: Pair's own."""
    target_model, draft_model = weights
    return Pair(
        target_model,
        tokenizer,
        draft_model,
        strategy=wanted.strategies[0],
        target_name=models[0].name,
        draft_name=models[1].name if draft_model is not None else None,
        generation=spec.generation if spec else None,
        speculation=preset_speculation(spec) if spec else None,
        **options,
    )


def choose_engine(
    engine: str | None,
    spec: Preset | None,
    target: str,
    strategies: Sequence[str],
    *,
    dtype: str | None = None,
    quant: str | None = None,
    compile: bool = False,
    device: str = "auto",
) -> str:
    """The engine `load` uses (`engines.choose`): `engine`, else the preset's, else auto; auto keeps
    torch when a dtype, a bitsandbytes quantization, --compile or a GPU was asked for (transformers'
    knobs). llama.cpp asked outright with one of those: UsageError."""
    asked = engines.check_engine(engine or (spec.engine if spec else engines.AUTO))
    torch_only = [
        name
        for name, given in (
            ("--dtype", dtype not in (None, "auto")),
            ("--quant", quant not in (None, "none")),
            ("--compile", compile),
            ("--device", device.strip().lower() not in ("auto", "cpu")),
        )
        if given
    ]
    if torch_only and asked == engines.AUTO:
        return engines.TORCH
    if torch_only and asked == engines.LLAMA:
        raise UsageError(
            f"{', '.join(torch_only)} {'is' if len(torch_only) == 1 else 'are'} for the torch engine; "
            "llama.cpp runs the GGUF in its own quantization on the CPU.",
            "Drop them, or use --engine torch.",
        )
    from specli.models.llama_cpp.load import is_gguf

    installed = engines.installed(engines.LLAMA)
    return engines.choose(asked, gguf_target=is_gguf(target), strategies=strategies, installed=installed)


def _load_on(
    engine: str,
    spec: Preset | None,
    wanted: _Wanted,
    fetcher: _Fetcher,
    threads: int | str | None,
    progress: bool,
    trees: dict[str, int],
) -> Pair:
    """`load` on an engine other than torch (the engine table's loader; llama.cpp): configs and
    tokenizers as for torch (a GGUF's metadata, read into specli's cache without weights), the same
    tokenizer check for a drafter, then that engine's models of the files themselves."""
    load_model = engines.model_loader(engine)
    probe = BusyProbe()
    with _progress_bars(progress, hub=fetcher.download_bars is None):
        models, tokenizer, heads = _fetch_and_check(wanted, fetcher)
    apply_threads(threads, probe)
    target_model = load_model(models[0].name, models[0].folder)
    draft_model = load_model(models[1].name, models[1].folder) if len(models) > 1 else None
    # the heads beside the LM head llama.cpp's file gives torch (llama_cpp.lm), on the CPU
    loaded = _loaded_heads(heads, target_model, fetcher, torch.device("cpu"))
    pair = _pair(spec, wanted, models, tokenizer, (target_model, draft_model), **loaded)
    pair.later = _Later(spec, models[0], fetcher, None, progress) if spec is not None else None
    if trees:
        pair.speculation = pair.speculation.model_copy(update=trees)
    return pair


@contextmanager
def _progress_bars(on: bool, hub: bool) -> Iterator[None]:
    """transformers' "Loading weights" bars (and, when `hub`, huggingface_hub's download bars) on or off
    for the block, then as they were."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    def set_bars(transformers_on: bool, hub_on: bool | None) -> None:
        (hf_logging.enable_progress_bar if transformers_on else hf_logging.disable_progress_bar)()
        if hub_on is not None:
            (hub_utils.enable_progress_bars if hub_on else hub_utils.disable_progress_bars)()

    before = (hf_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled())
    set_bars(on, on if hub else None)
    try:
        yield
    finally:
        set_bars(before[0], before[1] if hub else None)


@dataclass(frozen=True)
class _Wanted:
    """What `load` fetches: the strategies, the target and drafter (models), and by slot an EAGLE head
    (Model.HEAD) and blockwise heads (Model.HEADS)."""

    strategies: tuple[str, ...]
    models: list[ModelToLoad]
    heads: dict[Model, ModelToLoad] = field(default_factory=dict)


def _sources(
    spec: Preset | None,
    *,
    target: str | None,
    draft: str | None,
    strategy: str | Sequence[str] | None,
    dtype: str | None,
    quant: str | None,
) -> _Wanted:
    """The strategies and what to load (target first, then the drafter if a strategy needs one, and the
    EAGLE head if one does): explicit arguments over the preset. A model named on the command line gets
    'auto' dtype, not the preset's."""
    target_source = target or (spec.target.model if spec else None)
    if target_source is None:
        raise UsageError(
            "no model given.", "Pass --preset NAME (see `specli presets list`) or --target MODEL."
        )
    draft_source = draft or (spec.draft.model if spec and spec.draft else None)
    if isinstance(strategy, str) or strategy is None:
        strategy = [
            strategy or (spec.strategy if spec else Strategy.DRAFT if draft_source else Strategy.NONE)
        ]
    strategies = tuple(dict.fromkeys(check_strategy(s) for s in strategy))
    needs = {entry(s).model: s for s in reversed(strategies)}  # the weights each first strategy drafts with
    heads = _head_sources(spec, strategies, needs, draft, dtype)
    if draft and heads:  # --draft named a head, so the preset's drafter model (not a head) is the drafter's
        drafter = spec.draft if spec and not spec.drafts_with_head else None
        draft_source = drafter.model if drafter else None
    if Model.DRAFT not in needs:
        draft_source = None
    elif draft_source is None:
        raise UsageError(
            f"strategy '{needs[Model.DRAFT]}' needs a drafter model.",
            "Pass --draft MODEL, or use --strategy none for plain decoding.",
        )
    preset_target = spec.target if spec and not target else None
    models = [
        ModelToLoad(
            target_source,
            dtype=dtype or (preset_target.dtype if preset_target else "auto"),
            quant=quant or (preset_target.quantization if preset_target else "none"),
        )
    ]
    if draft_source is not None:
        preset_draft = spec.draft if spec and spec.draft and draft_source == spec.draft.model else None
        models.append(
            ModelToLoad(
                draft_source,
                dtype=dtype or (preset_draft.dtype if preset_draft else "auto"),
                quant=preset_draft.quantization if preset_draft else "none",
            )
        )
    return _Wanted(strategies, models, heads)


def _head_sources(
    spec: Preset | None,
    strategies: Sequence[str],
    needs: dict[Model | None, str],
    draft: str | None,
    dtype: str | None,
) -> dict[Model, ModelToLoad]:
    """The heads to load, by slot: `draft` names the head of the first of `strategies` that drafts with
    one, and the preset names the others (`head:` / `heads:`, or its `draft:` when its own
    strategy drafts with that kind); UsageError for a slot nothing names."""
    heads: dict[Model, ModelToLoad] = {}
    slots = [m for m in needs if m is not None and m.is_head]
    for slot in sorted(slots, key=lambda m: strategies.index(needs[m])):
        named = draft if not heads else None
        preset_head = None
        if spec is not None and named is None:
            preset_head = spec.eagle_head if slot == Model.HEAD else spec.blockwise_heads
        source = named or (preset_head.model if preset_head else None)
        if source is None:
            blockwise = slot == Model.HEADS
            raise UsageError(
                f"strategy '{needs[slot]}' needs {'blockwise heads' if blockwise else 'an EAGLE head'}.",
                "Pass --draft FOLDER (heads from `specli train heads`)."
                if blockwise
                else "Pass --draft HEAD (a folder, hub id or embedded:NAME, e.g. embedded:tiny-eagle3).",
            )
        heads[slot] = ModelToLoad(source, dtype=dtype or (preset_head.dtype if preset_head else "auto"))
    return heads


@dataclass(frozen=True)
class _Fetcher:
    """Model folders from local paths, the embedded models or the hub (configs first, weights later)."""

    allow_pickle: bool
    trust_remote_code: bool
    download_bars: Callable[[str], Any] | None

    def folder(self, model: ModelToLoad, weights: bool = False) -> Any:
        return loading.resolve_source(
            model.name,
            allow_pickle=self.allow_pickle,
            trust_remote_code=self.trust_remote_code,
            weights=weights,
            tqdm_class=self.download_bars(model.name) if self.download_bars else None,
            dtype=model.dtype,  # a GGUF is dequantized into this dtype (auto: float32)
        )

    def tokenizer(self, model: ModelToLoad) -> Any:
        return loading.load_tokenizer(model.folder, trust_remote_code=self.trust_remote_code, name=model.name)


def _fetch_and_check(
    wanted: _Wanted, fetcher: _Fetcher
) -> tuple[list[ModelToLoad], Any, dict[Model, ModelToLoad]]:
    """Configs and tokenizers only, so every check runs before any weights are downloaded: the target's
    architecture for a strategy drafting with its own layers ('self'), one tokenizer shared by target and
    drafter, each head's kind and shapes against the target's. Returns the models with their folders, the
    tokenizer and the heads by slot with their folders and configs."""
    target = replace(wanted.models[0], folder=fetcher.folder(wanted.models[0]))
    head_formats.refuse_head_as_model(target.folder, target.name, "target")  # it has no tokenizer
    tokenizer = fetcher.tokenizer(target)
    target_config = loading.read_config(target.folder) or {}
    for strategy in wanted.strategies:  # refuse an unsupported architecture before any weights load
        if entry(strategy).target_layers:
            check_architecture(str(target_config.get("model_type", "?")), strategy)
    models = [target]
    for model in wanted.models[1:]:
        draft = replace(model, folder=fetcher.folder(model))
        head_formats.refuse_head_as_model(draft.folder, draft.name)
        loading.check_tokenizers(tokenizer, fetcher.tokenizer(draft), target.name, draft.name)
        models.append(draft)
    heads = {}
    for slot, head in wanted.heads.items():
        head = replace(head, folder=fetcher.folder(head))
        config = head_formats.read_head_config(head.folder, target_config, name=head.name)
        head_formats.check_head(config, target_config, head.name, target.name)
        _check_head_kind(config, slot, head.name)
        heads[slot] = replace(head, config=config)
    return models, tokenizer, heads


def _check_head_kind(config: Any, slot: Model, name: str) -> None:
    """UsageError, one line, when a slot is given the other kind: blockwise heads (a HeadsConfig) are
    strategy heads' only, EAGLE heads strategy eagle's."""
    blockwise = isinstance(config, HeadsConfig)
    if blockwise and slot == Model.HEAD:
        raise UsageError(f"'{name}' holds blockwise heads: use --strategy heads with it, not 'eagle'.")
    if not blockwise and slot == Model.HEADS:
        raise UsageError(
            f"'{name}' holds an EAGLE head: use --strategy eagle with it; strategy 'heads' needs "
            "blockwise heads (--draft FOLDER, written by `specli train heads`)."
        )


def _load_weights(
    models: list[ModelToLoad], placement: Placement | None, device: torch.device, fetcher: _Fetcher
) -> tuple[Any, Any | None]:
    """The target (split over GPUs when `placement` says so, else whole on `device`), then the drafter
    (beside the target's LM head when split)."""

    def weights(model: ModelToLoad, **where: Any) -> Any:
        return _model_weights(model, device, fetcher, **where)

    split = placement.max_memory if placement is not None else None  # None: whole on `device`
    target_model = weights(models[0], device=device, max_memory=split)
    if len(models) == 1:
        return target_model, None
    draft_device = device if placement is None else plan.draft_device(target_model, placement)
    return target_model, weights(models[1], device=draft_device)


def _model_weights(model: ModelToLoad, planned: torch.device, fetcher: _Fetcher, /, **where: Any) -> Any:
    """One model's weights (fetched now if they were not), at the dtype `model` resolves to on the
    `planned` device; `where`: load_model's device and max_memory."""
    return loading.load_model(
        fetcher.folder(model, weights=True),
        dtype=plan.dtype_for(model, planned, fetcher.trust_remote_code),
        quant=model.quant,
        allow_pickle=fetcher.allow_pickle,
        trust_remote_code=fetcher.trust_remote_code,
        name=model.name,
        **where,
    )


def _loaded_heads(
    heads: dict[Model, ModelToLoad], target_model: Any, fetcher: _Fetcher, device: torch.device
) -> dict[str, Any]:
    """The heads of each slot loaded on `device`, as Pair's options (head / head_name for the EAGLE
    head, heads / heads_name for blockwise heads; absent slots None)."""
    options: dict[str, Any] = {}
    slots = ((Model.HEAD, ("head", "head_name")), (Model.HEADS, ("heads", "heads_name")))
    for slot, (weights, name) in slots:
        head = heads.get(slot)
        options[weights] = _load_head(head, target_model, fetcher, device) if head is not None else None
        options[name] = head.name if head is not None else None
    return options


def _load_head(
    head: ModelToLoad, target_model: Any, fetcher: _Fetcher, device: torch.device
) -> EagleHead | BlockwiseHeads:
    """The EAGLE head's (or blockwise heads') weights on `device` (the target's LM head's), in the LM
    head's dtype unless asked."""
    lm_head = target_model.get_output_embeddings()
    dtype = lm_head.weight.dtype if head.dtype == "auto" else loading.resolve_dtype(head.dtype, device)
    return head_formats.load_head(
        fetcher.folder(head, weights=True),
        target_model.config,
        allow_pickle=fetcher.allow_pickle,
        dtype=dtype,
        device=device,
        name=head.name,
    )


@dataclass(frozen=True)
class _Later:
    """What a pair's preset names for a strategy the pair was loaded without (its drafter, its EAGLE
    head), loaded on first use with `load`'s own fetcher, progress bars and checks: configs and tokenizer
    first, then the memory check against what the device has left, then the weights beside the target's
    LM head (where the planner puts a drafter or head), handed to `Pair.attach` (`pair.LoadsLater`)."""

    spec: Preset
    target: ModelToLoad  # with its folder
    fetcher: _Fetcher
    dtype: str | None  # load's dtype argument (None: the preset's)
    progress: bool

    def load(self, pair: Pair, model: Model) -> bool:
        """Load the preset's drafter model, EAGLE head or blockwise heads into `pair`; False when the
        preset names none."""
        return self._load_drafter(pair) if model == Model.DRAFT else self._load_head(pair, model)

    def _load_drafter(self, pair: Pair) -> bool:
        named = self.spec.draft if not self.spec.drafts_with_head else None  # else a head
        if named is None:
            return False
        model = ModelToLoad(named.model, dtype=self.dtype or named.dtype, quant=named.quantization)
        with _progress_bars(self.progress, hub=self.fetcher.download_bars is None):
            model = replace(model, folder=self.fetcher.folder(model))
            head_formats.refuse_head_as_model(model.folder, model.name)
            tokenizer = self.fetcher.tokenizer(model)
            loading.check_tokenizers(pair.tokenizer, tokenizer, pair.target_name, model.name)
            if pair.engine != engines.TORCH:  # the drafter's file for that engine (llama.cpp: its GGUF)
                load_model = engines.model_loader(pair.engine)
                pair.attach(model.name, draft_model=load_model(model.name, model.folder))
                return True
            device = CachedLM(pair.target_model).output_device
            needs = plan.estimate_needs([model], device, self.fetcher.trust_remote_code)
            plan.check_addition(needs or [], device, "specli.load(..., strategy='draft')")
            pair.attach(model.name, draft_model=_model_weights(model, device, self.fetcher, device=device))
        return True

    def _load_head(self, pair: Pair, slot: Model) -> bool:
        named = self.spec.eagle_head if slot == Model.HEAD else self.spec.blockwise_heads
        if named is None:
            return False
        head = ModelToLoad(named.model, dtype=self.dtype or named.dtype)
        device = pair.target.output_device
        trust = self.fetcher.trust_remote_code
        with _progress_bars(self.progress, hub=self.fetcher.download_bars is None):
            head = replace(head, folder=self.fetcher.folder(head))
            target_config = loading.read_config(self.target.folder) or {}
            config = head_formats.read_head_config(head.folder, target_config, name=head.name)
            head_formats.check_head(config, target_config, head.name, pair.target_name)
            _check_head_kind(config, slot, head.name)
            head = replace(head, config=config)
            need = plan.head_need(head, self.target, device, trust)
            strategy = "eagle" if slot == Model.HEAD else "heads"
            plan.check_addition([need], device, f"specli.load(..., strategy='{strategy}')")
            pair.attach(head.name, head=_load_head(head, pair.target_model, self.fetcher, device))
        return True
