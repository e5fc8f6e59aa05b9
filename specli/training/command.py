"""`specli train KIND`: a drafter for the user's own target, in four stages.

1. checks, on configs and tokenizers only: the kind, the output folder, the recipe (or the checkpoint's,
   on --resume), the target (a head kind needs a target whose hidden states it can read), --init (its
   tokenizer must be the target's), the data (it must hold text), and the memory plan. A bad input
   stops here with one line and nothing written.
2. loading: the target through `specli.load` (the path generate uses: quantized targets too), the
   answers of --regenerate (cached), the token stream, the job of the kind (specli.training.jobs).
3. training: specli.training.loop, with a checkpoint every N steps, at --time-limit and at Ctrl-C.
4. the result: the drafter written in DIR as users load it, its agreement on the data's validation
   split, and (when the run finished) the measurement through the engine (specli.training.measure);
   everything into DIR/training.json.
"""

from __future__ import annotations

import hashlib
import os
import platform
import random
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from specli.errors import UsageError
from specli.models import head_formats, loading, memory
from specli.models.layer_stack import LAYER_STACK_ARCHITECTURES
from specli.models.paths import specli_cache_dir
from specli.strategies import Strategy
from specli.threads import AUTO
from specli.training import checkpoint, data, jobs, outdir, regenerate
from specli.training import plan as training_plan
from specli.training.common import fixed_windows, make_optimizer
from specli.training.eagle import head_config_for
from specli.training.loop import DONE, Limits, LoopState, run_steps
from specli.training.progress import TrainProgress, tokens_count
from specli.training.recipe import (
    HEAD_KINDS,
    INIT_KINDS,
    TrainRecipe,
    build_recipe,
    require_sources,
    resume_conflicts,
    resumed,
)
from specli.wording import count as plural

EAGLE_TARGETS = LAYER_STACK_ARCHITECTURES  # Llama-family: hidden_states[i] enters layer i, the last is normed
REPORT = outdir.REPORT
EVAL_SETS = ("code", "chat")


@dataclass(frozen=True)
class Session:
    """How this invocation runs, beside the recipe: the output folder, resume/overwrite, the time limit
    (seconds) and checkpoint period (steps; None: 20 a run), where the target runs, and what to measure
    at the end (eval_prompts: a bundled set, a prompts file or 'auto': chat for a target with a chat
    template, else code; eval_count 0 skips the measurement). The checkpoint keeps the REMEMBERED
    options: a resumed run uses them unless given again."""

    out: Path
    resume: bool = False
    overwrite: bool = False
    time_limit: float | None = None
    checkpoint_every: int | None = None
    device: str = "auto"
    threads: int | str | None = AUTO
    allow_pickle: bool = False
    trust_remote_code: bool = False
    eval_prompts: str | None = None  # None: the checkpoint's on --resume, else SESSION_DEFAULTS
    eval_count: int | None = None
    eval_tokens: int | None = None
    num_draft_tokens: int | None = None
    compare_with: str | None = None
    command: str = ""
    clock: Callable[[], float] = time.monotonic  # the time source of --time-limit (tests pass a fake one)
    # The views of loading and of counted stages (regenerate, measure): the CLI passes
    # specli.render.progress's loading_progress and Counted; without them nothing is drawn (training
    # produces, it does not import views).
    loading_view: Callable[..., Any] | None = None
    counted_view: Callable[..., Any] | None = None


@contextmanager
def _no_loading_view(console: Console, message: str) -> Iterator[None]:
    """loading_progress's stand-in when no view was given: draws nothing, offers no download bars."""
    yield None


class _NoCountedView:
    """Counted's stand-in when no view was given: stages and steps are counted by nobody."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _NoCountedView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def stage(self, *args: Any, **kwargs: Any) -> None:
        pass

    def advance(self, *args: Any, **kwargs: Any) -> None:
        pass


REMEMBERED = (
    "eval_prompts",
    "eval_count",
    "eval_tokens",
    "num_draft_tokens",
    "compare_with",
    "checkpoint_every",
)
SESSION_DEFAULTS: dict[str, Any] = {"eval_prompts": "auto", "eval_count": 8, "eval_tokens": 64}


def remembered(session: Session) -> dict[str, Any]:
    return {name: getattr(session, name) for name in REMEMBERED}


def with_defaults(session: Session, saved: dict[str, Any] | None) -> Session:
    """Options not given: the checkpoint's (on --resume), else SESSION_DEFAULTS."""
    earlier = (saved or {}).get("session") or {}
    changes = {}
    for name in REMEMBERED:
        if getattr(session, name) is None:
            value = earlier.get(name)
            changes[name] = value if value is not None else SESSION_DEFAULTS.get(name)
    return replace(session, **changes)


