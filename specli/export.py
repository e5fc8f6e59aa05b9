"""`specli export ENGINE`: the command that starts vLLM, SGLang or llama.cpp's llama-server serving the
same pair with the same speculation.

Two steps: `resolve_pair` turns a preset and the command line's choices into an `ExportPair` (reading
config.json files only: of local folders, of embedded models, of the hub cache; nothing is downloaded,
no weights load, torch is never imported), then `export(engine, pair, options)` maps it to that engine's
launch command, a pure function. What an engine cannot run is refused with one `UsageError` line naming
what it can; what it runs without a counterpart for one of specli's settings comes back as a note that
names the setting, so nothing is dropped silently.

Token trees (--tree N, --tree-width W; docs/design.md §14) go to the engines that verify trees: SGLang grows
the same EAGLE-2 tree (W children of the W likeliest nodes per depth for K steps, then the N best nodes),
vLLM drafts one static tree for every round (`vllm_token_tree`), llama.cpp drafts chains only.

Flag names and semantics were read from the engines' own sources and docs (cited at each mapping):
vLLM `vllm/config/speculative.py` and docs/features/speculative_decoding/; SGLang 0.5.23
`sglang/srt/arg_groups/fields/*.py` and `speculative_hook.py`; llama.cpp as vendored in the
llama-cpp-python 0.3.36 sdist, `common/arg.cpp`, `common/speculative.cpp`, `convert_hf_to_gguf.py`.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from specli.errors import UsageError
from specli.models import sources
from specli.models.model_dirs import EMBEDDED_PREFIX
from specli.models.sources import MASK_TOKEN_KEYS, PARALLEL_K_KEY, trained_parallel_k
from specli.presets import DEFAULT_PRESET, ModelSpec, Preset, resolve_preset
from specli.settings import Settings, check_strategy, resolve_settings
from specli.strategies import Strategy
from specli.wording import count

ENGINES = ("vllm", "sglang", "llama.cpp")
_ALIASES = {name: "llama.cpp" for name in ("llamacpp", "llama-cpp", "llama_cpp", "llama-server")}

# What drafts: an autoregressive draft model, a PARD (parallel) draft model, or an EAGLE head.
DrafterKind = Literal["model", "pard", "eagle1", "eagle3", "peagle", "heads"]
HEAD_KINDS = ("eagle1", "eagle3", "peagle")
HEADS_KEY = "specli_heads"  # the config.json key of a blockwise heads folder (models.blockwise_heads.KEY)


# The hub drafters the shipped presets name, as the presets' notes and specli.models.memory.KNOWN_HEADS
# describe them (PARD: pard_token; RedHatAI heads: speculators eagle3; AWS P-EAGLE: SafeAILab layout with
# ptd_token_id), so exporting a preset needs no download: (kind, head layout).
KNOWN_DRAFTERS: Mapping[str, tuple[DrafterKind, str | None]] = {
    "meta-llama/Llama-3.2-1B-Instruct": ("model", None),
    "Qwen/Qwen2.5-0.5B-Instruct": ("model", None),
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": ("model", None),
    "amd/PARD-Llama-3.2-1B": ("pard", None),
    "amd/PARD-Qwen2.5-0.5B": ("pard", None),
    "amazon/GPT-OSS-20B-P-EAGLE": ("peagle", "safeailab"),
    "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3": ("eagle3", "speculators"),
    "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3": ("eagle3", "speculators"),
    "RedHatAI/Qwen3-8B-speculator.eagle3": ("eagle3", "speculators"),
}

# What each engine runs, for refusals (one line each).
CAN_RUN = {
    "vllm": "draft models (PARD parallel drafters too), lookup (ngram), EAGLE-1, EAGLE-3, P-EAGLE heads and "
    "blockwise heads (medusa)",
    "sglang": "draft models (STANDALONE), lookup (NGRAM) and EAGLE-1 and EAGLE-3 heads (EAGLE, EAGLE3)",
    "llama.cpp": "draft models (draft-simple), lookup (ngram-simple) and EAGLE-3 heads (draft-eagle3)",
}


# --------------------------------------------------------------------------- what is exported


@dataclass(frozen=True)
class Model:
    """One model as the engines get it: `location` is a hub id, a folder's absolute path or a GGUF
    file's path; `fetch`: the command that brings a hub GGUF file to that path first (empty when it is
    here)."""

    name: str  # as the preset or the command line named it ("org/name", "./dir", "embedded:NAME")
    location: str
    source: Literal["hub", "folder", "embedded", "gguf"] = "hub"
    dtype: str = "auto"
    quantization: str = "none"
    fetch: tuple[str, ...] = ()

    @property
    def embedded(self) -> bool:
        return self.source == "embedded"

    @property
    def hub(self) -> bool:
        return self.source == "hub"

    @property
    def gguf(self) -> bool:
        return self.source == "gguf"


@dataclass(frozen=True)
class ExportPair:
    """A resolved pair: target, strategy, drafter (a draft model or an EAGLE head, and its kind) and the
    speculation settings; `notes` say what resolving it assumed or located."""

    target: Model
    strategy: str  # draft | lookup | eagle | self | none
    settings: Settings
    drafter: Model | None = None
    kind: DrafterKind | None = None
    layout: str | None = None  # a head's config layout: speculators | specli | safeailab | heads
    notes: tuple[str, ...] = ()

    @property
    def k(self) -> int:
        return self.settings.num_draft_tokens

    @property
    def speculates(self) -> bool:
        return self.strategy not in ("none", "self")

    @property
    def tree(self) -> int:
        """The token tree's nodes per round an engine gets (0: a chain): --tree N, for a drafter model or
        an EAGLE head at most what a depth-K tree of width W holds (`tree_capacity`), as specli grows it
        (lookup's tree comes from its suffix index, without that bound)."""
        s = self.settings
        if not s.tree or not self.speculates:
            return 0
        if self.strategy == Strategy.LOOKUP:
            return s.tree
        return min(s.tree, tree_capacity(s.tree_width, self.k))

    @property
    def tree_width(self) -> int:
        return self.settings.tree_width


def tree_capacity(width: int, depth: int) -> int:
    """The most nodes a tree grown EAGLE-2's way holds (specli.engine.tree.grow_tree, SGLang's
    --speculative-eagle-topk): `width` children of the root, then `width` children of each of the
    `width` likeliest nodes at every further depth."""
    return width + max(0, depth - 1) * width * width


@dataclass(frozen=True)
class ServeOptions:
    """Serving options of the command line; None leaves the engine's default."""

    tp: int | None = None  # tensor-parallel GPUs
    pp: int | None = None  # pipeline stages
    host: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class Export:
    """An engine's launch command (`argv`), the commands to run before it (`steps`: downloads,
    conversions), and notes. `speculative_config` is vLLM's --speculative-config object."""

    engine: str
    argv: tuple[str, ...]
    steps: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()
    speculative_config: dict[str, Any] | None = None

    def commands(self) -> list[str]:
        """Every command, shell-quoted, in the order to run them (the launch command last)."""
        return [shlex.join(step) for step in (*self.steps, self.argv)]

    def machine_readable(self) -> Any:
        """`--format json`: for vLLM its --speculative-config object alone (null without speculation);
        for the others {"engine", "argv", "steps", "notes"}."""
        if self.engine == "vllm":
            return self.speculative_config
        return {
            "engine": self.engine,
            "argv": list(self.argv),
            "steps": [list(step) for step in self.steps],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- resolving the pair


def check_engine(engine: str) -> str:
    """The engine's canonical name; UsageError listing the three for anything else."""
    name = _ALIASES.get(engine.strip().lower(), engine.strip().lower())
    if name not in ENGINES:
        raise UsageError(f"unknown engine '{engine}': specli exports to {', '.join(ENGINES)}.")
    return name


def locate(
    name: str, dtype: str = "auto", quantization: str = "none"
) -> tuple[Model, dict[str, Any] | None, str | None]:
    """A model name (`sources.classify`) -> (Model, its config.json or None, a note). embedded:NAME
    becomes its folder in this install; a local folder its absolute path (a path stays a path, never a
    hub id); a GGUF (a file, a folder holding one, ollama:NAME, org/name:FILE.gguf) the file's path, its
    config read from the header (a hub file not cached yet: the path `hf download` puts it at, fetched
    first); anything else is a hub id, its config.json read from the hub cache when there. A name that
    is nothing here raises UsageError, one line."""
    try:
        source = sources.classify(name)
        config = sources.local_config(source, hub_cache=True)
    except UsageError as err:
        raise UsageError(f"{err.message}: {err.hint}." if err.hint else err.message) from None
    if source.kind == "embedded":
        note = (
            f"{name} has no hub id: the command names its folder in this install ({source.path}); "
            "to serve on another machine, copy that folder there and use its path."
        )
        return Model(name, str(source.path), "embedded", dtype, quantization), config, note
    if source.kind == "folder":
        assert source.path is not None
        return Model(name, str(source.path.resolve()), "folder", dtype, quantization), config, None
    if source.is_gguf:
        path = sources.local_gguf(source)
        if path is not None:
            where = Path(os.path.abspath(path))  # a hub snapshot's link keeps its .gguf name
            return Model(name, str(where), "gguf", dtype, quantization), config, None
        assert source.repo is not None and source.filename is not None
        folder = source.repo.split("/")[-1]
        fetch = ("hf", "download", source.repo, source.filename, "--local-dir", folder)
        location = f"{folder}/{source.filename}"
        return Model(name, location, "gguf", dtype, quantization, fetch), None, None
    return Model(name, name, "hub", dtype, quantization), config, None


def _check_medusa_form(drafter: Model, kind: DrafterKind, config: Mapping[str, Any] | None) -> None:
    """UsageError for blockwise heads no serving engine reads: sequential heads or MLP blocks (vLLM's
    Medusa heads are one residual Linear each on the hidden state; SGLang and llama.cpp read none)."""
    body = (config or {}).get(HEADS_KEY) if kind == "heads" else None
    if isinstance(body, Mapping) and (body.get("sequential") is True or body.get("intermediate")):
        raise UsageError(
            f"no serving engine runs sequential or MLP heads ({drafter.name}): vLLM's Medusa heads are one "
            "residual Linear each on the hidden state; train heads without --sequential and --intermediate "
            "to serve them."
        )


def drafter_kind(config: Mapping[str, Any]) -> tuple[DrafterKind, str | None]:
    """(kind, head layout) of a drafter from its config.json, as specli reads it (head_formats,
    drafters.draft_model): a speculators head (eagle3 | peagle | eagle1), specli's EAGLE-1 layout, a
    SafeAILab head (a Llama config plus draft_vocab_size; P-EAGLE when it names a mask token), a PARD
    drafter (a model naming a mask token), else a plain autoregressive draft model."""
    if isinstance(config.get(HEADS_KEY), Mapping):  # blockwise heads (`specli train heads`)
        return "heads", "heads"
    masked = any(type(config.get(key)) is int for key in MASK_TOKEN_KEYS)  # an id, not a bool
    speculators = config.get("speculators_model_type")
    if speculators is not None:
        if speculators not in ("eagle3", "peagle", "eagle1"):  # the types head_formats reads
            raise UsageError(f"a '{speculators}' speculator is none of EAGLE-1, EAGLE-3, P-EAGLE.")
        return speculators, "speculators"
    if config.get("specli_head_type") is not None:
        return "eagle1", "specli"
    archs = " ".join(str(a) for a in config.get("architectures") or [])
    llama_like = "Llama" in archs or "model_type" in config
    if "draft_vocab_size" in config and "hidden_size" in config and llama_like:
        return ("peagle" if masked else "eagle3"), "safeailab"
    return ("pard" if masked else "model"), None


def _kind_of(model: Model, config: dict | None, strategy: str) -> tuple[DrafterKind, str | None, str | None]:
    """(kind, layout, note): from the drafter's config.json, else KNOWN_DRAFTERS, else assumed from the
    strategy (an EAGLE-3 head for eagle, an autoregressive model for draft) with a note saying so."""
    if config is not None:
        return (*drafter_kind(config), None)
    if model.gguf:  # a GGUF is a whole language model: an autoregressive drafter
        return "model", None, None
    if model.name in KNOWN_DRAFTERS:
        return (*KNOWN_DRAFTERS[model.name], None)
    assumed: DrafterKind = "eagle3" if strategy == Strategy.EAGLE else "model"
    what = "an EAGLE-3 head" if strategy == Strategy.EAGLE else "an autoregressive draft model (not PARD)"
    if not model.hub:  # a folder here without a readable config.json: nothing to download
        note = f"{model.location} has no readable config.json: assumed {what}."
        return assumed, None, note
    note = (
        f"could not read {model.name}'s config.json (not a local folder, not in the hub cache): assumed "
        f"{what}; `hf download {model.name}` first to have its kind detected."
    )
    return assumed, None, note


def parallel_k(kind: DrafterKind | None, config: Mapping[str, Any] | None) -> int | None:
    """The k a parallel drafter was made for, as specli drafts with it (api.Pair.parallel_draft_tokens):
    a PARD model's `para_num`, a P-EAGLE head's speculators `speculative_tokens` (its first proposal
    method's), else 8; None for a drafter that drafts one token per forward."""
    config = config or {}
    if kind == "heads":  # one draft per head, all from one pass
        value = (config.get(HEADS_KEY) or {}).get("num_heads")
    elif kind == "pard":
        value = config.get(PARALLEL_K_KEY)
    elif kind == "peagle":
        speculators = config.get("speculators_config")
        methods = speculators.get("proposal_methods") if isinstance(speculators, Mapping) else None
        first = methods[0] if isinstance(methods, list) and methods else None
        value = first.get("speculative_tokens") if isinstance(first, Mapping) else None
    else:
        return None
    return trained_parallel_k(value)


def _check_roles(strategy: str, drafter: Model, kind: DrafterKind) -> None:
    if (strategy == Strategy.HEADS) != (kind == "heads"):
        if kind == "heads":
            raise UsageError(
                f"'{drafter.name}' holds blockwise heads: use --strategy heads --draft {drafter.name}."
            )
        raise UsageError(
            f"'{drafter.name}' is not a folder of blockwise heads: strategy heads takes one written by "
            "`specli train heads`."
        )
    if strategy == Strategy.DRAFT and kind in HEAD_KINDS:
        raise UsageError(f"'{drafter.name}' is an EAGLE head: use --strategy eagle --draft {drafter.name}.")
    if strategy == Strategy.EAGLE and kind not in HEAD_KINDS:
        raise UsageError(f"'{drafter.name}' is a draft model, not an EAGLE head: use --strategy draft.")


def _model_option(value: str | None, field: str, option: str) -> None:
    allowed = get_args(ModelSpec.model_fields[field].annotation)  # the preset schema's values
    if value is not None and value not in allowed:
        raise UsageError(f"unknown {option} '{value}': use one of {', '.join(allowed)}.")


def resolve_pair(
    preset: str | Preset | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    strategy: str | None = None,
    quant: str | None = None,
    dtype: str | None = None,
    **speculation: Any,
) -> ExportPair:
    """The pair `specli generate` would load with the same arguments (specli.api's rules: explicit
    arguments over the preset, the embedded `tiny` preset when neither a preset nor a target is named),
    without loading it. `speculation`: num_draft_tokens, fixed_k, draft_p_min, ngram_min, ngram_max,
    tree, tree_width overrides (None keeps the preset's), validated as everywhere else (UsageError); a
    tree with a parallel drafter (PARD, P-EAGLE: chains only) is refused, as specli refuses it."""
    _model_option(quant, "quantization", "--quant")
    _model_option(dtype, "dtype", "--dtype")
    if preset is None and target is None:
        preset = DEFAULT_PRESET
    spec = preset if isinstance(preset, Preset) or preset is None else resolve_preset(preset)
    chosen = check_strategy(strategy or (spec.strategy if spec else ("draft" if draft else "none")))
    target_spec = ModelSpec(model=target) if target else spec.target  # type: ignore[union-attr]
    t_model, t_config, t_note = locate(
        target_spec.model, dtype or target_spec.dtype, quant or target_spec.quantization
    )
    if t_config is not None and drafter_kind(t_config)[0] in HEAD_KINDS:
        raise UsageError(f"'{t_model.name}' is an EAGLE head, not a target: pass the model it drafts for.")
    notes = [t_note] if t_note else []
    drafter, kind, layout = None, None, None
    wanted = _drafter_spec(spec, chosen, draft)
    if wanted is not None:
        drafter, d_config, d_note = locate(wanted.model, dtype or wanted.dtype, wanted.quantization)
        kind, layout, assumed = _kind_of(drafter, d_config, chosen)
        _check_roles(chosen, drafter, kind)
        _check_medusa_form(drafter, kind, d_config)
        notes += [n for n in (d_note, assumed) if n]
        own_k = parallel_k(kind, d_config)
        if draft and own_k is not None and speculation.get("num_draft_tokens") is None:
            speculation["num_draft_tokens"] = own_k  # a parallel drafter named here brings its own k
    settings = resolve_settings(spec, strategy=chosen, **speculation)
    if settings.tree and kind in ("pard", "peagle"):
        assert drafter is not None
        what = "PARD" if kind == "pard" else "P-EAGLE"
        raise UsageError(
            f"--tree {settings.tree}: '{drafter.name}' drafts in parallel ({what}), which gives chains "
            "only; drop --tree, or use a drafter that drafts one token per forward."
        )
    return ExportPair(t_model, chosen, settings, drafter, kind, layout, tuple(notes))


def _drafter_spec(spec: Preset | None, strategy: str, draft: str | None) -> ModelSpec | None:
    """The drafter model (strategy draft), EAGLE head (strategy eagle) or blockwise heads (heads) to
    export, as api._sources picks it; UsageError when the strategy needs one and none is named."""
    if strategy == Strategy.EAGLE:
        head = ModelSpec(model=draft) if draft else (spec.eagle_head if spec else None)
        if head is None:
            raise UsageError("strategy 'eagle' needs an EAGLE head: pass --draft HEAD (a folder or hub id).")
        return head
    if strategy == Strategy.HEADS:
        heads = ModelSpec(model=draft) if draft else (spec.blockwise_heads if spec else None)
        if heads is None:
            raise UsageError(
                "strategy 'heads' needs blockwise heads: pass --draft FOLDER (`specli train heads`)."
            )
        return heads
    if strategy == Strategy.DRAFT:
        model = ModelSpec(model=draft) if draft else (spec.draft if spec else None)
        if model is None:
            raise UsageError("strategy 'draft' needs a drafter model: pass --draft MODEL.")
        return model
    return None


# --------------------------------------------------------------------------- shared refusals and notes


def _drafter(pair: ExportPair) -> Model:
    assert pair.drafter is not None, "a speculating pair other than lookup has a drafter"
    return pair.drafter


def _refuse(engine: str, what: str) -> UsageError:
    return UsageError(f"{engine} cannot run {what}; it runs {CAN_RUN[engine]}.")


def _check_runs(engine: str, pair: ExportPair) -> None:
    """Refuse what the engine cannot run (docs/serving.md: no serving engine runs LayerSkip self-speculation;
    only vLLM runs parallel drafting; llama.cpp has no EAGLE-1)."""
    if pair.strategy == Strategy.SELF:
        raise _refuse(engine, "self-speculation (strategy self: no serving engine runs LayerSkip early exit)")
    parallel = {"pard": "PARD", "peagle": "P-EAGLE"}
    if engine != "vllm" and pair.kind in parallel:
        what = f"{parallel[pair.kind]} parallel drafting ({_drafter(pair).name}; only vllm does)"
        raise _refuse(engine, what)
    if engine == "llama.cpp" and pair.kind == "eagle1":
        raise _refuse(engine, f"an EAGLE-1 head ({_drafter(pair).name})")
    if engine != "vllm" and pair.kind == "heads":
        raise _refuse(
            engine, f"blockwise (Medusa) heads ({_drafter(pair).name}; only vllm reads Medusa heads)"
        )
    if pair.kind == "heads" and pair.target.gguf:
        raise UsageError(
            f"vLLM's Medusa heads copy the target's LM head from its safetensors, and {pair.target.name} "
            "is a GGUF file: export with the target's folder or hub id (--target)."
        )


def _k_notes(engine: str, pair: ExportPair) -> list[str]:
    """Per-round k and --fixed-k have no flag in any engine: each drafts up to its one K every round."""
    if not pair.speculates:
        return []
    if pair.settings.fixed_k:
        return [f"--fixed-k: {engine} has no such flag; it drafts up to K={pair.k} every round anyway."]
    return [
        f"per-round k: {engine} drafts up to K={pair.k} every round; specli's choice of k per round "
        "(on unless --fixed-k) has no counterpart."
    ]


def _tree_notes(engine: str, pair: ExportPair) -> list[str]:
    """What became of --tree: dropped by llama.cpp (chains only) and by vLLM's ngram (a chain), cut to
    what a depth-K tree holds."""
    s = pair.settings
    if not s.tree or not pair.speculates:
        return []
    if engine == "vllm" and pair.strategy == Strategy.LOOKUP:
        return [f"--tree {s.tree}: vLLM's ngram drafts a chain, so the tree is dropped (a chain of up to K)."]
    if engine == "llama.cpp":
        return [
            f"--tree {s.tree}: llama.cpp drafts chains only, so the tree is dropped (a chain of up to K)."
        ]
    if pair.tree < s.tree:
        return [
            f"--tree {s.tree}: a tree of depth K={pair.k} and width {s.tree_width} holds at most {pair.tree} "
            f"nodes (specli grows no more): {pair.tree} exported."
        ]
    return []


def _p_min_notes(engine: str, pair: ExportPair) -> list[str]:
    if pair.settings.draft_p_min > 0 and pair.speculates:
        return [f"--draft-p-min {pair.settings.draft_p_min:g} has no counterpart in {engine}: dropped."]
    return []


def _bnb_notes(engine: str, pair: ExportPair) -> list[str]:
    """vLLM and SGLang quantize a checkpoint in flight to 4-bit nf4 only; nothing quantizes a drafter."""
    notes = []
    if pair.target.gguf and pair.target.quantization != "none":
        return [
            f"{pair.target.quantization} target (--quant / the preset): {pair.target.name} is a GGUF file, "
            f"which {engine} serves in its own quantization: nothing is quantized in flight."
        ]
    if pair.target.quantization == "8bit":
        notes.append(
            f"8-bit target (--quant / the preset): {engine}'s in-flight bitsandbytes quantization is 4-bit "
            "(nf4); output matches a 4-bit target there, not specli's 8-bit one."
        )
    if pair.drafter is not None and pair.drafter.quantization != "none":
        notes.append(
            f"the drafter's {pair.drafter.quantization} quantization has no counterpart in {engine} "
            "(it quantizes the target only): the drafter runs unquantized."
        )
    return notes


def _fetches(pair: ExportPair) -> tuple[tuple[str, ...], ...]:
    """The downloads of hub GGUF files the command reads from local paths (target, then drafter)."""
    return tuple(m.fetch for m in (pair.target, pair.drafter) if m is not None and m.fetch)


def _gguf_notes(engine: str, pair: ExportPair) -> list[str]:
    """What a GGUF target or drafter means to vLLM and SGLang (their docs: vLLM reads single-file GGUF,
    in recent versions through the vllm-gguf-plugin package, and recommends the original model's
    tokenizer; SGLang loads a GGUF with --load-format gguf)."""
    names = [m.name for m in (pair.target, pair.drafter) if m is not None and m.gguf]
    if not names:
        return []
    what = ", ".join(names) + (" is a GGUF file" if len(names) == 1 else " are GGUF files")
    if engine == "vllm":
        return [
            f"{what}: vLLM reads single-file GGUF (recent versions need `pip install vllm-gguf-plugin`) "
            "and recommends --tokenizer with the original model's hub id over the file's own tokenizer."
        ]
    return [f"{what}: SGLang loads GGUF weights with --load-format gguf (the target gets it here)."]


def _host_port(options: ServeOptions) -> list[str]:
    """--host / --port: the same names in all three engines."""
    out: list[str] = []
    if options.host is not None:
        out += ["--host", options.host]
    if options.port is not None:
        out += ["--port", str(options.port)]
    return out


# --------------------------------------------------------------------------- vLLM

# vLLM's method per drafter kind: PARD is draft_model + parallel_drafting
# (docs/features/speculative_decoding/parallel_draft_model.md), P-EAGLE is eagle3 + parallel_drafting
# (vLLM >= 0.16, PR #32887); EAGLE-1 heads are method eagle (docs/.../eagle.md).
_VLLM_METHOD = {"model": "draft_model", "pard": "draft_model", "eagle1": "eagle", "eagle3": "eagle3"}
_VLLM_METHOD |= {"peagle": "eagle3", "heads": "medusa"}


def vllm_token_tree(nodes: int, width: int, depth: int) -> list[tuple[int, ...]]:
    """vLLM's static `speculative_token_tree`: each node named by its path of child indices from the
    root ((0,) the root's likeliest child, (0, 1) that child's second likeliest), breadth-first.

    Built from the full width-`width` tree level by level, at most `nodes` nodes and `depth` levels; every
    node of a level gets the same number of children, min(width, nodes left // nodes of the level above),
    and building stops at a level that would get none. vLLM needs that uniformity: its proposer drafts
    the top `child_drafts_per_level[level]` tokens under every node of a level, that count being the
    level's size over the size of the level above (vllm/v1/spec_decode/eagle.py; some versions assert
    it). So the breadth-first cut keeps whole shares: nodes=4, width=2 gives [(0,), (1,), (0, 0), (1, 0)],
    not [(0,), (1,), (0, 0), (0, 1)], whose (1,) would have no children beside (0,)'s two; nodes=16,
    width=2, depth 4 gives the 14 nodes of three full levels. Sorted as vLLM sorts it, by (len, path)."""
    tree: list[tuple[int, ...]] = []
    level: list[tuple[int, ...]] = [()]
    for _ in range(depth):
        children = min(width, (nodes - len(tree)) // len(level))
        if children < 1:
            break
        level = [path + (i,) for path in level for i in range(children)]
        tree += level
    return tree


def _vllm_tree(pair: ExportPair) -> list[tuple[int, ...]] | None:
    """The static tree a pair with --tree exports to vLLM (None: a chain; width 1 is a chain; Medusa
    heads: vLLM's proposer drafts their top-1 chain)."""
    if not pair.tree or pair.tree_width < 2 or pair.strategy in (Strategy.LOOKUP, Strategy.HEADS):
        return None
    return vllm_token_tree(pair.tree, pair.tree_width, pair.k)


def vllm_speculative_config(pair: ExportPair) -> dict[str, Any] | None:
    """vLLM's --speculative-config object, None without speculation. Keys from vllm/config/speculative.py
    (SpeculativeConfig: method, model, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max,
    parallel_drafting, speculative_token_tree) and docs/features/speculative_decoding/README.md (its
    schema). A token tree (--tree) becomes `speculative_token_tree`, the string of a Python list of
    tuples as vLLM parses it (ast.literal_eval), with num_speculative_tokens its node count."""
    if not pair.speculates:
        return None
    if pair.strategy == Strategy.LOOKUP:
        return {
            "method": "ngram",
            "num_speculative_tokens": pair.k,
            "prompt_lookup_min": pair.settings.ngram_min,
            "prompt_lookup_max": pair.settings.ngram_max,
        }
    assert pair.kind is not None
    config: dict[str, Any] = {
        "method": _VLLM_METHOD[pair.kind],
        "model": medusa_folder(pair) if pair.kind == "heads" else _drafter(pair).location,
        "num_speculative_tokens": pair.k,
    }
    if pair.kind in ("pard", "peagle"):
        config["parallel_drafting"] = True
    tree = _vllm_tree(pair)
    if tree is not None:
        config["num_speculative_tokens"] = len(tree)
        config["speculative_token_tree"] = str(tree)
    elif pair.tree and pair.kind != "heads":  # width 1: a chain of the tree's nodes
        config["num_speculative_tokens"] = pair.tree
    return config


def medusa_folder(pair: ExportPair) -> str:
    """Where the Medusa step writes the heads with the target's LM head (`specli.models.medusa`)."""
    return f"{_stem(_drafter(pair))}-medusa"


def _medusa_steps(pair: ExportPair) -> list[tuple[str, ...]]:
    """The step that writes vLLM's Medusa folder: specli's heads + the target's LM head."""
    heads, target = _drafter(pair).location, pair.target.location
    return [("python", "-m", "specli.models.medusa", heads, "--target", target, "--out", medusa_folder(pair))]


def export_vllm(pair: ExportPair, options: ServeOptions) -> Export:
    """`vllm serve TARGET [--speculative-config JSON] ...`. Server flags from vLLM's engine arguments
    (https://docs.vllm.ai/en/latest/configuration/engine_args/): --tensor-parallel-size,
    --pipeline-parallel-size, --quantization, --dtype, --host, --port; `--quantization bitsandbytes`
    quantizes an unquantized checkpoint to 4-bit in flight (docs/features/quantization/bnb.md). A token
    tree needs the tree attention backend, `--attention-backend TREE_ATTN` (engine/arg_utils.py:
    AttentionConfig.backend): with any other the proposer drafts a chain."""
    _check_runs("vllm", pair)
    config = vllm_speculative_config(pair)
    argv = ["vllm", "serve", pair.target.location]
    steps = _medusa_steps(pair) if pair.kind == "heads" else []
    if config is not None:
        argv += ["--speculative-config", json.dumps(config)]
    if config is not None and "speculative_token_tree" in config:
        argv += ["--attention-backend", "TREE_ATTN"]
    if options.tp is not None:
        argv += ["--tensor-parallel-size", str(options.tp)]
    if options.pp is not None:
        argv += ["--pipeline-parallel-size", str(options.pp)]
    if pair.target.quantization != "none" and not pair.target.gguf:
        argv += ["--quantization", "bitsandbytes"]
    if pair.target.dtype != "auto":
        argv += ["--dtype", pair.target.dtype]
    argv += _host_port(options)
    notes = [*pair.notes, *_k_notes("vllm", pair), *_p_min_notes("vllm", pair), *_bnb_notes("vllm", pair)]
    notes += [*_gguf_notes("vllm", pair), *_tree_notes("vllm", pair), *_vllm_tree_notes(pair)]
    if pair.layout == "specli":
        notes.append(
            f"{_drafter(pair).name} is in specli's own EAGLE-1 layout (specli_head_type), which vLLM's "
            "method eagle does not read: pass an EAGLE-1 head in the SafeAILab layout."
        )
    if options.pp is not None and options.pp > 1 and config is not None:
        # docs/features/speculative_decoding/README.md, "Known Feature Incompatibility".
        notes.append(
            "--pp: vLLM's docs list pipeline parallelism as not composable with speculative decoding "
            "(vllm <= 0.15.0); check that your version runs this method with --pipeline-parallel-size, "
            "or put every GPU in --tensor-parallel-size."
        )
    if pair.strategy == Strategy.NONE:
        notes.append("strategy none: plain decoding, no --speculative-config (a baseline to compare with).")
    if pair.kind == "heads":
        notes.append(
            f"blockwise heads: the first step writes {medusa_folder(pair)} (vLLM's Medusa layout, the "
            "target's LM head copied in once); vLLM's Medusa proposer drafts each head's top-1 token, a "
            "chain" + (f" (not specli's --tree {pair.tree})" if pair.tree else "") + "."
        )
    return Export("vllm", tuple(argv), (*_fetches(pair), *steps), tuple(notes), config)


def _vllm_tree_notes(pair: ExportPair) -> list[str]:
    tree = _vllm_tree(pair)
    if tree is None:
        return []
    fewer = f" ({len(tree)} of the {pair.tree} nodes)" if len(tree) < pair.tree else ""
    shape = f"{count(len(tree), 'node')} to depth {len(tree[-1])}{fewer}"
    return [
        f"--tree {pair.settings.tree} --tree-width {pair.tree_width}: vLLM drafts the same static tree "
        f"every round, {shape}: every node of a depth gets the same number of children (its proposer "
        "needs it), where specli grows each round's tree from the drafter's probabilities. vLLM versions "
        "without --attention-backend take VLLM_ATTENTION_BACKEND=TREE_ATTN in the environment instead."
    ]


# --------------------------------------------------------------------------- SGLang

_SGLANG_ALGORITHM = {"model": "STANDALONE", "eagle1": "EAGLE", "eagle3": "EAGLE3"}


def _sglang_speculation(pair: ExportPair) -> tuple[list[str], list[str]]:
    """(flags, notes) for SGLang's speculation. With topk 1 the verified chain is the last token plus K
    drafts, so num_draft_tokens = num_steps + 1 (speculative_hook.py). A token tree (--tree N, --tree-width
    W) is SGLang's EAGLE-2 tree, grown as specli grows it: --speculative-eagle-topk W children of the W
    likeliest nodes per step for --speculative-num-steps K steps, then the N best nodes kept, the root
    counted in --speculative-num-draft-tokens N + 1 (eagle_utils.organize_draft_results). NGRAM derives
    num_steps and topk from num_draft_tokens and its BFS breadth (speculative_hook._handle_ngram);
    breadth 1 keeps one chain, as specli's lookup proposes one copy, and a lookup tree gets breadth W
    with N + 1 draft tokens (SGLang's own trie tree, not specli's suffix-index tree, but the same
    size)."""
    if pair.strategy == Strategy.LOOKUP:  # a tree: N nodes, breadth W (_handle_ngram's topk)
        drafts, breadth = (pair.tree, pair.tree_width) if pair.tree else (pair.k, 1)
        flags = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(drafts + 1)]
        flags += ["--speculative-ngram-max-bfs-breadth", str(breadth)]
        note = (
            f"--ngram-min {pair.settings.ngram_min} / --ngram-max {pair.settings.ngram_max}: no counterpart "
            "in sglang, whose NGRAM drafter matches suffixes in a trie of the prompts and outputs it has "
            "seen (--speculative-ngram-max-trie-depth)."
        )
        return flags, [note]
    assert pair.kind is not None
    flags = ["--speculative-algorithm", _SGLANG_ALGORITHM[pair.kind]]
    flags += ["--speculative-draft-model-path", _drafter(pair).location]
    notes = []
    if pair.tree:  # EAGLE-2's tree: topk W per step for num_steps steps, then the N best nodes
        steps = pair.k if pair.tree_width > 1 else pair.tree  # topk 1: num_draft_tokens = num_steps + 1
        flags += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(pair.tree_width)]
        flags += ["--speculative-num-draft-tokens", str(pair.tree + 1)]
        notes.append(
            f"--tree {pair.tree}: SGLang's --speculative-num-draft-tokens counts the root (the last verified "
            f"token) with the tree's nodes: {pair.tree + 1}."
        )
    else:
        flags += ["--speculative-num-steps", str(pair.k), "--speculative-eagle-topk", "1"]
        flags += ["--speculative-num-draft-tokens", str(pair.k + 1)]
    if pair.layout in ("speculators", "specli"):  # SGLang 0.5.23 has no reader for these layouts
        notes.append(
            f"{_drafter(pair).name} is in the {pair.layout} layout, which SGLang does not read: pass a "
            "head in the SafeAILab/SpecForge layout (a Llama config.json with draft_vocab_size)."
        )
    return flags, notes


def export_sglang(pair: ExportPair, options: ServeOptions) -> Export:
    """`python -m sglang.launch_server --model-path TARGET ...`. Flags from SGLang 0.5.23's
    sglang/srt/arg_groups/fields/: spec.py (--speculative-algorithm, --speculative-draft-model-path,
    --speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens,
    --speculative-ngram-max-bfs-breadth), parallel.py (--tp-size, --pp-size), model.py (--model-path,
    --dtype, --quantization, --load-format), serving.py (--host, --port)."""
    _check_runs("sglang", pair)
    argv = ["python", "-m", "sglang.launch_server", "--model-path", pair.target.location]
    notes = [*pair.notes]
    if pair.speculates:
        flags, more = _sglang_speculation(pair)
        argv += flags
        notes += more
    if options.tp is not None:
        argv += ["--tp-size", str(options.tp)]
    if options.pp is not None:
        argv += ["--pp-size", str(options.pp)]
    if pair.target.gguf:  # detected from a .gguf path; said outright for an Ollama blob (no suffix)
        argv += ["--load-format", "gguf"]
    elif pair.target.quantization != "none":
        # In-flight nf4 needs the bitsandbytes loader, which only --load-format picks
        # (model_loader/loader.py: BitsAndBytesModelLoader; configs/load_config.py).
        argv += ["--quantization", "bitsandbytes", "--load-format", "bitsandbytes"]
    if pair.target.dtype != "auto":
        argv += ["--dtype", pair.target.dtype]
    argv += _host_port(options)
    notes += [*_k_notes("sglang", pair), *_p_min_notes("sglang", pair), *_bnb_notes("sglang", pair)]
    notes += _tree_notes("sglang", pair)
    notes += _gguf_notes("sglang", pair)
    return Export("sglang", tuple(argv), _fetches(pair), tuple(notes))


# --------------------------------------------------------------------------- llama.cpp

# convert_hf_to_gguf.py --outtype choices: f32, f16, bf16, q8_0, tq1_0, tq2_0, auto.
_OUTTYPE = {"auto": "auto", "bfloat16": "bf16", "float16": "f16", "float32": "f32"}
_Q4 = "Q4_K_M"  # a llama-quantize type (tools/quantize: llama-quantize IN.gguf OUT.gguf TYPE)


def _stem(model: Model) -> str:
    """A file-name stem for a model: embedded:NAME -> NAME, org/name -> name, a folder -> its name."""
    if model.embedded:
        return model.name[len(EMBEDDED_PREFIX) :]
    if model.gguf:
        return Path(model.location).stem or "model"
    return Path(model.location.rstrip("/\\")).name or "model"


def _gguf_steps(model: Model, stem: str, target_dir: str | None = None) -> tuple[list[tuple[str, ...]], str]:
    """The steps that make a GGUF file of a model -> (steps, the GGUF file): download a hub model
    (`hf download REPO --local-dir DIR`), convert the folder (convert_hf_to_gguf.py MODEL --outfile
    --outtype, and --target-model-dir for an EAGLE-3 head: conversion/llama.py), quantize a 4-bit one."""
    if model.gguf:  # llama.cpp's own format: served as it is
        return [model.fetch] if model.fetch else [], model.location
    steps: list[tuple[str, ...]] = []
    folder = stem if model.hub else model.location
    if model.hub:
        steps.append(("hf", "download", model.name, "--local-dir", folder))
    outtype = "q8_0" if model.quantization == "8bit" else _OUTTYPE[model.dtype]
    gguf = f"{stem}-{outtype}.gguf" if model.quantization == "4bit" else f"{stem}.gguf"
    convert = ["python", "convert_hf_to_gguf.py", folder, "--outfile", gguf, "--outtype", outtype]
    if target_dir is not None:
        convert += ["--target-model-dir", target_dir]
    steps.append(tuple(convert))
    if model.quantization == "4bit":
        steps.append(("llama-quantize", gguf, f"{stem}-{_Q4}.gguf", _Q4))
        gguf = f"{stem}-{_Q4}.gguf"
    return steps, gguf


NGRAM_SIMPLE_LONGEST = 8  # the longest --ngram-max exported as ngram-simple's exact n-gram size
NGRAM_SIMPLE_SIZE = 3  # ... and the size a longer one (a longest-match bound) exports as


def _llama_lookup(pair: ExportPair) -> tuple[list[str], list[str]]:
    """ngram-simple drafts --spec-ngram-simple-size-m tokens after a match of exactly
    --spec-ngram-simple-size-n tokens (common/ngram-map.cpp); --spec-draft-n-max does not apply to it
    (common/speculative.cpp, common_speculative_n_max)."""
    s = pair.settings
    size = s.ngram_max if s.ngram_max <= NGRAM_SIMPLE_LONGEST else NGRAM_SIMPLE_SIZE
    flags = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(size)]
    flags += ["--spec-ngram-simple-size-m", str(pair.k)]
    notes = []
    if size != s.ngram_max:
        notes.append(
            f"--ngram-max {s.ngram_max}: specli follows the longest match up to {s.ngram_max} tokens; "
            f"ngram-simple matches exactly N tokens, so it gets N = {size} (a match that long is rare)."
        )
    elif s.ngram_min < s.ngram_max:
        notes.append(
            f"--ngram-min {s.ngram_min}: no counterpart in llama.cpp, whose ngram-simple matches exactly "
            f"{s.ngram_max} tokens (--ngram-max), never shorter n-grams."
        )
    if s.draft_p_min > 0:
        notes.append(f"--draft-p-min {s.draft_p_min:g}: no effect on lookup (no drafter probabilities).")
    return flags, notes


