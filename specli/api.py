"""Python API: `load(...)` a target/drafter pair once, then `generate` or `stream` many times.

import specli
pair = specli.load("llama-8b-1b")               # or load(target="./my-model", draft="./small")
result = pair.generate("def fibonacci(n):", max_new_tokens=64)
print(result.text, result.stats.acceptance_rate)
for round in pair.stream("Hello", temperature=0.7, seed=1): ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoConfig

from specli import loading
from specli.cached_lm import CachedLM, check_sliding_rollback
from specli.drafters.base import Drafter
from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.prompt_lookup import PromptLookupDrafter
from specli.drafters.self_speculative import SelfSpeculativeDrafter
from specli.engine import EngineConfig, generate_rounds
from specli.errors import UsageError
from specli.events import Round, Stats
from specli.layer_stack import LayerStack, check_architecture, check_layer_stack
from specli.placement import Placement, describe_gpus, plan_placement
from specli.presets import GenerationSpec, Preset, SpeculationSpec, resolve_preset
from specli.sampling import SamplingConfig
from specli.stopping import StopCriteria

DEFAULT_PRESET = "tiny"
STRATEGIES = ("draft", "lookup", "self", "none")
MODEL_FREE_STRATEGIES = ("lookup", "self", "none")  # need no drafter model


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy '{strategy}'.", f"Use one of: {', '.join(STRATEGIES)}.")
    return strategy


def check_ngram(ngram_min: int, ngram_max: int) -> None:
    """Prompt-lookup n-gram range: 1 <= ngram_min <= ngram_max."""
    if ngram_min < 1:
        raise UsageError(f"ngram-min must be at least 1 (got {ngram_min}).")
    if ngram_max < ngram_min:
        raise UsageError(f"ngram-max ({ngram_max}) must be at least ngram-min ({ngram_min}).")


def check_speculation_options(
    *, exit_layer: int | None = None, ngram_min: int | None = None, ngram_max: int | None = None
) -> None:
    """Cheap checks of --exit-layer / --ngram-min / --ngram-max before anything loads."""
    if exit_layer is not None and exit_layer < 1:
        raise UsageError(f"exit-layer must be at least 1 (got {exit_layer}).")
    low = 1 if ngram_min is None else ngram_min
    check_ngram(low, max(low, SpeculationSpec().ngram_max) if ngram_max is None else ngram_max)


def default_exit_layer(num_layers: int) -> int:
    """The exit layer used when neither the call nor the preset names one: a quarter of the depth."""
    return max(1, num_layers // 4)


def check_settings(
    *, max_new_tokens: int, temperature: float, top_k: int, top_p: float, num_draft_tokens: int
) -> None:
    """Raise UsageError for a value outside its range (the same rules the preset schema applies)."""
    if max_new_tokens < 1:
        raise UsageError(f"max-new-tokens must be at least 1 (got {max_new_tokens}).")
    if not temperature >= 0 or math.isinf(temperature):
        raise UsageError(f"temperature must be a number >= 0 (got {temperature}); 0 is greedy decoding.")
    if top_k < 0:
        raise UsageError(f"top-k must be >= 0 (got {top_k}); 0 turns it off.")
    if not 0 < top_p <= 1:
        raise UsageError(f"top-p must be in (0, 1] (got {top_p}); 1 turns it off.")
    if num_draft_tokens < 1:
        raise UsageError(f"num-draft-tokens must be at least 1 (got {num_draft_tokens}).")


def check_model_options(*, device: str, dtype: str | None, quant: str | None) -> None:
    """Cheap checks of --device/--dtype/--quant before anything loads."""
    loading.resolve_device(device)
    if dtype is not None:
        loading.resolve_dtype(dtype, torch.device("cpu"))
    if quant is not None and quant not in loading.QUANT_MODES:
        raise UsageError(f"unknown quantization '{quant}'.", "Use one of: none, 8bit, 4bit.")


@dataclass
class Result:
    """What one generation produced: text, generated ids (prompt excluded), stats and every round."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    stats: Stats
    rounds: list[Round]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "prompt_token_ids": self.prompt_token_ids,
            "stats": self.stats.to_dict(),
            "rounds": [r.to_dict() for r in self.rounds],
        }