@dataclass
class Checked:
    """What stage 1 found: the recipe, the target's folder, config and tokenizer, --init's folder (and
    tokenizer or head config), the data, the evaluation prompts, the device and dtype, and the
    checkpoint being resumed."""

    recipe: TrainRecipe
    target_folder: Path
    target_config: Any
    tokenizer: Any
    init_folder: Path | None
    init_tokenizer: Any
    init_head: head_formats.HeadConfig | None
    dataset: data.DataSet
    eval_prompts: list[Any]
    device: torch.device
    dtype: str
    saved: dict[str, Any] | None
    session: Session


# --------------------------------------------------------------------------- stage 1: checks


def check_out(session: Session) -> None:
    """--out as outdir.check_out judges it (empty or new; --resume: a checkpoint; --overwrite: a `specli
    train` output)."""
    outdir.check_out(session.out, session.resume, session.overwrite)


def _recipe(kind: str, given: dict[str, Any], quick: bool, saved: dict[str, Any] | None) -> TrainRecipe:
    if saved is None:
        target, source = given.pop("target", None), given.pop("data", None)
        require_sources(target, source)
        return build_recipe(kind, target, source, quick, **given)
    recipe = TrainRecipe.from_dict(saved["recipe"])
    if recipe.kind != kind:
        raise UsageError(f"the checkpoint is of a '{recipe.kind}' run, not '{kind}'.")
    conflicts = resume_conflicts(recipe, given)
    if conflicts:
        raise UsageError(
            f"--resume continues the checkpoint's run; these differ from it: {', '.join(conflicts)}.",
            "Drop them (or change --steps only), or start a new run in another folder.",
        )
    return resumed(recipe, given)


def _check_target_kind(kind: str, config: dict[str, Any], name: str) -> None:
    model_type = str(config.get("model_type", "?"))
    if kind in HEAD_KINDS and model_type not in EAGLE_TARGETS:
        raise UsageError(
            f"a '{kind}' head cannot read the hidden states of '{name}' ({model_type}): EAGLE heads are "
            f"trained for {', '.join(EAGLE_TARGETS)} targets.",
            "Train a draft or pard drafter for it instead.",
        )


def _check_init_head(kind: str, config: head_formats.HeadConfig, name: str) -> None:
    wanted = {
        "eagle1": ("eagle1",), "eagle3": ("eagle3",), "peagle": ("eagle3", "peagle"), "heads": ("heads",)
    }[kind]  # fmt: skip
    if config.label not in wanted:
        raise UsageError(
            f"--init '{name}' is an {config.label} head; '{kind}' starts from {' or '.join(wanted)}."
        )


def _eval_source(session: Session, tokenizer: Any) -> str:
    if session.eval_prompts != "auto":
        return session.eval_prompts
    return "chat" if getattr(tokenizer, "chat_template", None) else "code"


def _read_eval_prompts(source: str, count: int) -> list[Any]:
    from specli.bench.prompts import read_prompts, set_path

    if count <= 0:
        return []
    path = set_path(source) if source in EVAL_SETS and not Path(source).exists() else Path(source)
    return read_prompts(path)[:count]


def _same_source(a: str, b: str) -> bool:
    from specli.bench.prompts import set_path

    def where(s: str) -> Path:
        return set_path(s) if s in EVAL_SETS and not Path(s).exists() else Path(s).expanduser().resolve()

    return where(a) == where(b)


def resolve_dtype(recipe: TrainRecipe, device: torch.device) -> str:
    """The target's dtype: as asked, else bfloat16 on a GPU (float16 without bf16), float32 on CPU."""
    if recipe.dtype is not None:
        return str(loading.resolve_dtype(recipe.dtype, device)).removeprefix("torch.")
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


