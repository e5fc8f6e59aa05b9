"""One `Job` per kind: the model the optimizer trains, the loss of one batch, the random generators it
draws from, its validation and how it is written. The math is the recipes' own (eagle.head_loss,
peagle.peagle_loss, pard.pard_loss, common.draft_loss); this module only puts it together for any target.

Building a job is deterministic given the recipe and the data (a resumed run builds the same job, then
loads the checkpoint's weights, optimizer state and random states over it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specli.errors import UsageError
from specli.models.blockwise_heads import save_heads
from specli.models.eagle_head import EagleHead, init_weights
from specli.models.head_formats import save_head
from specli.training import eagle, heads, pard, peagle
from specli.training.common import DRAFTER_DTYPE, draft_loss, random_windows
from specli.training.recipe import TrainRecipe

# Seeds of each kind's generators, offset from --seed as the shipped recipes offset them.
SEED_OFFSETS = {
    "eagle3": {"data": 7, "noise": 8},
    "eagle1": {"data": 7, "noise": 8},
    "peagle": {"data": 21, "layouts": 22},
    "pard": {"data": 11, "layouts": 12},
    "draft": {"data": 2},
    "heads": {"data": 31},
}


@dataclass(frozen=True)
class Inputs:
    """What a job is built from: the frozen target (and its tokenizer), the recipe, the training token
    stream [N], the device, the target's name as the user gave it, and the starting point: a loaded
    EagleHead or causal LM (--init; float32 on `device`) with its tokenizer, or None."""

    target: Any
    tokenizer: Any
    recipe: TrainRecipe
    stream: torch.Tensor
    device: torch.device
    target_name: str
    init: Any = None
    init_tokenizer: Any = None


@dataclass
class Job:
    """kind's model and what the loop needs. step_loss() draws its own batch; evaluate(windows [n, C+1])
    -> agreement with the target by draft depth; save(folder) writes the drafter as users load it."""

    kind: str
    model: torch.nn.Module
    step_loss: Callable[[], tuple[torch.Tensor, dict[str, Any]]]
    generators: dict[str, torch.Generator]
    tokens_per_step: int
    evaluate: Callable[[torch.Tensor], list[float]]
    save: Callable[[Path], None]
    config: dict[str, Any]

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


def generators(kind: str, seed: int) -> dict[str, torch.Generator]:
    return {name: torch.Generator().manual_seed(seed + k) for name, k in SEED_OFFSETS[kind].items()}


def build_job(inputs: Inputs) -> Job:
    """The job of inputs.recipe.kind; the target is frozen."""
    for p in inputs.target.parameters():
        p.requires_grad_(False)
    builders = {
        "eagle3": _eagle, "eagle1": _eagle, "peagle": _peagle, "pard": _pard, "draft": _draft, "heads": _heads
    }  # fmt: skip
    return builders[inputs.recipe.kind](inputs)


# --------------------------------------------------------------------------- EAGLE heads


def new_head(inputs: Inputs, kind: str) -> EagleHead:
    """A fresh head for the target (--init absent): random layers; an eagle3 head's vocabulary is the
    stream's most frequent tokens and its norm and LM head start as the target's."""
    r, target = inputs.recipe, inputs.target
    config = eagle.head_config(
        target, kind, r.draft_vocab, r.intermediate, r.layers if kind == "eagle3" else 1, r.aux_layers
    )
    head = init_weights(EagleHead(config), seed=r.seed)
    if kind == "eagle3":
        ids = torch.arange(config.target_vocab_size)
        if config.reduced_vocab:
            ids = eagle.draft_vocabulary(inputs.stream, config.draft_vocab_size, config.target_vocab_size)
            eagle.set_vocabulary(head, ids)
        eagle.start_from_target(head, target, ids)
    return head


def _frozen_target_parts(head: EagleHead, target: Any) -> None:
    """The target's embeddings and LM head, read by the head but neither trained nor saved with it."""
    object.__setattr__(head, "target_embed", target.get_input_embeddings())
    object.__setattr__(head, "target_head", target.get_output_embeddings())


