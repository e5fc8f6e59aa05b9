"""The memory planner: how much a model needs (weights at a dtype/quantization + KV cache for a context),
estimated from its config before any weights load, and whether that fits the devices' free memory.

Weights are counted from the architecture (embeddings, attention, gated MLP, norms, LM head unless tied);
a mixture-of-experts model counts every expert's gated MLP and the router (all experts sit in memory, however
few are active per token). Sliding-window layers (gpt-oss, Gemma 2) hold at most their window of keys and
values. bitsandbytes quantizes the decoder layers' linear weights only: 8-bit stores 1 byte per weight plus a
float scale per row; 4-bit (nf4, double-quantized) about 4.13 bits per weight. Embeddings, norms, the
LM head and a mixture's experts (3-D parameters, not linear modules) stay at the compute dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from specli.errors import SpecliError
from specli.models import sources
from specli.models.model_dirs import config_max_positions
from specli.strategies import Model, entry

NF4_BITS = 4.127  # 4-bit weights + double-quantized absmax per block of 64
WORKSPACE = 1.10  # activations, allocator slack, CUDA context: 10% on top


@dataclass(frozen=True)
class Shape:
    """The numbers of a decoder-only transformer that its memory depends on."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tied: bool
    head_dim: int | None = None
    attention_bias: bool = False
    max_positions: int | None = None  # the longest context the config declares (None: not declared)
    experts: int = 0  # routed experts per layer, each a gated MLP of intermediate_size (0: one dense MLP)
    sliding_layers: int = 0  # layers that attend to the last sliding_window tokens only
    sliding_window: int | None = None

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    def context(self, tokens: int) -> int:
        """The KV cache to plan for when `tokens` are asked: the model never holds more than its context."""
        return min(tokens, self.max_positions) if self.max_positions else tokens

    @classmethod
    def from_config(cls, config: Any) -> Shape:
        """From a transformers config object or a config.json dict (text configs of multimodal ones too)."""
        get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
        text = get("text_config")
        if text:
            return cls.from_config(text)
        heads = get("num_attention_heads") or get("n_head")
        hidden = get("hidden_size") or get("n_embd")
        experts = get("num_local_experts") or get("num_experts") or 0
        experts = experts if isinstance(experts, int) and experts > 1 else 0
        mlp = (
            (get("moe_intermediate_size") if experts else None) or get("intermediate_size") or get("n_inner")
        )
        window = get("sliding_window")
        sliding = sum(kind == "sliding_attention" for kind in get("layer_types") or ()) if window else 0
        return cls(
            vocab_size=get("vocab_size"),
            hidden_size=hidden,
            num_layers=get("num_hidden_layers") or get("n_layer"),
            num_heads=heads,
            num_kv_heads=get("num_key_value_heads") or heads,
            intermediate_size=mlp or 4 * hidden,
            tied=bool(get("tie_word_embeddings", False)),
            head_dim=get("head_dim"),
            attention_bias=bool(get("attention_bias", False) or get("model_type") in ("qwen2",)),
            max_positions=config_max_positions(config),
            experts=experts,
            sliding_layers=sliding,
            sliding_window=window if sliding else None,
        )

    def linear_parameters(self) -> int:
        """Weights of the decoder layers' linear projections (what bitsandbytes quantizes)."""
        d, q, kv = self.hidden_size, self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        attention = d * q + 2 * d * kv + q * d
        mlp = 0 if self.experts else 3 * d * self.intermediate_size
        return self.num_layers * (attention + mlp)

    def expert_parameters(self) -> int:
        """A mixture of experts' MLPs and router [experts, d]: 3-D parameters in transformers 5, which
        bitsandbytes does not quantize (it replaces nn.Linear modules only)."""
        d = self.hidden_size
        return self.num_layers * self.experts * (3 * d * self.intermediate_size + d)

    def other_parameters(self) -> int:
        """Embeddings, LM head (unless tied), norms and biases."""
        d = self.hidden_size
        q, kv = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        bias = self.num_layers * (q + 2 * kv) if self.attention_bias else 0
        head = 0 if self.tied else self.vocab_size * d
        return self.vocab_size * d + head + self.num_layers * 2 * d + d + bias

    def parameters(self) -> int:
        return self.linear_parameters() + self.expert_parameters() + self.other_parameters()

    def kv_bytes(self, tokens: int, dtype_bytes: int = 2) -> int:
        """Keys and values of every layer for `tokens` positions (a sliding layer's window at most)."""
        window = min(tokens, self.sliding_window) if self.sliding_window else tokens
        positions = (self.num_layers - self.sliding_layers) * tokens + self.sliding_layers * window
        return 2 * self.num_kv_heads * self.head_size * positions * dtype_bytes


