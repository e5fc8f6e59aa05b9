"""Before any weights load: will the pair fit, and where does each model go?

`plan_pair` estimates what each model needs from its config alone (`memory`), stops with figures and
options when the pair does not fit, and with several GPUs under `--device auto` plans where the target's
layers and the drafter go (`placement`). `draft_device` then picks the drafter's GPU once the target
is placed. `load` in `api` applies the plan.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from specli.errors import SpecliError
from specli.models import head_formats, loading, memory
from specli.models.blockwise_heads import HeadsConfig
from specli.models.cached_lm import CachedLM
from specli.models.eagle_head import HeadConfig
from specli.models.placement import Placement, describe_gpus, plan_placement


@dataclass(frozen=True)
class ModelToLoad:
    """One model of a pair: its name as given, dtype, quantization, and once fetched its folder (configs
    and tokenizer; the weights come later)."""

    name: str
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    quant: str = "none"  # none | 8bit | 4bit
    folder: Path | None = None
    config: Any = None  # an EAGLE head's HeadConfig, once read


def dtype_for(model: ModelToLoad, device: torch.device, trust_remote_code: bool) -> torch.dtype:
    """Resolve a model's dtype; 'auto' on CUDA consults the checkpoint's own config."""
    config = None
    if model.dtype == "auto" and device.type == "cuda":
        config = AutoConfig.from_pretrained(model.folder, trust_remote_code=trust_remote_code)
    return loading.resolve_dtype(model.dtype, device, config)


def estimate_needs(
    models: list[ModelToLoad], device: torch.device, trust_remote_code: bool
) -> list[memory.Need] | None:
    """What each model will take, from configs alone; None when one cannot be estimated."""
    needs = []
    for model in models:
        config = loading.read_config(model.folder)
        if config is None:
            return None
        try:
            shape = memory.Shape.from_config(config)
            dtype = dtype_for(model, device, trust_remote_code)
            context = shape.context(memory.PLAN_CONTEXT)  # a 512-token model never holds 4096 tokens of KV
            estimate = memory.estimate(shape, torch.finfo(dtype).bits // 8, model.quant, context)
        except (ValueError, TypeError, KeyError, ZeroDivisionError):
            return None  # an unusual config: no estimate, no check
        needs.append(
            memory.Need(model.name, str(dtype).replace("torch.", ""), model.quant, estimate, context, shape)
        )
    return needs


def gpu_count(device_spec: str) -> int:
    """GPUs `--device auto` may spread over (0 for any other device, or without CUDA)."""
    if device_spec.strip().lower() != "auto" or not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def head_need(
    head: ModelToLoad, target: ModelToLoad, device: torch.device, trust_remote_code: bool
) -> memory.Need:
    """An EAGLE head's weights (in the target's dtype unless its own is set: it loads beside the
    target's LM head) and its layers' KV cache for the planned context (blockwise heads keep none)."""
    config: HeadConfig | HeadsConfig = head.config
    dtype = dtype_for(target if head.dtype == "auto" else head, device, trust_remote_code)
    size = torch.finfo(dtype).bits // 8
    context, kv = memory.PLAN_CONTEXT, 0
    if isinstance(config, HeadConfig):
        context = min(memory.PLAN_CONTEXT, config.max_position_embeddings or memory.PLAN_CONTEXT)
        kv = 2 * config.num_layers * config.num_kv_heads * config.head_dim * context * size
    estimate = memory.Estimate(head_formats.head_parameter_bytes(config, dtype), kv)
    return memory.Need(head.name, str(dtype).replace("torch.", ""), "none", estimate, context)


def plan_pair(
    models: list[ModelToLoad],
    device: torch.device,
    device_spec: str,
    trust_remote_code: bool,
    heads: Sequence[memory.Need] = (),
) -> Placement | None:
    """Check the pair (and its EAGLE head or blockwise heads: `heads`) fits (stop with figures and
    options when not) and, with several GPUs under --device auto, plan where each model goes. None:
    everything on `device`.

    SPECLI_NO_MEMORY_CHECK=1 skips the check (a plan is still made where one fits)."""
    checked = os.environ.get("SPECLI_NO_MEMORY_CHECK") != "1"
    gpus = gpu_count(device_spec)
    if gpus < 2:
        needs = estimate_needs(models, device, trust_remote_code) if checked else None
        if needs is not None:
            needs += list(heads)
            available = memory.free_bytes(device)
            if available is not None and memory.total_bytes(needs) > available:
                also = _elsewhere(models, needs, device, device_spec, trust_remote_code)
                memory.check_fits(needs, device, available, also)
        return None
    beside = len(models) > 1 or bool(heads)  # something sits beside the target's LM head
    everywhere = Placement(tuple(range(gpus)), {}, gpus - 1 if beside else None)
    needs = estimate_needs(models, device, trust_remote_code)
    if needs is None:  # no estimate: accelerate spreads the target, the drafter goes beside its LM head
        return everywhere
    needs += list(heads)
    free = [memory.free_bytes(torch.device("cuda", i)) or 0 for i in range(gpus)]
    plan = _placed(free, needs)
    if plan is None:
        if checked:
            also = _on_cpu(models, needs, trust_remote_code)

            def fits(changed: list[memory.Need]) -> bool:
                return _placed(free, changed) is not None

            raise memory.not_enough(needs, f"the {gpus} GPUs have {describe_gpus(free)}", fits, also)
        return everywhere
    return plan if plan.split else None


def check_addition(needs: list[memory.Need], device: torch.device, load_call: str) -> None:
    """Before a model joins a pair already in memory: SpecliError when `device` has less free than
    `needs` take (unless SPECLI_NO_MEMORY_CHECK=1); load_call names the load that brings it from the
    start, planned with the rest."""
    available = memory.free_bytes(device)
    total = memory.total_bytes(needs)
    if os.environ.get("SPECLI_NO_MEMORY_CHECK") == "1" or available is None or total <= available:
        return
    names = ", ".join(n.name for n in needs)
    raise SpecliError(
        f"not enough memory to add {names}: it needs about {memory.human(total)} but {device} has "
        f"{memory.human(available)} free beside the models already loaded.",
        f"Load the pair with the strategy you use, {load_call}. SPECLI_NO_MEMORY_CHECK=1 skips this check.",
    )


def _placed(free: list[int], needs: list[memory.Need]) -> Placement | None:
    """Where the target (needs[0]) and what sits beside its LM head go on GPUs with `free` bytes."""
    draft = _together([n.estimate for n in needs[1:]])
    return plan_placement(free, needs[0].estimate, draft, quantized=needs[0].quant != "none")


def _elsewhere(
    models: list[ModelToLoad],
    needs: list[memory.Need],
    device: torch.device,
    device_spec: str,
    trust_remote_code: bool,
) -> list[memory.Option]:
    """Devices other than `device` that hold the pair as asked: several GPUs under --device auto (the
    target split, the drafter beside its LM head), or (from a GPU) the system memory, much slower."""
    options = []
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count > 1 and device_spec.strip().lower() != "auto":
        free = [memory.free_bytes(torch.device("cuda", i)) or 0 for i in range(count)]
        if _placed(free, needs) is not None:
            options.append(memory.Option(f"--device auto (over {count} GPUs)", memory.total_bytes(needs)))
    if device.type == "cuda":
        options += _on_cpu(models, needs, trust_remote_code)
    return options


def _on_cpu(
    models: list[ModelToLoad], needs: list[memory.Need], trust_remote_code: bool
) -> list[memory.Option]:
    """--device cpu when the system memory holds the pair at CPU dtypes (an EAGLE head at the target's)."""
    cpu = torch.device("cpu")
    on_cpu = estimate_needs(models, cpu, trust_remote_code)
    if on_cpu is None:
        return []
    on_cpu += [memory.resized(n, dtype=on_cpu[0].dtype) for n in needs[len(models) :]]
    total, available = memory.total_bytes(on_cpu), memory.free_bytes(cpu)
    if available is None or total > available:
        return []
    return [memory.Option("--device cpu (system memory; many times slower than a GPU)", total)]


def _together(estimates: list[memory.Estimate]) -> memory.Estimate | None:
    """What sits beside the target's LM head (a drafter, a head, or both), as one estimate."""
    if not estimates:
        return None
    return memory.Estimate(sum(e.weights_bytes for e in estimates), sum(e.kv_bytes for e in estimates))


def draft_device(target_model: torch.nn.Module, placement: Placement) -> torch.device:
    """The GPU that got the target's LM head (so p and q meet there) if the drafter fits there; else the
    planned one."""
    planned = torch.device("cuda", placement.draft_gpu or 0)
    head = CachedLM(target_model).output_device
    if head.type != "cuda" or head == planned:
        return planned
    return head if (memory.free_bytes(head) or 0) >= placement.draft_bytes else planned