class Pair:
    """A loaded target (+ drafter) with generation defaults. Holds no per-generation state."""

    def __init__(
        self,
        target_model: Any,
        tokenizer: Any,
        draft_model: Any | None = None,
        *,
        strategy: str = "draft",
        target_name: str = "target",
        draft_name: str | None = None,
        generation: GenerationSpec | None = None,
        speculation: SpeculationSpec | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.strategy = check_strategy(strategy)
        if strategy == "draft" and draft_model is None:
            raise UsageError(
                "strategy 'draft' needs a drafter model.",
                "Pass --draft MODEL, or use --strategy none for plain decoding.",
            )
        self.target_model = target_model
        self.draft_model = draft_model
        self.tokenizer = tokenizer
        self.target_name = target_name
        self.draft_name = draft_name
        self.generation = generation or GenerationSpec()
        self.speculation = speculation or SpeculationSpec()
        self.placement = placement  # set when the target is split over several GPUs
        if strategy == "self":
            check_layer_stack(target_model)
        self.target = CachedLM(target_model)
        self.draft = CachedLM(draft_model) if draft_model is not None else None
        self.draft_max_positions = loading.model_max_positions(draft_model) if self.draft else None
        self.eos_ids = loading.eos_token_ids(target_model, tokenizer)
        self.max_positions = loading.model_max_positions(target_model)

    # --- text <-> ids -------------------------------------------------------------------------
    def uses_chat(self, chat: bool | None = None) -> bool:
        """chat=None follows the preset ('auto': on when the tokenizer has a chat template)."""
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if chat is None:
            mode = self.generation.chat_template
            chat = has_template if mode == "auto" else mode == "on"
        if chat and not has_template:
            raise UsageError(f"'{self.target_name}' has no chat template.", "Run without --chat.")
        return chat

    def encode(self, prompt: str, chat: bool | None = None) -> list[int]:
        """Prompt text -> ids, through the chat template when chat is on."""
        if self.uses_chat(chat):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(prompt)["input_ids"]
        if not ids:
            bos = self.tokenizer.bos_token_id
            if bos is None:
                raise UsageError("the prompt is empty.", "Give some text to continue.")
            ids = [bos]
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # --- generation -----------------------------------------------------------------------------
    def _drafter(
        self,
        strategy: str,
        exit_layer: int | None,
        ngram_min: int | None,
        ngram_max: int | None,
        length: int,
    ) -> Drafter | None:
        """The strategy's drafter for a generation that can reach `length` tokens (None: plain)."""
        spec = self.speculation
        if strategy == "none":
            return None
        if strategy == "lookup":
            low = spec.ngram_min if ngram_min is None else ngram_min
            high = spec.ngram_max if ngram_max is None else ngram_max
            check_ngram(low, high)
            return PromptLookupDrafter(low, high)
        if strategy == "self":
            stack = LayerStack(self.target_model)
            layer = exit_layer if exit_layer is not None else spec.exit_layer
            if layer is None:
                layer = default_exit_layer(stack.num_layers)
            if not 1 <= layer < stack.num_layers:
                raise UsageError(
                    f"exit layer {layer} is out of range for '{self.target_name}' "
                    f"({stack.num_layers} layers).",
                    f"Pick --exit-layer between 1 and {stack.num_layers - 1}.",
                )
            check_sliding_rollback(self.target, f"'{self.target_name}' (strategy self)", length)
            return SelfSpeculativeDrafter(stack, layer)
        if self.draft is None:
            raise UsageError(f"strategy '{strategy}' needs a drafter model.", "Pass --draft MODEL.")
        check_sliding_rollback(self.draft, f"the drafter '{self.draft_name}'", length)
        return DraftModelDrafter(self.draft, self.target.vocab_size, self.draft_max_positions)

    def stream(
        self,
        prompt: str | None = None,
        *,
        prompt_ids: Sequence[int] | None = None,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        num_draft_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        chat: bool | None = None,
        strategy: str | None = None,
        exit_layer: int | None = None,
        ngram_min: int | None = None,
        ngram_max: int | None = None,
        record_top: int = 0,
    ) -> Iterator[Round]:
        """Yield one Round per target forward. `prompt_ids` bypasses tokenization and chat templates.

        Unset settings come from the preset. Each call starts from fresh caches and drafter state.
        exit_layer applies to strategy 'self'; ngram_min/ngram_max to 'lookup'. record_top > 0 fills
        each round's token_source (the top entries of the distribution its last token came from).
        """
        ids = self.prompt_ids(prompt, prompt_ids=prompt_ids, chat=chat)
        g, s = self.generation, self.speculation
        config = EngineConfig(
            max_new_tokens=g.max_new_tokens if max_new_tokens is None else max_new_tokens,
            num_draft_tokens=s.num_draft_tokens if num_draft_tokens is None else num_draft_tokens,
            sampling=SamplingConfig(
                temperature=float(g.temperature if temperature is None else temperature),
                top_k=g.top_k if top_k is None else top_k,
                top_p=float(g.top_p if top_p is None else top_p),
            ),
            seed=seed,
            record_top=record_top,
        )
        check_settings(
            max_new_tokens=config.max_new_tokens,
            temperature=config.sampling.temperature,
            top_k=config.sampling.top_k,
            top_p=config.sampling.top_p,
            num_draft_tokens=config.num_draft_tokens,
        )
        length = len(ids) + config.max_new_tokens + config.num_draft_tokens
        drafter = self._drafter(
            check_strategy(strategy or self.strategy), exit_layer, ngram_min, ngram_max, length
        )
        criteria = StopCriteria(self.eos_ids, tuple(stop or ()), self.decode)
        return generate_rounds(self.target, drafter, ids, config, criteria, self.max_positions)

    def prompt_ids(
        self, prompt: str | None = None, *, prompt_ids: Sequence[int] | None = None, chat: bool | None = None
    ) -> list[int]:
        """The ids generation starts from; checks they fit the context."""
        if (prompt is None) == (prompt_ids is None):
            raise UsageError("give exactly one of prompt and prompt_ids.")
        ids = list(prompt_ids) if prompt_ids is not None else self.encode(prompt, chat)
        if not ids:
            raise UsageError("prompt_ids is empty.")
        vocab = self.target.vocab_size
        if any(not 0 <= i < vocab for i in ids):
            raise UsageError(f"prompt_ids holds ids outside the vocabulary [0, {vocab}).")
        if self.max_positions is not None and len(ids) >= self.max_positions:
            raise UsageError(
                f"the prompt is {len(ids)} tokens but '{self.target_name}' has a context of "
                f"{self.max_positions} tokens.",
                "Shorten the prompt so there is room to generate.",
            )
        return ids

    def generate(self, prompt: str | None = None, **kwargs: Any) -> Result:
        """Run to a stop and collect the result; takes the same arguments as `stream`."""
        ids = self.prompt_ids(
            prompt, prompt_ids=kwargs.pop("prompt_ids", None), chat=kwargs.pop("chat", None)
        )
        stats, rounds, tokens = Stats(), [], []
        for r in self.stream(prompt_ids=ids, **kwargs):
            stats.observe(r)
            rounds.append(r)
            tokens += r.committed
        return Result(self.decode(tokens), tokens, ids, stats, rounds)


def _estimate_needs(
    models: list[tuple[Any, str, str, str]], device: torch.device, trust_remote_code: bool
) -> list[Any] | None:
    """What each model will take (memory.Need), from configs alone; None when one cannot be estimated."""
    from specli import memory

    needs = []
    for folder, name, dtype_spec, quant_spec in models:
        config = loading.read_config(folder)
        if config is None:
            return None
        try:
            shape = memory.Shape.from_config(config)
            dtype = _dtype_for(dtype_spec, device, folder, trust_remote_code)
            estimate = memory.estimate(shape, torch.finfo(dtype).bits // 8, quant_spec, memory.PLAN_CONTEXT)
        except (ValueError, TypeError, KeyError, ZeroDivisionError):
            return None  # an unusual config: no estimate, no check
        needs.append(memory.Need(name, str(dtype).replace("torch.", ""), quant_spec, estimate))
    return needs


def _gpu_count(device_spec: str) -> int:
    """GPUs `--device auto` may spread over (0 for any other device, or without CUDA)."""
    if device_spec.strip().lower() != "auto" or not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def _plan(
    models: list[tuple[Any, str, str, str]], device: torch.device, device_spec: str, trust_remote_code: bool
) -> Placement | None:
    """Before any weights load: check the pair fits (stop with figures and options when not) and, with
    several GPUs under --device auto, plan where each model goes. None: everything on `device`."""
    import os

    from specli import memory

    checked = os.environ.get("SPECLI_NO_MEMORY_CHECK") != "1"
    gpus = _gpu_count(device_spec)
    if gpus < 2:
        needs = _estimate_needs(models, device, trust_remote_code) if checked else None
        if needs is not None:
            memory.check_fits(needs, device, memory.free_bytes(device))
        return None
    everywhere = Placement(tuple(range(gpus)), {}, gpus - 1 if len(models) > 1 else None)
    needs = _estimate_needs(models, device, trust_remote_code)
    if needs is None:  # no estimate: accelerate spreads the target, the drafter goes beside its LM head
        return everywhere
    free = [memory.free_bytes(torch.device("cuda", i)) or 0 for i in range(gpus)]
    draft = needs[1].estimate if len(needs) > 1 else None
    plan = plan_placement(free, needs[0].estimate, draft, quantized=needs[0].quant != "none")
    if plan is None:
        if checked:
            raise memory.not_enough(needs, f"the {gpus} GPUs have {describe_gpus(free)}", cuda=True)
        return everywhere
    return plan if plan.split else None


def _dtype_for(spec: str, device: torch.device, folder: Any, trust_remote_code: bool) -> torch.dtype:
    """Resolve a dtype; 'auto' on CUDA consults the checkpoint's own config."""
    config = None
    if spec == "auto" and device.type == "cuda":
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    return loading.resolve_dtype(spec, device, config)


def load(
    preset: str | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    strategy: str | None = None,
    device: str = "auto",
    dtype: str | None = None,
    quant: str | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    download_bars: Callable[[str], Any] | None = None,
) -> Pair:
    """Load a pair from a preset name/path and/or explicit models; explicit arguments win over the preset.

    With no preset, target or draft, the embedded `tiny` preset is used (offline, CPU-sized).

    `dtype` applies to both models, `quant` to the target only. Tokenizers are compared before any
    weights load. download_bars(model) may return a tqdm class for huggingface_hub's download bars.
    With device "auto" and several GPUs, a target too big for the first GPU is split over as few GPUs
    as hold it (see `placement`), the drafter beside its LM head.
    """
    if preset is None and target is None and draft is None:
        preset = DEFAULT_PRESET
    spec: Preset | None = resolve_preset(preset) if preset else None
    target_source = target or (spec.target.model if spec else None)
    if target_source is None:
        raise UsageError(
            "no model given.", "Pass --preset NAME (see `specli presets list`) or --target MODEL."
        )
    draft_source = draft or (spec.draft.model if spec and spec.draft else None)
    strategy = check_strategy(strategy or (spec.strategy if spec else ("draft" if draft_source else "none")))
    if strategy in MODEL_FREE_STRATEGIES:
        draft_source = None
    elif strategy == "draft" and draft_source is None:
        raise UsageError(
            "strategy 'draft' needs a drafter model.",
            "Pass --draft MODEL, or use --strategy none for plain decoding.",
        )
    target_dtype = dtype or (spec.target.dtype if spec and not target else "auto")
    target_quant = quant or (spec.target.quantization if spec and not target else "none")
    draft_dtype = dtype or (spec.draft.dtype if spec and spec.draft and not draft else "auto")
    draft_quant = spec.draft.quantization if spec and spec.draft and not draft else "none"

    dev = loading.resolve_device(device)
    remote = trust_remote_code

    def fetch(source: str, weights: bool = False) -> Any:
        return loading.resolve_source(
            source,
            allow_pickle=allow_pickle,
            trust_remote_code=remote,
            weights=weights,
            tqdm_class=download_bars(source) if download_bars else None,
        )

    def fetch_tokenizer(source: str) -> tuple[Any, Any]:
        """Configs and tokenizer only: every check below runs before any weights are downloaded."""
        folder = fetch(source)
        return folder, loading.load_tokenizer(folder, trust_remote_code=trust_remote_code, name=source)

    target_dir, tokenizer = fetch_tokenizer(target_source)
    if strategy == "self":  # refuse an unsupported architecture before any weights load
        check_architecture(str((loading.read_config(target_dir) or {}).get("model_type", "?")), "self")
    draft_dir = None
    if draft_source is not None:
        draft_dir, draft_tokenizer = fetch_tokenizer(draft_source)
        loading.check_tokenizers(tokenizer, draft_tokenizer, target_source, draft_source)

    placement = _plan(
        [(target_dir, target_source, target_dtype, target_quant)]
        + ([(draft_dir, draft_source, draft_dtype, draft_quant)] if draft_dir is not None else []),
        dev,
        device,
        trust_remote_code,
    )

    def weights(folder: Any, name: str, dtype_spec: str, quant_spec: str, **where: Any) -> Any:
        return loading.load_model(
            fetch(name, weights=True),
            dtype=_dtype_for(dtype_spec, dev, folder, trust_remote_code),
            quant=quant_spec,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
            name=name,
            **where,
        )

    split = placement.max_memory if placement is not None else None  # None: whole on `dev`
    target_model = weights(
        target_dir, target_source, target_dtype, target_quant, device=dev, max_memory=split
    )
    draft_model = None
    if draft_dir is not None:
        draft_dev = dev if placement is None else _draft_device(target_model, placement)
        draft_model = weights(draft_dir, draft_source, draft_dtype, draft_quant, device=draft_dev)
    return Pair(
        target_model,
        tokenizer,
        draft_model,
        strategy=strategy,
        target_name=target_source,
        draft_name=draft_source,
        generation=spec.generation if spec else None,
        speculation=spec.speculation if spec else None,
        placement=placement,
    )


def _draft_device(target_model: Any, placement: Placement) -> torch.device:
    """The GPU that got the target's LM head (so p and q meet there) if the drafter fits there; else the
    planned one."""
    from specli import memory

    planned = torch.device("cuda", placement.draft_gpu or 0)
    head = CachedLM(target_model).output_device
    if head.type != "cuda" or head == planned:
        return planned
    return head if (memory.free_bytes(head) or 0) >= placement.draft_bytes else planned
