"""What one `specli train` run is: the kind, its sources and every knob (`TrainRecipe`, written into
training.json and the checkpoint), each kind's defaults, and the checks on values. Torch-free: the
CLI parses with it before anything heavy is imported.

A resumed run takes its recipe from the checkpoint; `resume_conflicts` names what the command line
changed that would make it another run (everything but the length, the schedule of checkpoints and
the measurement at the end).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from specli.errors import UsageError

KINDS = ("eagle3", "eagle1", "peagle", "pard", "draft", "heads")
HEAD_KINDS = ("eagle3", "eagle1", "peagle")  # read the target's hidden states
INIT_KINDS = ("pard", "draft")  # start from --init MODEL (a small model with the target's tokenizer)
PARALLEL_KINDS = ("peagle", "pard")  # draft k tokens in one forward
# heads: blockwise heads (K residual blocks into the target's LM head, K = --parallel) on its last hidden
# state; they draft K tokens from the verify forward's states, with no forward of their own


@dataclass(frozen=True)
class TrainRecipe:
    """Every knob of a run. Sources as the user named them; sizes in tokens; lr the peak of a 5% warm-up
    then cosine decay to 10% (specli.training.common.lr_at)."""

    kind: str
    target: str
    data: str
    init: str | None = None  # pard, draft: the model to start from; eagle kinds, heads: heads to start from
    regenerate: bool = False  # the target answers the data's prompts first (self-distillation)
    regenerate_tokens: int = 256  # longest response it writes
    steps: int = 2000
    batch_size: int = 8
    context: int = 512
    lr: float = 5e-4
    seed: int = 0
    draft_vocab: int = 32000  # eagle3, peagle: the head's LM head rows (the most frequent tokens); heads:
    # the tokens they draft over (chosen when saved; 0: all)
    ttt_steps: int = 3  # eagle3: training-time test unroll depth (eagle1: 1, noise instead)
    layers: int = 1  # eagle3, peagle: the head's decoder layers
    intermediate: int | None = None  # the head's MLP width (None: the target's)
    aux_layers: list[int] | None = None  # eagle3, peagle: target hidden states read (None: EAGLE-3's)
    parallel: int = 8  # peagle, pard: drafts per forward it learns (K); heads: the number of heads
    retain: float = 0.7  # peagle, pard: P(keep depth j | kept depth j-1) in the packed layout
    sequential: bool = False  # heads: each head also reads the token before its own (Hydra's form)
    step_decay: float = 0.8  # eagle kinds: weight of unroll step j is step_decay**j (heads: head j+1)
    regression_weight: float = 1.0  # eagle1: smooth-L1 on the next feature
    token_weight: float = 0.1  # eagle1: distillation through the target's LM head
    feature_noise: float = 0.05  # eagle1: relative Gaussian noise on the input features
    dtype: str | None = None  # the target's (None: bfloat16 on a GPU, float32 on CPU)
    quant: str | None = None  # the target's quantization
    target_autocast: bool = False  # False: features in the target's own dtype (True: bfloat16 autocast)
    eval_windows: int = 16  # validation windows of the data for the agreement by depth
    log_every: int = 10  # training.json keeps every log_every-th step's record

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainRecipe:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# The defaults of each kind (over the dataclass's): heads train from scratch at a higher rate than a
# pretrained small model is fine-tuned at.
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "eagle3": {},
    "eagle1": {"ttt_steps": 1},
    "peagle": {"lr": 5e-4},
    "pard": {"lr": 1e-4},
    "draft": {"lr": 1e-4},
    "heads": {"lr": 1e-3, "parallel": 4, "draft_vocab": 8192},  # Medusa-1's rate; 4 heads (its paper's 4-5)
}

# --quick: a few steps of a small batch, for tests and a first look (explicit options still win).
QUICK: dict[str, Any] = {
    "steps": 4,
    "batch_size": 2,
    "context": 48,
    "draft_vocab": 256,
    "parallel": 4,
    "eval_windows": 2,
    "log_every": 1,
    "regenerate_tokens": 24,
}

# Changing these on --resume would make another run; the rest (steps, when to checkpoint, the
# measurement at the end, threads) may change.
RESUMABLE = ("steps", "log_every")
# ... and per kind: heads choose their draft vocabulary only when they are saved
RESUMABLE_BY_KIND = {"heads": ("draft_vocab",)}


def _resumable(saved: TrainRecipe) -> tuple[str, ...]:
    return RESUMABLE + RESUMABLE_BY_KIND.get(saved.kind, ())


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UsageError(f"unknown kind '{kind}'.", f"Use one of: {', '.join(KINDS)}.")
    return kind


def require_sources(target: str | None, data: str | None) -> None:
    """A new run names its target and its data: UsageError naming what is missing."""
    missing = [
        what
        for what, value in (
            ("--target MODEL (the model to train a drafter for)", target),
            ("--data SOURCE (the text to train on)", data),
        )
        if not value
    ]
    if missing:
        raise UsageError(f"specli train needs {' and '.join(missing)}.")


def build_recipe(kind: str, target: str, data: str, quick: bool = False, **given: Any) -> TrainRecipe:
    """The kind's defaults (and --quick's), with the values given (None = not given) on top; checked."""
    values: dict[str, Any] = dict(KIND_DEFAULTS[check_kind(kind)])
    if quick:
        values.update(QUICK)
    values.update({k: v for k, v in given.items() if v is not None})
    recipe = TrainRecipe(kind=kind, target=target, data=data, **values)
    check_recipe(recipe)
    return recipe


def check_recipe(recipe: TrainRecipe) -> None:
    """UsageError for values no run can use (one line naming the option)."""
    positive = (
        "steps", "batch_size", "context", "draft_vocab", "ttt_steps", "layers", "intermediate",
        "regenerate_tokens",
    )  # fmt: skip
    for name in positive:
        value = getattr(recipe, name)
        if value is not None and value < 1:  # None: the default (intermediate: the target's width)
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {value}.")
    if recipe.lr <= 0:
        raise UsageError(f"--lr must be above 0, not {recipe.lr}.")
    if recipe.kind == "heads" and recipe.parallel < 1:
        raise UsageError(f"--parallel must be at least 1 (the number of heads), not {recipe.parallel}.")
    if recipe.sequential and recipe.kind != "heads":
        raise UsageError(f"--sequential is for heads; {recipe.kind} drafters read their tokens already.")
    if recipe.kind != "heads" and recipe.parallel < 2:
        raise UsageError(f"--parallel must be at least 2 (drafts per forward), not {recipe.parallel}.")
    if recipe.context < 8:
        raise UsageError(f"--context must be at least 8 tokens, not {recipe.context}.")
    if recipe.aux_layers is not None and recipe.kind not in ("eagle3", "peagle"):
        raise UsageError(
            f"--aux-layers is for eagle3 and peagle heads; {recipe.kind} reads "
            + ("the target's final hidden state." if recipe.kind == "eagle1" else "no target features.")
        )
    if recipe.aux_layers is not None and recipe.init:
        raise UsageError("--aux-layers shapes a new head; the --init head reads its own: drop one.")
    if recipe.kind == "eagle1" and recipe.layers != 1:
        raise UsageError("an EAGLE-1 head has one decoder layer: drop --layers, or train eagle3.")
    if recipe.kind in INIT_KINDS and not recipe.init:
        raise UsageError(
            f"'{recipe.kind}' starts from a small model: pass --init MODEL (a folder, hub id or "
            "embedded:NAME with the target's tokenizer)."
        )


def parse_aux_layers(text: str) -> list[int]:
    """'2,4,7' -> [2, 4, 7]; UsageError otherwise."""
    try:
        return [int(part) for part in text.replace(" ", "").split(",")]
    except ValueError:
        raise UsageError(
            f"--aux-layers {text!r}: give target hidden-state indices separated by commas, e.g. 2,4,7."
        ) from None


def resume_conflicts(saved: TrainRecipe, asked: dict[str, Any]) -> list[str]:
    """'--name A (checkpoint: B)' for each value given on the command line that differs from the
    checkpoint's recipe, except those a resumed run may change."""
    out = []
    for name, value in asked.items():
        if value is None or name in _resumable(saved):
            continue
        if getattr(saved, name) != value:
            out.append(f"--{name.replace('_', '-')} {value} (checkpoint: {getattr(saved, name)})")
    return out


def resumed(saved: TrainRecipe, asked: dict[str, Any]) -> TrainRecipe:
    """The checkpoint's recipe with the values a resumed run may change."""
    changes = {k: v for k, v in asked.items() if k in _resumable(saved) and v is not None}
    return replace(saved, **changes)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([hms]?)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}


def parse_duration(text: str) -> float:
    """'2h', '90m', '1h30m', '45s', '3600' (seconds) -> seconds; UsageError otherwise."""
    s = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION.match(s, pos)
        if m is None or m.end() == pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if not s or pos != len(s) or total <= 0:
        raise UsageError(f"cannot read the duration '{text}'.", "Use e.g. 2h, 90m, 1h30m or 45s.")
    return total