@dataclass(frozen=True)
class Start:
    """Where a run starts: its recipe (the command line's, or the checkpoint's on --resume), the checkpoint
    resumed (None: a new run), the session with the remembered options filled in, and the device."""

    recipe: TrainRecipe
    saved: dict[str, Any] | None
    session: Session
    device: torch.device

    @property
    def steps_done(self) -> int:
        return int(self.saved["loop"]["step"]) if self.saved is not None else 0

    @property
    def nothing_left(self) -> bool:
        """A resumed run that has done every step of its (possibly extended) recipe."""
        return self.saved is not None and self.steps_done >= self.recipe.steps


def begin(kind: str, given: dict[str, Any], session: Session, quick: bool = False) -> Start:
    """Stage 1's first half: --out, the checkpoint (on --resume) and the recipe."""
    check_out(session)
    device = loading.resolve_device(session.device)
    saved = checkpoint.load(session.out) if session.resume else None
    session = with_defaults(session, saved)
    return Start(_recipe(kind, dict(given), quick, saved), saved, session, device)


def check(start: Start) -> Checked:
    """Stage 1: every check that needs no weights. UsageError (exit 2) for bad input, SpecliError when
    the run does not fit in memory; nothing is written."""
    recipe, saved, session, device = start.recipe, start.saved, start.session, start.device
    if recipe.quant is not None and recipe.quant not in loading.QUANT_MODES:
        raise UsageError(f"unknown quantization '{recipe.quant}'.", "Use one of: none, 8bit, 4bit.")
    dtype = resolve_dtype(recipe, device)
    folder = loading.resolve_source(
        recipe.target,
        allow_pickle=session.allow_pickle,
        trust_remote_code=session.trust_remote_code,
        weights=False,
    )
    head_formats.refuse_head_as_model(folder, recipe.target, "target")
    config = loading.read_config(folder) or {}
    _check_target_kind(recipe.kind, config, recipe.target)
    limit = loading.config_max_positions(config)
    if limit is not None and recipe.context > limit:  # the target reads `context` tokens of a window
        raise UsageError(
            f"--context {recipe.context} is longer than '{recipe.target}' holds ({limit} tokens)."
        )
    tokenizer = loading.load_tokenizer(
        folder, trust_remote_code=session.trust_remote_code, name=recipe.target
    )
    init_folder, init_tokenizer, init_head = _check_init(recipe, folder, config, tokenizer, session)
    dataset = data.read_data(recipe.data)
    if recipe.regenerate and not dataset.prompts:
        what = "holds only text records" if dataset.kind == "jsonl" else f"is a {dataset.kind} of documents"
        raise UsageError(
            f"--regenerate needs prompts to answer; '{recipe.data}' {what}.",
            'Give JSONL with {"prompt": ...} or {"messages": [...]} records or a bundled prompt set '
            "(code, chat), or drop --regenerate.",
        )
    eval_source = _eval_source(session, tokenizer)
    prompts = _read_eval_prompts(eval_source, session.eval_count)
    if prompts and _same_source(eval_source, recipe.data):
        dataset = dataset.without([p.text for p in prompts])
        if not dataset.train:
            raise UsageError(
                f"'{recipe.data}' holds nothing to train on once the evaluation prompts are held out."
            )
    return Checked(
        recipe,
        folder,
        config,
        tokenizer,
        init_folder,
        init_tokenizer,
        init_head,
        dataset,
        prompts,
        device,
        dtype,
        saved,
        session,
    )


def _check_init(
    recipe: TrainRecipe, target_folder: Path, target_config: dict[str, Any], tokenizer: Any, session: Session
) -> tuple[Path | None, Any, head_formats.HeadConfig | None]:
    """--init: pard and draft need a model with the target's tokenizer; eagle kinds may start from a head
    of their kind (peagle: an EAGLE-3 head)."""
    if recipe.init is None:
        return None, None, None
    folder = loading.resolve_source(
        recipe.init,
        allow_pickle=session.allow_pickle,
        trust_remote_code=session.trust_remote_code,
        weights=False,
    )
    if recipe.kind in INIT_KINDS:
        head_formats.refuse_head_as_model(folder, recipe.init)
        init_tokenizer = loading.load_tokenizer(
            folder, trust_remote_code=session.trust_remote_code, name=recipe.init
        )
        loading.check_tokenizers(tokenizer, init_tokenizer, recipe.target, recipe.init)
        return folder, init_tokenizer, None
    config = head_formats.read_head_config(folder, target_config, name=recipe.init)
    head_formats.check_head(config, target_config, recipe.init, recipe.target)
    _check_init_head(recipe.kind, config, recipe.init)
    return folder, None, config


