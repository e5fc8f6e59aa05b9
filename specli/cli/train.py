"""`specli train KIND`: train a drafter for a target (specli.training.command does the work; torch and
the training modules load only once the command runs, so `specli --help` stays fast)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from specli.cli.app import Command, app
from specli.cli.common import quiet_transformers, stderr_console, user_errors
from specli.cli.options import (
    AllowPickleOpt,
    DebugOpt,
    DeviceOpt,
    NoColorOpt,
    QuantOpt,
    ThreadsOpt,
    TrustOpt,
    check_device_dtype_quant,
    local_model_folder,
)
from specli.errors import UsageError
from specli.threads import AUTO, parse_threads
from specli.training.request import TrainRequest

KindArg = Annotated[
    str,
    typer.Argument(
        help="eagle3 (EAGLE-3 head), eagle1 (EAGLE-1 head), peagle (P-EAGLE: k drafts per forward), "
        "pard (a small model taught to draft k tokens per forward), draft (a small model distilled on "
        "the target) or heads (blockwise heads on the target's last hidden state, --strategy heads).",
        metavar="KIND",
        show_default=False,
    ),
]
Int = int | None


def command_line(ctx: typer.Context) -> str:
    """The running `specli train` command as the user typed it (the options given, in order), for
    training.json."""
    words = ["specli", "train"]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value = ctx.params[param.name]
        if param.param_type_name == "argument":
            words.append(str(value))
        elif getattr(param, "is_flag", False):
            words.append(param.opts[0])
        else:
            words += [param.opts[0], str(value)]
    return shlex.join(words)


def check_before_torch(kind: str, given: dict[str, Any], out: Path, request: TrainRequest) -> None:
    """Every check of `specli train` that needs no model, before torch or transformers is imported (5-9 s):
    the spelling of --device, --dtype and --quant, --out (empty, or --resume with a checkpoint, or
    --overwrite of a `specli train` output), a new run's --target and --data (named; the recipe's values;
    --init where the kind needs it), a local model folder or embedded:NAME that does not exist (--target,
    --init, --compare-with), --data that names nothing, a prompts file for --eval-prompts that does not
    exist. A resumed run's recipe is in its checkpoint: command.check judges it."""
    from specli.training import data, outdir
    from specli.training.recipe import build_recipe, require_sources

    check_device_dtype_quant(request.device, given["dtype"], given["quant"])
    outdir.check_out(out, request.resume, request.overwrite)
    if not request.resume:
        require_sources(given["target"], given["data"])
        rest = {k: v for k, v in given.items() if k not in ("target", "data")}
        build_recipe(kind, given["target"], given["data"], request.quick, **rest)
    for name in (given["target"], given["init"], request.compare_with):
        if name is not None:
            local_model_folder(name)
    if given["data"] is not None:
        data.check_source(given["data"])
    eval_prompts = request.eval_prompts
    named_file = eval_prompts not in (None, "auto", *data.SETS)
    if named_file and request.eval_count != 0 and not Path(eval_prompts).expanduser().is_file():
        raise UsageError(
            f"cannot read prompts from '{eval_prompts}': no such file.",
            "Give --eval-prompts code, chat, auto or a prompts file.",
        )


def _opt(help: str, *names: str, metavar: str | None = None) -> typer.models.OptionInfo:
    return typer.Option(*names, help=help, metavar=metavar, show_default=False)


