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
import json
import os
import platform
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from specli import head_formats, loading, memory
from specli.errors import UsageError
from specli.layer_stack import LAYER_STACK_ARCHITECTURES
from specli.render.progress import Counted, loading_progress
from specli.threads import AUTO
from specli.training import checkpoint, data, jobs, regenerate
from specli.training import plan as training_plan
from specli.training.eagle import head_config_for
from specli.training.loop import DONE, Limits, LoopState, run_steps
from specli.training.progress import TrainProgress, tokens_words
from specli.training.recipe import (
    HEAD_KINDS,
    INIT_KINDS,
    TrainRecipe,
    build_recipe,
    resume_conflicts,
    resumed,
)
from specli.training.tiny import fixed_windows, make_optimizer

EAGLE_TARGETS = LAYER_STACK_ARCHITECTURES  # Llama-family: hidden_states[i] enters layer i, the last is normed
REPORT = "training.json"
OWN_OUTPUT = (REPORT, checkpoint.FOLDER)  # a folder holding one of these is a `specli train` output
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
    """An empty or new folder; a non-empty one only with --resume (it must hold a checkpoint) or
    --overwrite (it must be a `specli train` output)."""
    out = session.out
    if session.resume and session.overwrite:
        raise UsageError("--resume and --overwrite contradict each other: pick one.")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out '{out}' is a file, not a folder.")
    busy = out.is_dir() and any(out.iterdir())
    if session.resume:
        if not checkpoint.exists(out):
            raise UsageError(f"nothing to resume in '{out}': it holds no checkpoint ({checkpoint.FOLDER}/).")
        return
    if not busy:
        return
    if not session.overwrite:
        raise UsageError(
            f"--out '{out}' is not empty.",
            "Pass --resume to continue its run, --overwrite to replace it, or name an empty folder.",
        )
    if not any((out / name).exists() for name in OWN_OUTPUT):
        raise UsageError(
            f"--out '{out}' is not empty and holds no `specli train` output: --overwrite will not empty it.",
            "Name an empty folder.",
        )


def _recipe(kind: str, given: dict[str, Any], quick: bool, saved: dict[str, Any] | None) -> TrainRecipe:
    if saved is None:
        target, source = given.pop("target", None), given.pop("data", None)
        if not target or not source:
            raise UsageError(f"specli train needs --target and --data{'' if target else ' (and --target)'}.")
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
    wanted = {"eagle1": ("eagle1",), "eagle3": ("eagle3",), "peagle": ("eagle3", "peagle")}[kind]
    if config.label not in wanted:
        raise UsageError(
            f"--init '{name}' is an {config.label} head; '{kind}' starts from {' or '.join(wanted)}."
        )


def _eval_source(session: Session, tokenizer: Any) -> str:
    if session.eval_prompts != "auto":
        return session.eval_prompts
    return "chat" if getattr(tokenizer, "chat_template", None) else "code"


def _read_eval_prompts(source: str, count: int) -> list[Any]:
    from specli.bench import read_prompts, set_path

    if count <= 0:
        return []
    path = set_path(source) if source in EVAL_SETS and not Path(source).exists() else Path(source)
    return read_prompts(path)[:count]


def _same_source(a: str, b: str) -> bool:
    from specli.bench import set_path

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