def plan_memory(checked: Checked, console: Console) -> memory.TrainingNeed | None:
    """Stage 1's last check: target + trained model + optimizer state + activations against the device's
    free memory (SpecliError naming the largest batch that fits); prints the estimate when it fits."""
    r = checked.recipe
    dtype_bytes = memory.DTYPE_BYTES.get(checked.dtype, 2)
    quant = r.quant or "none"
    head = None
    if r.kind in HEAD_KINDS:
        head = checked.init_head
        if head is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(checked.target_folder)
            vocab = memory.Shape.from_config(checked.target_config).vocab_size
            kind = "eagle1" if r.kind == "eagle1" else "eagle3"
            head = head_config_for(config, vocab, kind, r.draft_vocab, r.intermediate, r.layers, r.aux_layers)
    drafter = loading.read_config(checked.init_folder) if checked.init_folder and head is None else None
    need = training_plan.training_need(r, checked.target_config, dtype_bytes, quant, head, drafter)
    if need is None:
        return None
    total = need.total_bytes(r.batch_size, r.context)
    available = memory.free_bytes(checked.device)
    if os.environ.get("SPECLI_NO_MEMORY_CHECK") != "1":
        memory.check_training_fits(need, r.batch_size, r.context, str(checked.device), available)
    console.print(
        f"memory: about {memory.human(total)} at batch {r.batch_size} x {r.context} tokens "
        f"({memory.human(available)} free on {checked.device})",
        markup=False,
        highlight=False,
    )
    return need


# --------------------------------------------------------------------------- stage 2: loading


def prepare_out(session: Session) -> None:
    """--overwrite empties the (already checked) folder; then it exists."""
    if session.overwrite and session.out.is_dir():
        for child in session.out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    session.out.mkdir(parents=True, exist_ok=True)


def load_target(checked: Checked, session: Session, console: Console) -> Any:
    """The target as `specli generate` loads it (strategy none), in the run's dtype and quantization."""
    from specli.api import load

    r = checked.recipe
    with (session.loading_view or _no_loading_view)(console, f"loading {r.target}…") as bars:
        return load(
            target=r.target,
            strategy=Strategy.NONE,
            device=session.device,
            dtype=checked.dtype,
            quant=r.quant,
            allow_pickle=session.allow_pickle,
            trust_remote_code=session.trust_remote_code,
            download_bars=bars,
            threads=session.threads,
        )


def token_ids(
    checked: Checked, pair: Any, console: Console, counted_view: Callable[..., Any] | None = None
) -> tuple[list[list[int]], list[list[int]], dict]:
    """(train documents, validation documents) as ids, with --regenerate's answers appended, and what
    the regeneration did (for training.json); counted_view draws the regeneration's progress."""
    r, tok, ds = checked.recipe, checked.tokenizer, checked.dataset
    if not r.regenerate:
        return data.encode_texts(tok, ds.train), data.encode_texts(tok, ds.validation), {}
    # Prompts and chats are answered; text records train as written (data.answerable).
    asked = [d for d in ds.train if data.answerable(d)]
    documents = asked + [d for d in ds.validation if data.answerable(d)]
    train_texts = data.encode_texts(tok, [d for d in ds.train if not data.answerable(d)])
    valid_texts = data.encode_texts(tok, [d for d in ds.validation if not data.answerable(d)])
    prompts = [data.prompt_ids(d, tok) for d in documents]
    keep = set(regenerate.fitting_prompts(prompts, pair.max_positions))
    prompts = [p for i, p in enumerate(prompts) if i in keep]
    key = regenerate.AnswerKey(
        regenerate.model_identity(checked.target_folder),
        checked.dtype,
        r.quant or "none",
        pair.target.device.type,
        r.regenerate_tokens,
    )
    cache = specli_cache_dir() / "regenerated" / key.file_name(prompts)
    respond = regenerate.greedy_responder(pair, r.regenerate_tokens)
    with (counted_view or _NoCountedView)(console, "regenerate", len(prompts), unit="prompt") as counted:
        counted.stage("the target answers the data's prompts (greedy)", len(prompts))
        answers, generated = regenerate.answer_all(prompts, respond, cache, counted.advance)
    ids = [p + a for p, a in zip(prompts, answers, strict=True)]
    kept = [i for i in range(len(documents)) if i in keep]
    train = [ids[j] for j, i in enumerate(kept) if i < len(asked)] + train_texts
    validation = [ids[j] for j, i in enumerate(kept) if i >= len(asked)] + valid_texts
    info = {
        "prompts": len(prompts),
        "skipped": len(documents) - len(prompts),
        "texts_as_written": len(train_texts) + len(valid_texts),
        "generated_now": generated,
        "from_cache": len(prompts) - generated,
        "max_new_tokens": r.regenerate_tokens,
        "cache": str(cache),
    }
    return train, validation, info