def _head_saver(head: EagleHead, inputs: Inputs, speculative_tokens: int = 4) -> Callable[[Path], None]:
    def save(folder: Path) -> None:
        device = head.fc.weight.device
        save_head(head.cpu(), folder, verifier=inputs.target_name, speculative_tokens=speculative_tokens)
        head.to(device)

    return save


def _eagle(inputs: Inputs) -> Job:
    r, target, device = inputs.recipe, inputs.target, inputs.device
    head = inputs.init if inputs.init is not None else new_head(inputs, r.kind)
    head = head.to(device=device, dtype=torch.float32)
    _frozen_target_parts(head, target)
    gens = generators(r.kind, r.seed)
    head_recipe = eagle.HeadRecipe(
        kind=r.kind,
        ttt_steps=r.ttt_steps,
        step_decay=r.step_decay,
        regression_weight=r.regression_weight,
        token_weight=r.token_weight,
        feature_noise=r.feature_noise,
        target_autocast=r.target_autocast,
    )

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(inputs.stream, r.batch_size, r.context, gens["data"]).to(device)
        return eagle.head_loss(head, target, window[:, :-1], head_recipe, gens["noise"])

    def evaluate(windows: torch.Tensor) -> list[float]:
        return eagle.evaluate(head, target, windows, max(r.ttt_steps, 4), r.target_autocast)[
            "agreement_by_step"
        ]

    return Job(
        r.kind,
        head,
        step_loss,
        gens,
        r.batch_size * r.context,
        evaluate,
        _head_saver(head, inputs),
        head.config.to_dict(),
    )


def _peagle(inputs: Inputs) -> Job:
    r, target, device = inputs.recipe, inputs.target, inputs.device
    base = inputs.init if inputs.init is not None else new_head(inputs, "eagle3")
    vocab = base.config.target_vocab_size
    head = (
        base
        if base.config.parallel
        else peagle.make_parallel(base.cpu(), target, peagle.rare_token(inputs.stream, vocab))
    )
    head = head.to(device=device, dtype=torch.float32)
    gens = generators("peagle", r.seed)
    parallel_recipe = peagle.PEagleRecipe(
        parallel=r.parallel, retain=r.retain, target_autocast=r.target_autocast
    )

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(inputs.stream, r.batch_size, r.context, gens["data"])[:, :-1].to(device)
        return peagle.peagle_loss(head, target, window, parallel_recipe, gens["layouts"])

    def evaluate(windows: torch.Tensor) -> list[float]:
        return peagle.evaluate(head, target, windows, r.parallel, r.target_autocast)["agreement_by_depth"]

    return Job(
        "peagle",
        head,
        step_loss,
        gens,
        r.batch_size * r.context,
        evaluate,
        _head_saver(head, inputs, speculative_tokens=r.parallel),
        head.config.to_dict(),
    )


def heads_vocabulary(inputs: Inputs) -> torch.Tensor | None:
    """The heads' draft vocabulary, chosen when they are saved: the data's --draft-vocab most frequent
    tokens (as for an EAGLE-3 head), or None (every token) when that is the target's whole vocabulary
    or 0. The heads train against the full distribution either way; the vocabulary only narrows drafting."""
    size, vocab = inputs.recipe.draft_vocab, int(inputs.target.config.get_text_config().vocab_size)
    if not 0 < size < vocab:
        return None
    return eagle.draft_vocabulary(inputs.stream, size, vocab)