def _llama_draft(pair: ExportPair, target_stem: str) -> tuple[list[tuple[str, ...]], list[str], str]:
    """(steps, flags, note) for a draft model (draft-simple) or an EAGLE-3 head (draft-eagle3, converted
    with the target's folder, `_target_folder`). --spec-type is needed: its default is none, and -md
    alone loads the drafter without drafting (measured, issue 21 §4)."""
    drafter = _drafter(pair)
    stem = _stem(drafter)
    stem = f"{stem}-draft" if stem == _stem(pair.target) else stem
    head = pair.kind == "eagle3"
    steps, gguf = _gguf_steps(drafter, stem, _target_folder(pair.target, target_stem) if head else None)
    flags = ["-md", gguf, "--spec-type", "draft-eagle3" if head else "draft-simple"]
    flags += ["--spec-draft-n-max", str(pair.k)]
    if pair.settings.draft_p_min > 0:
        flags += ["--spec-draft-p-min", f"{pair.settings.draft_p_min:g}"]
    note = (
        "llama.cpp builds before the --spec-draft-* rename (2026) take --draft-max K instead of "
        "--spec-draft-n-max (current builds refuse --draft-max) and draft with -md alone."
    )
    return steps, flags, note


def _target_folder(target: Model, stem: str) -> str:
    """The folder convert_hf_to_gguf.py reads an EAGLE-3 head's target from (--target-model-dir: its
    config.json and tokenizer, conversion/llama.py): where a hub target is downloaded, a folder as it is,
    and for a GGUF file here specli's folder of it (config and tokenizer read from the file, made now in
    seconds, or its dequantized folder when one is cached). A hub GGUF not fetched yet has none: its
    path is named, and the conversion tells the user."""
    if target.hub:
        return stem
    if target.gguf and not target.fetch:
        from specli.models import gguf_cache

        return str(gguf_cache.folder_for(Path(target.location), target.name, weights=False))
    return target.location


