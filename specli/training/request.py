"""What `specli train KIND` was asked, as typed values (`TrainRequest`): the recipe's knobs as given (None:
the kind's default, or the checkpoint's on --resume) and how this run goes (the output folder, resume or
overwrite, the time limit, where the target runs, the measurement at the end). Torch-free: the command
checks a request before the training modules load (specli.training.command takes 5-9 s to import), and
builds the run's `Session` from it only then."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specli.threads import AUTO

if TYPE_CHECKING:
    from specli.training.command import Session


@dataclass(frozen=True)
class TrainRequest:
    """The options of one `specli train` as given: `aux_layers` as its text ('2,4,7'), `time_limit` as
    its text ('1h30m'), `threads` as given ('auto', a count); None leaves a value to the recipe, the
    checkpoint or the session's defaults."""

    out: Path
    target: str | None = None
    data: str | None = None
    init: str | None = None
    regenerate: bool = False
    regenerate_tokens: int | None = None
    steps: int | None = None
    batch_size: int | None = None
    context: int | None = None
    lr: float | None = None
    draft_vocab: int | None = None
    ttt_steps: int | None = None
    layers: int | None = None
    aux_layers: str | None = None
    intermediate: int | None = None
    parallel: int | None = None
    sequential: bool = False
    seed: int | None = None
    time_limit: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    overwrite: bool = False
    quick: bool = False
    eval_prompts: str | None = None
    eval_count: int | None = None
    eval_tokens: int | None = None
    num_draft_tokens: int | None = None
    compare_with: str | None = None
    device: str = "auto"
    dtype: str | None = None
    quant: str | None = None
    threads: int | str | None = AUTO
    allow_pickle: bool = False
    trust_remote_code: bool = False

    def recipe_values(self) -> dict[str, Any]:
        """The recipe's knobs as given, by TrainRecipe field (None: not given; `regenerate` None unless
        asked for), --aux-layers parsed (a UsageError for a bad list)."""
        from specli.training.recipe import parse_aux_layers

        return {
            "target": self.target, "data": self.data, "init": self.init,
            "regenerate": self.regenerate or None, "regenerate_tokens": self.regenerate_tokens,
            "steps": self.steps, "batch_size": self.batch_size, "context": self.context, "lr": self.lr,
            "draft_vocab": self.draft_vocab,
            "ttt_steps": self.ttt_steps, "layers": self.layers, "intermediate": self.intermediate,
            "parallel": self.parallel, "sequential": self.sequential or None, "seed": self.seed,
            "aux_layers": parse_aux_layers(self.aux_layers) if self.aux_layers is not None else None,
            "dtype": self.dtype, "quant": self.quant,
        }  # fmt: skip

    def session(
        self, out: Path, time_limit: float | None, threads: int | str | None, command: str, **views: Any
    ) -> Session:
        """The run's Session: the output folder `out` (expanded), the time limit in seconds, the thread
        count as parsed, the command line for training.json, and the views the command draws with
        (`loading_view`, `counted_view`). Imports torch: build it once every check has passed."""
        from specli.training.command import Session

        return Session(
            out=out, resume=self.resume, overwrite=self.overwrite, time_limit=time_limit,
            checkpoint_every=self.checkpoint_every, device=self.device, threads=threads,
            allow_pickle=self.allow_pickle, trust_remote_code=self.trust_remote_code,
            eval_prompts=self.eval_prompts, eval_count=self.eval_count, eval_tokens=self.eval_tokens,
            num_draft_tokens=self.num_draft_tokens, compare_with=self.compare_with, command=command,
            **views,
        )  # fmt: skip