def _heads(inputs: Inputs) -> Job:
    """Blockwise heads (--parallel of them) on the target's last hidden state; --init: heads to go on
    from."""
    r, target, device = inputs.recipe, inputs.target, inputs.device
    model = (
        inputs.init
        if inputs.init is not None
        else heads.new_heads(target, r.parallel, inputs.target_name, r.sequential, r.intermediate or 0)
    )
    model = model.to(device=device, dtype=torch.float32)
    gens = generators("heads", r.seed)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(inputs.stream, r.batch_size, r.context, gens["data"])[:, :-1].to(device)
        return heads.heads_loss(model, target, window, r.step_decay, r.target_autocast)

    def evaluate(windows: torch.Tensor) -> list[float]:
        return heads.evaluate(model, target, windows, r.target_autocast)

    def save(folder: Path) -> None:
        save_heads(model, folder, inputs.target_name, heads_vocabulary(inputs))

    return Job(
        "heads", model, step_loss, gens, r.batch_size * r.context, evaluate, save, model.config.to_dict()
    )


# --------------------------------------------------------------------------- draft models


def save_causal_lm(model: Any, tokenizer: Any, folder: Path) -> None:
    """An ordinary transformers folder: config, generation config, weights and the tokenizer. Weights in
    bfloat16 (every drafter's stored dtype: loading casts it to the run's dtype), the config naming it;
    the model in memory keeps its float32 weights."""
    named = getattr(model.config, "dtype", None) or getattr(model.config, "torch_dtype", None)
    dtype = DRAFTER_DTYPE
    state, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:  # a tied copy (the LM head of tied embeddings): stored once
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    try:
        model.save_pretrained(folder, state_dict=state)  # it names the in-memory float32 in config.json
        model.config.dtype = dtype
        model.config.save_pretrained(folder)  # so the config is written again with the weights' dtype
    finally:
        model.config.dtype = named
    tokenizer.save_pretrained(folder)


def _init_model(inputs: Inputs) -> Any:
    if inputs.init is None:
        raise UsageError(f"'{inputs.recipe.kind}' needs --init MODEL.")
    return inputs.init.to(device=inputs.device, dtype=torch.float32)


def _pard(inputs: Inputs) -> Job:
    r, target, device = inputs.recipe, inputs.target, inputs.device
    drafter = _init_model(inputs)
    mask_id = pard.add_mask_token(drafter, r.parallel)
    gens = generators("pard", r.seed)
    parallel_recipe = pard.PardRecipe(parallel=r.parallel, retain=r.retain, target_autocast=r.target_autocast)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(inputs.stream, r.batch_size, r.context, gens["data"])[:, :-1].to(device)
        return pard.pard_loss(drafter, target, window, parallel_recipe, mask_id, gens["layouts"])

    def evaluate(windows: torch.Tensor) -> list[float]:
        drafter.eval()
        return pard.evaluate(drafter, target, windows, r.parallel, mask_id)["agreement_by_offset"]

    return Job(
        "pard",
        drafter,
        step_loss,
        gens,
        r.batch_size * r.context,
        evaluate,
        lambda folder: save_causal_lm(drafter, inputs.init_tokenizer, folder),
        {"mask_token_id": mask_id, **_model_facts(drafter)},
    )


def _draft(inputs: Inputs) -> Job:
    r, target, device = inputs.recipe, inputs.target, inputs.device
    drafter = _init_model(inputs)
    gens = generators("draft", r.seed)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(inputs.stream, r.batch_size, r.context, gens["data"]).to(device)
        return draft_loss(drafter, target, window, target_autocast=r.target_autocast)

    @torch.no_grad()
    def evaluate(windows: torch.Tensor) -> list[float]:
        drafter.eval()
        return draft_loss(drafter, target, windows.to(device), target_autocast=r.target_autocast)[1]["agree"]

    return Job(
        "draft",
        drafter,
        step_loss,
        gens,
        r.batch_size * r.context,
        evaluate,
        lambda folder: save_causal_lm(drafter, inputs.init_tokenizer, folder),
        _model_facts(drafter),
    )


def _model_facts(model: Any) -> dict[str, Any]:
    c = model.config
    return {
        "model_type": c.model_type,
        "hidden_size": getattr(c, "hidden_size", None),
        "num_hidden_layers": getattr(c, "num_hidden_layers", None),
        "vocab_size": getattr(c, "vocab_size", None),
    }