EXAMPLES = (
    "Examples:\n\n"
    "  specli train eagle3 --target embedded:tiny-target --data stdlib --out ./eagle3 --quick\n\n"
    "  specli train eagle3 --target meta-llama/Llama-3.1-8B-Instruct --data chat --regenerate \\\n"
    "      --out ./llama8b-eagle3 --steps 20000 --batch-size 8 --context 2048 --time-limit 2h\n\n"
    "  specli train eagle3 --out ./llama8b-eagle3 --resume --time-limit 2h   # the next 2 hours\n\n"
    "  specli train pard --target Qwen/Qwen2.5-7B-Instruct --init Qwen/Qwen2.5-0.5B-Instruct \\\n"
    "      --data ./chats.jsonl --out ./pard\n\n"
    "  specli generate 'def f(x):' --target T --strategy eagle --draft ./llama8b-eagle3\n\n"
    "DIR receives the drafter (EAGLE-3 / P-EAGLE heads in the speculators layout, PARD and draft models as "
    "transformers folders), DIR/training.json (the recipe, the history, the measurement) and "
    "DIR/checkpoint/ (weights, optimizer and random states: delete it once you will not resume). A "
    "checkpoint is written every --checkpoint-every steps, at --time-limit and at Ctrl-C; --resume "
    "continues bit for bit."
)
OutOpt = Annotated[
    Path, _opt("Folder for the drafter, training.json and checkpoint/ (new or empty).", "--out")
]
TargetOpt = Annotated[
    str | None,
    _opt(
        "The target: any model name generate takes (a folder, hub id, embedded:NAME, a .gguf file, "
        "ollama:NAME, package:NAME).",
        "--target",
    ),
]
DataOpt = Annotated[
    str | None,
    _opt(
        'A JSONL file ({"text": ...} or chat {"messages": [...]}), a folder of text/code files, '
        "a bundled prompt set (code, chat) or stdlib (this Python's standard library).",
        "--data",
    ),
]
InitOpt = Annotated[
    str | None,
    _opt(
        "pard, draft: the small model to start from (the target's tokenizer). eagle3, eagle1: a head to "
        "continue; peagle: an EAGLE-3 head to start from.",
        "--init",
    ),
]
RegenerateOpt = Annotated[
    bool,
    typer.Option(
        "--regenerate",
        help="Let the target answer the data's prompts first (greedy) and train on its own answers; cached.",
    ),
]
RegenerateTokensOpt = Annotated[Int, _opt("Longest answer --regenerate writes (default 256).")]
StepsOpt = Annotated[Int, _opt("Optimizer steps in all (default 2000).")]
BatchSizeOpt = Annotated[Int, _opt("Windows per step (default 8).")]
ContextOpt = Annotated[Int, _opt("Tokens per window (default 512).")]
LrOpt = Annotated[float | None, _opt("Peak learning rate (default 5e-4; pard, draft 1e-4).")]
DraftVocabOpt = Annotated[
    Int,
    _opt(
        "eagle3, peagle: tokens the head drafts over (default 32000); heads: the same, chosen when they "
        "are saved (default 8192, 0: all; may change on --resume)."
    ),
]
TttStepsOpt = Annotated[Int, _opt("eagle3: training-time-test unroll depth (default 3).")]
LayersOpt = Annotated[Int, _opt("eagle3, peagle: the head's decoder layers (default 1).")]
AuxLayersOpt = Annotated[
    str | None,
    _opt(
        "eagle3, peagle: the target hidden states the head fuses, e.g. 2,4,7 (i enters layer i; L is "
        "the final output; default: EAGLE-3's 2, L/2, L-3).",
        "--aux-layers",
        metavar="I,J,K",
    ),
]
IntermediateOpt = Annotated[
    Int,
    _opt(
        "eagle3, eagle1, peagle: the head's MLP width (default: the target's); heads: each block an MLP "
        "of this width (default: one Linear, Medusa's block)."
    ),
]
ParallelOpt = Annotated[
    Int, _opt("peagle, pard: drafts per forward it learns (default 8); heads: how many heads (default 4).")
]
SequentialOpt = Annotated[
    bool,
    typer.Option(
        "--sequential",
        help="heads: each head also reads the token before its own (Hydra's heads; Medusa's read the "
        "hidden state alone). Still no forward of any model.",
    ),
]
SeedOpt = Annotated[Int, _opt("Seed of the data order and initialisation (default 0).")]
TimeLimitOpt = Annotated[
    str | None,
    _opt("Stop cleanly (with a checkpoint) after this long: 2h, 90m, 1h30m.", metavar="DURATION"),
]
CheckpointEveryOpt = Annotated[Int, _opt("Checkpoint every N steps (default: 20 per run).", metavar="N")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the run whose checkpoint is in --out.")]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="Replace an earlier `specli train` output in --out.")
]
QuickOpt = Annotated[
    bool, typer.Option("--quick", help="A few steps of a small batch (a smoke test); options given win.")
]
EvalPromptsOpt = Annotated[
    str | None,
    _opt(
        "Held-out prompts measured at the end: code, chat, a prompts file, or auto (chat for "
        "chat models; the default). Measurement options given once are remembered by --resume."
    ),
]
EvalCountOpt = Annotated[Int, _opt("How many of them (0: no measurement; default 8).")]
EvalTokensOpt = Annotated[Int, _opt("Tokens generated per prompt (default 64).")]
DraftTokensOpt = Annotated[
    Int,
    _opt(
        "Drafts per round in the measurement (fixed, so α and τ do not depend on timing; default: a "
        "parallel drafter's own k, else 4).",
        "--num-draft-tokens",
        "-k",
    ),
]
CompareWithOpt = Annotated[
    str | None, _opt("Measure this drafter (a head or a draft model) beside the new one.", "--compare-with")
]
DtypeOpt = Annotated[
    str | None, _opt("The target's dtype: float32, float16, bfloat16 (default: bfloat16 on a GPU).")
]