@dataclass(frozen=True)
class Estimate:
    """weights_bytes and kv_bytes of one model.

    modules: the sizes of the parts a device map places whole, in model order (embedding, each decoder
    layer, final norm + LM head); tied: the LM head shares the embedding (so it sits where that does).
    """

    weights_bytes: int
    kv_bytes: int
    modules: tuple[int, ...] = ()
    tied: bool = False

    @property
    def total_bytes(self) -> int:
        """Weights + KV cache + 10% workspace."""
        return int((self.weights_bytes + self.kv_bytes) * WORKSPACE)


def estimate(shape: Shape, dtype_bytes: int = 2, quant: str = "none", context: int = 4096) -> Estimate:
    """Memory of one model at a dtype (bytes per value) and quantization, with a KV cache of `context`."""
    linear, other = shape.linear_parameters(), shape.other_parameters() + shape.expert_parameters()
    if quant == "4bit":
        weights = linear * NF4_BITS / 8 + other * dtype_bytes
    elif quant == "8bit":
        rows = shape.num_layers * (2 * shape.hidden_size + 2 * shape.num_kv_heads * shape.head_size)
        weights = linear + 4 * rows + other * dtype_bytes
    else:
        weights = (linear + other) * dtype_bytes
    embedding = shape.vocab_size * shape.hidden_size * dtype_bytes
    head = shape.hidden_size * dtype_bytes + (0 if shape.tied else embedding)
    layer = int((weights - embedding - head) / shape.num_layers)
    modules = (embedding, *[layer] * shape.num_layers, head)
    return Estimate(int(weights), shape.kv_bytes(context, dtype_bytes), modules, shape.tied)


def _llama(v: int, d: int, n: int, h: int, kv: int, i: int, tied: bool, bias: bool = False) -> Shape:
    return Shape(v, d, n, h, kv, i, tied, attention_bias=bias)


# Architectures of the models the shipped presets name, so presets can be planned before any download.
KNOWN_SHAPES: MappingProxyType[str, Shape] = MappingProxyType(
    {
        "meta-llama/Llama-3.1-8B-Instruct": _llama(128256, 4096, 32, 32, 8, 14336, False),
        "meta-llama/Llama-3.1-70B-Instruct": _llama(128256, 8192, 80, 64, 8, 28672, False),
        "meta-llama/Llama-3.3-70B-Instruct": _llama(128256, 8192, 80, 64, 8, 28672, False),
        "Qwen/Qwen3-8B": Shape(151936, 4096, 36, 32, 8, 12288, False, head_dim=128),
        "meta-llama/Llama-3.2-1B-Instruct": _llama(128256, 2048, 16, 32, 8, 8192, True),
        "Qwen/Qwen2.5-7B-Instruct": _llama(152064, 3584, 28, 28, 4, 18944, False, True),
        "Qwen/Qwen2.5-32B-Instruct": _llama(152064, 5120, 64, 40, 8, 27648, False, True),
        "Qwen/Qwen2.5-0.5B-Instruct": _llama(151936, 896, 24, 14, 2, 4864, True, True),
        "Qwen/Qwen2.5-Coder-32B-Instruct": _llama(152064, 5120, 64, 40, 8, 27648, False, True),
        "Qwen/Qwen2.5-Coder-0.5B-Instruct": _llama(151936, 896, 24, 14, 2, 4864, True, True),
        "facebook/layerskip-llama3.2-1B": _llama(128256, 2048, 16, 32, 8, 8192, True),
        "facebook/layerskip-llama3-8B": _llama(128256, 4096, 32, 32, 8, 14336, False),
        # PARD parallel drafters: Llama-3.2-1B and Qwen2.5-0.5B adapted, same shapes (pard_token reuses a row)
        "amd/PARD-Llama-3.2-1B": _llama(128256, 2048, 16, 32, 8, 8192, True),
        "amd/PARD-Qwen2.5-0.5B": _llama(151936, 896, 24, 14, 2, 4864, True, True),
        # 32 experts (4 active) per layer; every other layer attends to a 128-token window
        "openai/gpt-oss-20b": Shape(
            vocab_size=201088,
            hidden_size=2880,
            num_layers=24,
            num_heads=64,
            num_kv_heads=8,
            intermediate_size=2880,  # each expert's
            tied=False,
            head_dim=64,
            attention_bias=True,
            experts=32,
            sliding_layers=12,
            sliding_window=128,
        ),
    }
)