def check(kind: str, given: dict[str, Any], session: Session, quick: bool = False) -> Checked:
    """Stage 1: every check that needs no weights. UsageError (exit 2) for bad input, SpecliError when
    the run does not fit in memory; nothing is written."""
    check_out(session)
    device = loading.resolve_device(session.device)
    saved = checkpoint.load(session.out) if session.resume else None
    session = with_defaults(session, saved)
    recipe = _recipe(kind, dict(given), quick, saved)
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
        raise UsageError(
            f"--regenerate needs prompts to answer; '{recipe.data}' is a {dataset.kind} of documents.",
            "Give a JSONL file or a bundled prompt set (code, chat), or drop --regenerate.",
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
    import specli

    r = checked.recipe
    with loading_progress(console, f"loading {r.target}…") as bars:
        return specli.load(
            target=r.target,
            strategy="none",
            device=session.device,
            dtype=checked.dtype,
            quant=r.quant,
            allow_pickle=session.allow_pickle,
            trust_remote_code=session.trust_remote_code,
            download_bars=bars,
            threads=session.threads,
        )


def token_ids(checked: Checked, pair: Any, console: Console) -> tuple[list[list[int]], list[list[int]], dict]:
    """(train documents, validation documents) as ids, with --regenerate's answers appended, and what
    the regeneration did (for training.json)."""
    r, tok, ds = checked.recipe, checked.tokenizer, checked.dataset
    if not r.regenerate:
        return data.encode_texts(tok, ds.train), data.encode_texts(tok, ds.validation), {}
    documents = ds.train + ds.validation
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
    cache = regenerate.cache_root() / "regenerated" / key.file_name(prompts)
    respond = regenerate.greedy_responder(pair, r.regenerate_tokens)
    with Counted(console, "regenerate", len(prompts), unit="prompt") as counted:
        counted.stage("the target answers the data's prompts (greedy)", len(prompts))
        answers, generated = regenerate.answer_all(prompts, respond, cache, counted.advance)
    ids = [p + a for p, a in zip(prompts, answers, strict=True)]
    kept = [i for i in range(len(documents)) if i in keep]
    train = [ids[j] for j, i in enumerate(kept) if i < len(ds.train)]
    validation = [ids[j] for j, i in enumerate(kept) if i >= len(ds.train)]
    info = {
        "prompts": len(prompts),
        "skipped": len(documents) - len(prompts),
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
    checked = check(kind, given, session, quick)
    r, session = checked.recipe, checked.session
    eos = checked.tokenizer.eos_token_id
    if eos is None:
        raise UsageError(f"the tokenizer of '{r.target}' has no EOS token to separate documents with.")
    if not r.regenerate:  # the data's length is known before any weights load
        train_docs, valid_docs, regen = token_ids(checked, None, console)
        _check_length(data.token_stream(train_docs, eos), r)
    plan_memory(checked, console)
    prepare_out(session)
    pair = load_target(checked, session, console)
    if r.regenerate:
        train_docs, valid_docs, regen = token_ids(checked, pair, console)
    stream = data.token_stream(train_docs, eos)
    _check_length(stream, r)
    valid_stream = data.token_stream(valid_docs, eos) if valid_docs else None
    print_ = _printer(console)
    print_(
        f"data: {len(train_docs)} documents, {tokens_words(stream.numel())} tokens"
        + (f"; validation {tokens_words(valid_stream.numel())} tokens" if valid_stream is not None else "")
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
        print_(f"resuming at step {state.step}/{r.steps} ({tokens_words(state.tokens)} tokens seen)")
        planned = checked.saved["recipe"]["steps"]
        if planned != r.steps:
            print_(
                f"note: --steps {r.steps} changes the schedule the run started with ({planned} steps): the "
                "learning rate follows the new length from here, unlike one run of that length."
            )
    print_(
        f"{r.kind}: {job.parameters / 1e6:.2f} M trained parameters, {r.steps} steps of "
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
    limits = Limits(r.steps, every, deadline, r.log_every)
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


def _printer(console: Console):
    return lambda text: console.print(text, markup=False, highlight=False)


def _check_length(stream: torch.Tensor, recipe: TrainRecipe) -> None:
    if stream.numel() < recipe.context + 2:
        raise UsageError(
            f"'{recipe.data}' holds {stream.numel()} tokens, too few for one window of --context "
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
    drafters = [measure.Drafter("trained", str(session.out), measure.drafter_pair(pair, str(session.out)))]
    if session.compare_with:
        other = measure.drafter_pair(pair, session.compare_with, session.allow_pickle)
        drafters.append(measure.Drafter("compare", session.compare_with, other))
    runs = (len(prompts) + 1) * (len(drafters) + 1)
    with Counted(console, "measure", runs) as counted:
        counted.stage(f"{len(prompts)} held-out prompts, greedy, plain and drafted", runs)
        report = measure.run_measurement(
            pair, drafters, prompts, session.eval_tokens, session.num_draft_tokens, counted.advance
        )
    for line in measure.summary_lines(report):
        console.print(line, markup=False, highlight=False)
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
    (out / REPORT).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