def export_llama_cpp(pair: ExportPair, options: ServeOptions) -> Export:
    """GGUF conversion steps, then `llama-server -m TARGET.gguf ...`. Flags from common/arg.cpp of
    llama.cpp as vendored in llama-cpp-python 0.3.36: -m, -md (--spec-draft-model), --spec-type,
    --spec-draft-n-max, --spec-draft-p-min, --spec-ngram-simple-size-n/-m, --host, --port; the
    --spec-type names from common/speculative.cpp."""
    _check_runs("llama.cpp", pair)
    target_stem = _stem(pair.target)
    steps, target_gguf = _gguf_steps(pair.target, target_stem)
    argv = ["llama-server", "-m", target_gguf]
    notes = [*pair.notes]
    if pair.strategy == Strategy.LOOKUP:
        flags, more = _llama_lookup(pair)
        argv += flags
        notes += more
    elif pair.speculates:
        more_steps, flags, note = _llama_draft(pair, target_stem)
        steps += more_steps
        argv += flags
        notes.append(note)
    argv += _host_port(options)
    notes += [*_k_notes("llama.cpp", pair), *_tree_notes("llama.cpp", pair)]
    notes += _llama_notes(pair, options, converts=any("convert_hf_to_gguf.py" in step for step in steps))
    return Export("llama.cpp", tuple(argv), tuple(steps), tuple(notes))