def fingerprint(stream: torch.Tensor) -> str:
    return hashlib.sha256(stream.numpy().tobytes()).hexdigest()[:16]


# --------------------------------------------------------------------------- the run


def train(kind: str, given: dict[str, Any], session: Session, console: Console, quick: bool = False) -> dict:
    """The whole command; returns the report also written to DIR/training.json. report['stopped'] is
    'done', 'time limit' or 'interrupted'."""
    deadline = session.clock() + session.time_limit if session.time_limit else None
    start = begin(kind, given, session, quick)
    earlier = outdir.read_report(session.out) if start.nothing_left else None
    if start.nothing_left and not _unmeasured(earlier, start.session):
        return _nothing_left(start, earlier, console)
    checked = check(start)
    r, session = checked.recipe, checked.session
    eos = checked.tokenizer.eos_token_id
    if eos is None:
        raise UsageError(f"the tokenizer of '{r.target}' has no EOS token to separate documents with.")
    if not r.regenerate:  # the data's length is known before any weights load
        train_docs, valid_docs, regen = token_ids(checked, None, console, session.counted_view)
        _check_length(data.token_stream(train_docs, eos), r)
    plan_memory(checked, console)
    prepare_out(session)
    pair = load_target(checked, session, console)
    if r.regenerate:
        train_docs, valid_docs, regen = token_ids(checked, pair, console, session.counted_view)
    stream = data.token_stream(train_docs, eos)
    _check_length(stream, r)
    valid_stream = data.token_stream(valid_docs, eos) if valid_docs else None
    print_ = _printer(console)
    print_(
        f"data: {plural(len(train_docs), 'document')}, {tokens_count(stream.numel())}"
        + (f"; validation {tokens_count(valid_stream.numel())}" if valid_stream is not None else "")
    )
    stamp = fingerprint(stream)
    if checked.saved is not None and checked.saved["fingerprint"] != stamp:
        raise UsageError(
            f"the data differs from the checkpoint's (its tokens hash to {stamp}, the checkpoint's to "
            f"{checked.saved['fingerprint']}): a resumed run must see the same data in the same order."
        )

    torch.manual_seed(r.seed)
    random.seed(r.seed)
    job = jobs.build_job(
        jobs.Inputs(
            pair.target_model,
            checked.tokenizer,
            r,
            stream,
            pair.target.device,
            r.target,
            _load_init(checked, pair, session),
            checked.init_tokenizer,
        )
    )
    optimizer = make_optimizer(job.model, r.lr)
    state = LoopState()
    if checked.saved is not None:
        job.model.load_state_dict(checked.saved["model"])
        optimizer.load_state_dict(checked.saved["optimizer"])
        state = LoopState.from_dict(checked.saved["loop"])
        checkpoint.restore_random_states(checked.saved["rng"], job.generators)
        if state.step < r.steps:
            print_(f"resuming at step {state.step}/{r.steps} ({tokens_count(state.tokens)} seen)")
        else:
            print_(
                f"every step is done ({state.step}/{r.steps}); measuring the drafter (the last session "
                "stopped before its measurement)"
            )
        planned = checked.saved["recipe"]["steps"]
        if planned != r.steps:
            print_(
                f"note: --steps {r.steps} changes the schedule the run started with "
                f"({plural(planned, 'step')}): the learning rate follows the new length from here, unlike "
                "one run of that length."
            )
    print_(
        f"{r.kind}: {job.parameters / 1e6:.2f} M trained parameters, {plural(r.steps, 'step')} of "
        f"{r.batch_size} x {r.context} tokens"
    )

    def save_checkpoint(at: LoopState) -> None:
        checkpoint.save(
            session.out,
            {
                "kind": r.kind,
                "recipe": r.to_dict(),
                "fingerprint": stamp,
                "model": job.model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "loop": at.to_dict(),
                "rng": checkpoint.random_states(job.generators),
                "session": remembered(session),
            },
        )

    every = session.checkpoint_every if session.checkpoint_every is not None else max(1, r.steps // 20)
    limits = Limits(r.steps, every, deadline, r.log_every, validate_every=every)
    periodic = (
        fixed_windows(valid_stream, min(8, r.eval_windows), r.context)
        if valid_stream is not None and valid_stream.numel() >= r.context + 2
        else None
    )
    with TrainProgress(console, r.kind, r.steps, state.step, deadline, session.clock) as progress:
        stopped = run_steps(
            job.model,
            optimizer,
            job.step_loss,
            state,
            limits,
            r.lr,
            job.tokens_per_step,
            save_checkpoint,
            progress,
            session.clock,
            validate=(lambda: job.evaluate(periodic)) if periodic is not None else None,
        )
    save_checkpoint(state)
    job.model.eval()
    job.save(session.out)
    report = _report(checked, session, job, state, stopped, stamp, stream, valid_stream, regen)
    report["checkpoint_every"] = every
    if stopped == DONE:
        report["validation"] = _validate(job, valid_stream, r)
        del job, optimizer
        write_report(session.out, report)  # the measurement may be interrupted: the rest is written
        report["measurement"] = _measure(pair, checked, session, console)
    else:
        print_(
            f"stopped at step {state.step}/{r.steps} ({stopped}); the drafter so far is in {session.out}. "
            f"Continue with: specli train {r.kind} --out {session.out} --resume"
        )
    write_report(session.out, report)
    return report


def _unmeasured(report: dict[str, Any] | None, session: Session) -> bool:
    """A finished run whose measurement is asked for but missing (stopped during it), or without
    training.json: resuming it measures (and writes) again."""
    if report is None:
        return True
    return report.get("measurement") is None and bool(session.eval_count)


def _nothing_left(start: Start, report: dict[str, Any], console: Console) -> dict[str, Any]:
    """A resumed run with no step left: say so and how --steps extends it; its training.json, untouched."""
    r, out, done = start.recipe, start.session.out, start.steps_done
    planned = start.saved["recipe"]["steps"] if start.saved is not None else r.steps
    if r.steps < planned:
        said = f"--steps {r.steps} leaves nothing to train: the run in {out} is at step {done}."
    else:
        said = f"nothing is left to train: the run in {out} is at step {done} of {r.steps}."
    again = shlex.join(["specli", "train", r.kind, "--out", str(out), "--resume", "--steps", str(2 * done)])
    console.print(said, markup=False, highlight=False)
    console.print(
        f"To train it longer, give --steps N above {done}, e.g.: {again}", markup=False, highlight=False
    )
    return report


def result_lines(report: dict[str, Any], out: Path) -> list[str]:
    """What a finished run prints on stdout: the folder it wrote, its validation agreement, the
    measurement through the engine (one line per drafter), and how to generate with it. An output that
    differs from plain decoding is the caller's error line (stderr), not part of the result."""
    kind = report.get("kind", "")
    lines = [f"{kind} drafter written to {out} (the recipe, history and measurement: {out / REPORT})"]
    agreement = (report.get("validation") or {}).get("agreement_by_depth")
    if agreement:
        lines.append("validation agreement by depth: " + " ".join(f"{a:.2f}" for a in agreement))
    if report.get("measurement"):
        from specli.training import measure

        lines += [
            line for line in measure.summary_lines(report["measurement"]) if not line.startswith("error:")
        ]
    target = (report.get("target") or {}).get("name")
    if target:
        strategy = (
            Strategy.EAGLE if kind in HEAD_KINDS else Strategy.HEADS if kind == "heads" else Strategy.DRAFT
        )
        use = ["specli", "generate", "PROMPT", "--target", target, "--strategy", strategy]
        lines.append(f"use it: {shlex.join([*use, '--draft', str(out)])}")
    return lines


def _printer(console: Console):
    return lambda text: console.print(text, markup=False, highlight=False)


def _check_length(stream: torch.Tensor, recipe: TrainRecipe) -> None:
    if stream.numel() < recipe.context + 2:
        raise UsageError(
            f"'{recipe.data}' holds {plural(stream.numel(), 'token')}, too few for one window of --context "
            f"{recipe.context}: give more text or a shorter --context."
        )


def _load_init(checked: Checked, pair: Any, session: Session) -> Any:
    """--init's weights, float32 on the target's device (a head beside its LM head)."""
    if checked.init_folder is None:
        return None
    device = pair.target.device
    folder = loading.resolve_source(checked.recipe.init, allow_pickle=session.allow_pickle, weights=True)
    if checked.init_head is not None:
        return head_formats.load_head(
            folder,
            pair.target_model.config,
            allow_pickle=session.allow_pickle,
            dtype=torch.float32,
            device=device,
        )
    return loading.load_model(
        folder,
        device=device,
        dtype=torch.float32,
        allow_pickle=session.allow_pickle,
        trust_remote_code=session.trust_remote_code,
        name=checked.recipe.init,
    )


def _validate(job: jobs.Job, valid_stream: torch.Tensor | None, recipe: TrainRecipe) -> dict[str, Any]:
    """Agreement with the target by draft depth on windows of the data's validation split."""
    if valid_stream is None or valid_stream.numel() < recipe.context + 2:
        return {"windows": 0, "agreement_by_depth": None}
    windows = fixed_windows(valid_stream, recipe.eval_windows, recipe.context)
    return {"windows": int(windows.shape[0]), "agreement_by_depth": job.evaluate(windows)}


def _measure(pair: Any, checked: Checked, session: Session, console: Console) -> dict[str, Any] | None:
    """The written drafter (and --compare-with) through the engine on the held-out prompts."""
    from specli.training import measure

    prompts = checked.eval_prompts
    if not prompts:
        return None
    drafters = [measure.drafter("trained", pair, str(session.out))]
    if session.compare_with:
        drafters.append(measure.drafter("compare", pair, session.compare_with, session.allow_pickle))
    runs = (len(prompts) + 1) * (len(drafters) + 1)
    with (session.counted_view or _NoCountedView)(console, "measure", runs) as counted:
        counted.stage(f"{plural(len(prompts), 'held-out prompt')}, greedy, plain and drafted", runs)
        report = measure.run_measurement(
            pair, drafters, prompts, session.eval_tokens, session.num_draft_tokens, counted.advance
        )
    return report


def _report(
    checked: Checked,
    session: Session,
    job: jobs.Job,
    state: LoopState,
    stopped: str,
    stamp: str,
    stream: torch.Tensor,
    valid_stream: torch.Tensor | None,
    regen: dict[str, Any],
) -> dict[str, Any]:
    import transformers

    r = checked.recipe
    return {
        "kind": r.kind,
        "command": session.command,
        "recipe": r.to_dict(),
        "finished": stopped == DONE,
        "stopped": stopped,
        "target": {
            "name": r.target,
            "dtype": checked.dtype,
            "quant": r.quant or "none",
            "device": str(checked.device),
        },
        "data": {
            "source": r.data,
            "kind": checked.dataset.kind,
            "documents": len(checked.dataset.train),
            "validation_documents": len(checked.dataset.validation),
            "train_tokens": int(stream.numel()),
            "validation_tokens": int(valid_stream.numel()) if valid_stream is not None else 0,
            "fingerprint": stamp,
            "held_out_prompts": len(checked.eval_prompts),
            "regenerated": regen or None,
        },
        "config": job.config,
        "parameters": job.parameters,
        "steps_done": state.step,
        "tokens_seen": state.tokens,
        "seconds": round(state.seconds, 1),
        "checkpoint_every": None,
        "time_limit_s": session.time_limit,
        "history": state.history,
        "validation": None,
        "measurement": None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def write_report(out: Path, report: dict[str, Any]) -> None:
    outdir.write_report(out, report)