@app.command("train", cls=Command, epilog=EXAMPLES)
def train_command(
    ctx: typer.Context,
    kind: KindArg,
    out: OutOpt,
    target: TargetOpt = None,
    data: DataOpt = None,
    init: InitOpt = None,
    regenerate: RegenerateOpt = False,
    regenerate_tokens: RegenerateTokensOpt = None,
    steps: StepsOpt = None,
    batch_size: BatchSizeOpt = None,
    context: ContextOpt = None,
    lr: LrOpt = None,
    draft_vocab: DraftVocabOpt = None,
    ttt_steps: TttStepsOpt = None,
    layers: LayersOpt = None,
    aux_layers: AuxLayersOpt = None,
    intermediate: IntermediateOpt = None,
    parallel: ParallelOpt = None,
    sequential: SequentialOpt = False,
    seed: SeedOpt = None,
    time_limit: TimeLimitOpt = None,
    checkpoint_every: CheckpointEveryOpt = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    quick: QuickOpt = False,
    eval_prompts: EvalPromptsOpt = None,
    eval_count: EvalCountOpt = None,
    eval_tokens: EvalTokensOpt = None,
    num_draft_tokens: DraftTokensOpt = None,
    compare_with: CompareWithOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    quant: QuantOpt = None,
    threads: ThreadsOpt = AUTO,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustOpt = False,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Train a drafter (EAGLE-3, EAGLE-1, P-EAGLE, PARD or a distilled draft model) for your own target."""
    console = stderr_console(no_color)
    request = TrainRequest(
        out=out, target=target, data=data, init=init, regenerate=regenerate,
        regenerate_tokens=regenerate_tokens, steps=steps, batch_size=batch_size, context=context, lr=lr,
        draft_vocab=draft_vocab, ttt_steps=ttt_steps, layers=layers, aux_layers=aux_layers,
        intermediate=intermediate, parallel=parallel, sequential=sequential, seed=seed, time_limit=time_limit,
        checkpoint_every=checkpoint_every, resume=resume, overwrite=overwrite, quick=quick,
        eval_prompts=eval_prompts, eval_count=eval_count, eval_tokens=eval_tokens,
        num_draft_tokens=num_draft_tokens, compare_with=compare_with, device=device, dtype=dtype,
        quant=quant, threads=threads, allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code)  # fmt: skip
    with user_errors(debug):
        report, out = run_training(kind, request, command_line(ctx), console)
        finish(report, out, console)


def run_training(
    kind: str, request: TrainRequest, command: str, console: Console
) -> tuple[dict[str, Any], Path]:
    """Every check that needs no model (before torch is imported), then the training with its progress
    on `console`; the run's report and its output folder."""
    from specli.training.recipe import check_kind, parse_duration

    check_kind(kind)
    limit = parse_duration(request.time_limit) if request.time_limit is not None else None
    threads = parse_threads(request.threads)
    given = request.recipe_values()
    out = request.out.expanduser()
    check_before_torch(kind, given, out, request)
    from specli.render.progress import Counted, loading_progress
    from specli.training.command import train

    session = request.session(
        out, limit, threads, command, loading_view=loading_progress, counted_view=Counted
    )
    quiet_transformers()
    return train(kind, given, session, console, quick=request.quick), session.out


def finish(report: dict[str, Any], out: Path, console: Console) -> None:
    """The exit of a run: 130 when Ctrl-C stopped it; a finished run's result on stdout (the progress
    and notes went to stderr); exit 1 when the measured output differs from plain decoding."""
    if report["stopped"] == "interrupted":
        raise typer.Exit(130)
    if report.get("finished"):
        from specli.training.command import result_lines

        for line in result_lines(report, out):
            typer.echo(line)
    measurement = report.get("measurement")
    if measurement is not None and not measurement["identical"]:
        differences = "; ".join(measurement["differences"][:3])
        console.print(f"error: output differs from plain decoding: {differences}", markup=False)
        raise typer.Exit(1)