def _llama_notes(pair: ExportPair, options: ServeOptions, converts: bool = True) -> list[str]:
    notes = []
    if options.tp is not None or options.pp is not None:
        notes.append(
            "--tp/--pp: no counterpart in llama.cpp; llama-server splits a model over the GPUs it sees "
            "(--split-mode layer|row|tensor) and over machines through rpc-server (--rpc HOST:PORT,...)."
        )
    if converts:
        notes.append(
            "run the steps in llama.cpp's source folder (convert_hf_to_gguf.py, with "
            "pip install -r requirements/requirements-convert_hf_to_gguf.txt); llama-server and "
            "llama-quantize come with a llama.cpp build."
        )
    if pair.target.gguf:
        if pair.target.quantization != "none":
            notes.append(
                f"{pair.target.quantization} target (--quant / the preset): {pair.target.name} is already a "
                "GGUF file, served in its own quantization."
            )
    elif pair.target.quantization == "4bit":
        notes.append(
            f"4-bit target (--quant / the preset): llama.cpp quantizes to its own {_Q4}, not bitsandbytes "
            "nf4; output matches that GGUF target, not specli's 4-bit one."
        )
    elif pair.target.quantization == "8bit":
        notes.append(
            "8-bit target (--quant / the preset): llama.cpp's Q8_0 is not bitsandbytes LLM.int8; output "
            "matches the Q8_0 target."
        )
    if pair.target.embedded:
        notes.append(
            "convert_hf_to_gguf.py refuses the embedded tokenizer (its BPE pre-tokenizer is not in "
            "llama.cpp's list): it is GPT-2's byte-level BPE, which scripts/gguf_convert.py answers."
        )
    return notes


# --------------------------------------------------------------------------- entry point

_EXPORTERS = {"vllm": export_vllm, "sglang": export_sglang, "llama.cpp": export_llama_cpp}


def export(engine: str, pair: ExportPair, options: ServeOptions | None = None) -> Export:
    """The engine's launch command for `pair` (UsageError for an unknown engine or what it cannot run)."""
    return _EXPORTERS[check_engine(engine)](pair, options or ServeOptions())