def shape_of(model: str) -> Shape | None:
    """The Shape of a model named by a preset: a local folder's config.json, a GGUF's header (a local
    file, a cached hub file, an Ollama model: its dequantized shape), a known hub id, or None."""
    try:
        config = sources.local_config(sources.classify(model))
    except SpecliError:  # a name that is nothing here (or a damaged GGUF): no estimate
        config = None
    if config is not None:
        try:
            return Shape.from_config(config)
        except (ValueError, TypeError, KeyError):
            return None
    return KNOWN_SHAPES.get(model)


DTYPE_BYTES = MappingProxyType({"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2})


EAGLE_DRAFT_VOCAB = 32000  # the reduced draft vocabulary most EAGLE-3 heads use


@dataclass(frozen=True)
class HeadShape:
    """What an EAGLE head has beyond the one-layer head `head_estimate` derives from its target's shape."""

    layers: int = 1  # decoder layers: the first reads 2d (embedding + feature), the rest are plain layers
    draft_vocab: int | None = None  # rows of its LM head (None: up to EAGLE_DRAFT_VOCAB)
    intermediate_size: int | None = None  # its MLP (None: the target's)
    parallel: bool = False  # P-EAGLE: trained embeddings of its own (target vocabulary) and mask_hidden [3d]


def head_estimate(
    target: Shape, dtype_bytes: int = 2, context: int = 4096, head: HeadShape | None = None
) -> Estimate:
    """An EAGLE-3 head for `target`, from the target's shape (and `head`, where known): fc [3d -> d], a
    decoder layer whose q/k/v read 2d and (multi-layer heads) plain layers after it, the norms and an LM
    head over a draft vocabulary of up to 32k tokens (a P-EAGLE head adds embeddings and mask_hidden);
    KV of each layer for `context` tokens, or the target's own context when shorter."""
    head = head or HeadShape()
    context = target.context(context)
    d, q, kv = target.hidden_size, target.num_heads * target.head_size, target.num_kv_heads * target.head_size
    mlp = 3 * d * (head.intermediate_size or target.intermediate_size)
    layer = 2 * d * (q + 2 * kv) + q * d + mlp
    more = (head.layers - 1) * (d * (q + 2 * kv) + q * d + mlp + 2 * d)
    vocab = head.draft_vocab or min(EAGLE_DRAFT_VOCAB, target.vocab_size)
    own = target.vocab_size * d + 3 * d if head.parallel else 0
    parameters = 3 * d * d + layer + more + vocab * d + 4 * d + own
    kv_bytes = head.layers * 2 * target.num_kv_heads * target.head_size * context * dtype_bytes
    return Estimate(parameters * dtype_bytes, kv_bytes)


# EAGLE heads the shipped presets name whose shape is not the one-layer default. The P-EAGLE head of
# gpt-oss-20b (facts from its model card and from aws-neuron/nkipy's loader of the checkpoint: an EAGLE-3
# fusion layer + 3 Llama layers, lm_head 2880 -> 201088 with an identity d2t, its own embed_tokens,
# mask_hidden [1, 1, 8640], ptd_token_id 201020; about 3.6 GB in bfloat16, 1.8B parameters). Its MLP width
# is inferred: 14336 is the width that gives that size with the target's attention shape.
KNOWN_HEADS: MappingProxyType[str, HeadShape] = MappingProxyType(
    {
        "amazon/GPT-OSS-20B-P-EAGLE": HeadShape(
            layers=4, draft_vocab=201088, intermediate_size=14336, parallel=True
        ),
    }
)


def _preset_shapes(preset: Any) -> list[Shape | None]:
    """The shapes of the models a preset loads: the target and the drafter (an EAGLE head has no shape of
    its own: it is planned from the target's)."""
    specs = [preset.target] + (
        [preset.draft] if preset.draft is not None and not preset.drafts_with_head else []
    )
    return [shape_of(spec.model) for spec in specs]


def preset_context(preset: Any, context: int = 4096) -> int:
    """The KV cache tokens `preset_estimate` plans for: `context`, or the longest context among the
    preset's models when that is shorter (the embedded tiny pair holds 512 tokens, not 4096)."""
    shapes = [shape for shape in _preset_shapes(preset) if shape is not None]
    return max((shape.context(context) for shape in shapes), default=context)


def preset_estimate(preset: Any, context: int = 4096) -> int | None:
    """Total bytes a preset needs (target + drafter or EAGLE head, KV for `context` tokens each, or a
    model's own context when shorter), or None if unknown. A drafter the preset's own strategy does not
    draft with counts when its config is known (it loads on the first generation that asks for it)."""
    total = 0
    if preset.drafts_with_head:  # the drafter is a head, beside the target's LM head
        target = shape_of(preset.target.model)
        if target is None:
            return None
        spec = preset.target
        dtype_bytes = (
            4 if spec.model.startswith("embedded:") and spec.dtype == "auto" else DTYPE_BYTES[spec.dtype]
        )
        target_bytes = estimate(target, dtype_bytes, spec.quantization, target.context(context)).total_bytes
        eagle = entry(preset.strategy).model == Model.HEAD
        head_spec = preset.eagle_head if eagle else preset.blockwise_heads
        head = KNOWN_HEADS.get(head_spec.model) if head_spec is not None else None
        return target_bytes + head_estimate(target, dtype_bytes, context, head).total_bytes
    for spec in (preset.target, preset.draft):
        if spec is None:
            continue
        shape = shape_of(spec.model)
        if shape is None and spec is preset.draft and entry(preset.strategy).model != Model.DRAFT:
            continue  # a drafter only another strategy loads, not on this machine (not trained yet)
        if shape is None:
            return None
        embedded = spec.model.startswith("embedded:")
        dtype_bytes = 4 if embedded and spec.dtype == "auto" else DTYPE_BYTES[spec.dtype]
        total += estimate(shape, dtype_bytes, spec.quantization, shape.context(context)).total_bytes
    return total


def human(n: int | None) -> str:
    """Bytes as '15.0 GB' / '61 MB' (decimal units, as model cards and nvidia-smi use)."""
    if n is None:
        return "?"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 100 * size else f"{n / size:.0f} {unit}"
    return f"{n / 1e3:.0f} kB"


PLAN_CONTEXT = 4096  # tokens of KV cache planned for at load time (less for a model with a shorter context)


def free_bytes(device: Any) -> int | None:
    """Free memory of a device: CUDA's own count, or MemAvailable of the system for CPU (None if unknown)."""
    if device.type == "cuda":
        import torch  # only here: `specli presets list` estimates memory without importing torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class Need:
    """What one model of a pair will take, for the message when it does not fit. needs[0] is the target;
    shape (None for an EAGLE head) lets the advice estimate it again at another dtype or quantization."""

    name: str
    dtype: str
    quant: str
    estimate: Estimate
    context: int = PLAN_CONTEXT  # the KV cache tokens `estimate` holds
    shape: Shape | None = None


@dataclass(frozen=True)
class Option:
    """A change that makes the pair fit (`advice`, as flags), and the bytes the pair then needs."""

    advice: str
    total_bytes: int


Fits = Callable[[list[Need]], bool]
QUANTS = ("none", "8bit", "4bit")  # mildest first
NO_DRAFTER = "--strategy lookup or self (no drafter)"
MIN_CONTEXT = 256  # a shorter context than this is not worth suggesting


def total_bytes(needs: list[Need]) -> int:
    return sum(n.estimate.total_bytes for n in needs)


def resized(
    need: Need, dtype: str | None = None, quant: str | None = None, context: int | None = None
) -> Need:
    """`need` at another dtype, quantization (a target's) or KV context: estimated again from its shape,
    or (an EAGLE head) scaled by bytes per value and tokens."""
    dtype, quant, context = dtype or need.dtype, quant or need.quant, context or need.context
    size, own = DTYPE_BYTES.get(dtype, 2), DTYPE_BYTES.get(need.dtype, 2)
    if need.shape is not None:
        new = estimate(need.shape, size, quant, context)
    else:
        kv = need.estimate.kv_bytes * size / own * context / max(need.context, 1)
        new = Estimate(int(need.estimate.weights_bytes * size / own), int(kv))
    return replace(need, dtype=dtype, quant=quant, estimate=new, context=context)


def _variants(needs: list[Need]) -> list[tuple[tuple[int, int, int], str, list[Need]]]:
    """Every combination of the changes a user can make with flags: 16-bit weights (when a model is in
    float32), a stronger --quant for the target, no drafter. Each as (levels, advice, needs); levels
    orders changes by how much they give up, (0, 0, 0) being the pair as asked."""
    target, quant = needs[0], needs[0].quant
    halves = (0, 1) if any(n.dtype == "float32" for n in needs) else (0,)
    quants = QUANTS[QUANTS.index(quant) :] if quant in QUANTS else (quant,)
    drops = (0, 1) if len(needs) > 1 else (0,)
    found = []
    for half in halves:
        for level, q in enumerate(quants):
            for drop in drops:
                dtype = "bfloat16" if half else None
                kept = needs[:1] if drop else needs
                changed = [resized(n, dtype, q if n is target else None) for n in kept]
                flags = " ".join(["--dtype bfloat16"] * half + [f"--quant {q}"] * (level > 0))
                advice = " with ".join(filter(None, [flags, NO_DRAFTER if drop else ""]))
                found.append(((half, level, drop), advice, changed))
    return found


def _dominates(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return a != b and all(x <= y for x, y in zip(a, b, strict=True))


def fitting_options(needs: list[Need], fits: Fits) -> list[Option]:
    """The least a user must give up to fit: each combination of flags that fits and that no milder
    fitting combination (fewer or weaker changes) makes needless, fewest changes first."""
    variants = [v for v in _variants(needs) if any(v[0]) and fits(v[2])]
    keep = [v for v in variants if not any(_dominates(w[0], v[0]) for w in variants)]
    keep.sort(key=lambda v: (sum(v[0]), v[0][1], v[0][2]))  # 16-bit first, then no drafter, then --quant
    return [Option(advice, total_bytes(changed)) for _, advice, changed in keep]


def smallest(needs: list[Need]) -> Option | None:
    """The smallest the pair can be made with flags (every change at once); None when nothing changes."""
    variants = [v for v in _variants(needs) if any(v[0])]
    if not variants:
        return None
    _, advice, changed = min(variants, key=lambda v: total_bytes(v[2]))
    return Option(advice, total_bytes(changed))


def shorter_context(needs: list[Need], fits: Fits) -> Option | None:
    """The longest context (prompt + output tokens, at least MIN_CONTEXT) the pair as asked fits with,
    when it fits only with less than the planned context; the check must then be skipped."""
    planned = max(n.context for n in needs)

    def at(tokens: int) -> list[Need]:
        return [resized(n, context=min(tokens, n.context)) for n in needs]

    if planned <= MIN_CONTEXT or not fits(at(MIN_CONTEXT)):
        return None
    low, high = MIN_CONTEXT, planned  # fits(low) holds, fits(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(at(mid)) else (low, mid)
    advice = f"at most {low} tokens of prompt + output (with the check skipped)"
    return Option(advice, total_bytes(at(low)))


def check_fits(needs: list[Need], device: Any, available: int | None, also: Sequence[Option] = ()) -> None:
    """Raise SpecliError (exit 1) with the figures and the options that would fit, when needs > available.
    also: options elsewhere (another device) that the caller found to fit."""
    if available is None or total_bytes(needs) <= available:
        return
    where = f"{device} has {human(available)} free"
    raise not_enough(needs, where, lambda changed: total_bytes(changed) <= available, also)


def not_enough(needs: list[Need], where: str, fits: Fits, also: Sequence[Option] = ()) -> SpecliError:
    """The error for a pair that does not fit: what each model needs, what `where` has, and the options
    that `fits` accepts (flags, a shorter context, then `also`), each with its estimate; when none fits,
    says so with the smallest estimate."""
    parts = ", ".join(
        f"{n.name} {human(n.estimate.weights_bytes)} ({n.quant if n.quant != 'none' else n.dtype})"
        for n in needs
    )
    context = max(n.context for n in needs)
    message = (
        f"not enough memory: the models need about {human(total_bytes(needs))} ({parts}, KV cache for "
        f"{context} tokens and 10% workspace) but {where}."
    )
    options = [*fitting_options(needs, fits), *filter(None, [shorter_context(needs, fits)]), *also]
    skip = "SPECLI_NO_MEMORY_CHECK=1 skips this check."
    if options:
        shown = "; ".join(f"{o.advice} needs about {human(o.total_bytes)}" for o in options)
        return SpecliError(message, f"Options that fit: {shown}. {skip}")
    least = smallest(needs)
    if least is None:
        return SpecliError(
            message, f"Nothing fits, and no flag makes it smaller: pick a smaller model. {skip}"
        )
    return SpecliError(
        message, f"Nothing fits: the smallest, {least.advice}, needs about {human(least.total_bytes)}. {skip}"
    )


# --------------------------------------------------------------------------- training (specli train)

ADAM_BYTES = 16  # per trained parameter: float32 weights, their gradients and AdamW's two moments


@dataclass(frozen=True)
class TrainingNeed:
    """What a training run holds: frozen weights (the target at its dtype and quantization), the trained
    parameters (float32, with gradients and AdamW state) and activations per token of a batch (the
    target's features and distributions, the trained model's forward and backward)."""

    frozen_bytes: int
    trained_parameters: int
    activation_bytes_per_token: int

    @property
    def optimizer_bytes(self) -> int:
        """The trained parameters with their gradients and AdamW moments."""
        return self.trained_parameters * ADAM_BYTES

    def activation_bytes(self, batch: int, context: int) -> int:
        return batch * context * self.activation_bytes_per_token

    def total_bytes(self, batch: int, context: int) -> int:
        """Everything at a batch of `batch` windows of `context` tokens, with 10% workspace."""
        held = self.frozen_bytes + self.optimizer_bytes + self.activation_bytes(batch, context)
        return int(held * WORKSPACE)


def largest_batch(need: TrainingNeed, context: int, available: int) -> int:
    """The largest batch of `context`-token windows that fits in `available` bytes (0: not even one)."""
    per_window = need.activation_bytes(1, context) * WORKSPACE
    room = available - (need.frozen_bytes + need.optimizer_bytes) * WORKSPACE
    batch = max(0, int(room // per_window)) if per_window > 0 else 0
    while batch > 0 and need.total_bytes(batch, context) > available:  # float rounding at the edge
        batch -= 1
    while per_window > 0 and need.total_bytes(batch + 1, context) <= available:
        batch += 1
    return batch


def largest_context(need: TrainingNeed, available: int, step: int = 64) -> int:
    """The longest context (a multiple of `step`) at batch 1 that fits in `available` bytes (0: none):
    activations grow with batch x context, so it is `step` times the largest batch of step-token windows."""
    return step * largest_batch(need, step, available)


def check_training_fits(
    need: TrainingNeed, batch: int, context: int, where: str, available: int | None
) -> None:
    """SpecliError (exit 1) when a run at `batch` x `context` needs more than `available` bytes, with the
    parts and the largest batch that fits (or, when none does, what to shrink)."""
    total = need.total_bytes(batch, context)
    if available is None or total <= available:
        return
    message = (
        f"not enough memory to train: about {human(total)} (frozen weights {human(need.frozen_bytes)}, "
        f"trained weights + gradients + optimizer {human(need.optimizer_bytes)}, activations "
        f"{human(need.activation_bytes(batch, context))} at batch {batch} x {context} tokens, 10% workspace) "
        f"but {where} has {human(available)} free."
    )
    skip = "SPECLI_NO_MEMORY_CHECK=1 skips this check."
    fitting = largest_batch(need, context, available)
    if fitting:
        hint = (
            f"The largest batch that fits: --batch-size {fitting} (about "
            f"{human(need.total_bytes(fitting, context))}). {skip}"
        )
    else:
        longest = largest_context(need, available)
        shorter = f"--context {longest} with --batch-size 1, " if longest >= 64 else ""
        hint = (
            f"Not even --batch-size 1 fits at --context {context}: try {shorter}a smaller head "
            f"(--draft-vocab, --layers) or --quant 4bit for the target. {skip}"
        )
    raise SpecliError(message, hint)
