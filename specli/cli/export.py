"""`specli export ENGINE`: print the command that starts vLLM, SGLang or llama.cpp serving the same pair
with the same speculation (specli.export does the mapping; nothing loads here, torch is not imported)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from specli.cli.app import Command, app
from specli.cli.common import stderr_console, user_errors
from specli.cli.options import (
    DebugOpt,
    DraftOpt,
    DraftPMinOpt,
    DraftTokensOpt,
    DtypeOpt,
    FixedKOpt,
    NgramMaxOpt,
    NgramMinOpt,
    PresetOpt,
    QuantOpt,
    StrategyOpt,
    TargetOpt,
)
from specli.errors import UsageError

FORMATS = ("text", "json")

EngineArg = Annotated[str, typer.Argument(help="vllm, sglang or llama.cpp.", metavar="ENGINE")]
TpOpt = Annotated[
    int | None,
    typer.Option("--tp", min=1, help="Tensor-parallel GPUs (vLLM --tensor-parallel-size, SGLang --tp-size)."),
]
PpOpt = Annotated[
    int | None,
    typer.Option(
        "--pp", min=1, help="Pipeline stages (vLLM --pipeline-parallel-size, SGLang --pp-size): nodes."
    ),
]
HostOpt = Annotated[str | None, typer.Option(help="Address the server binds (default: the engine's).")]
PortOpt = Annotated[
    int | None, typer.Option(min=1, max=65535, help="Port the server listens on (default: the engine's).")
]
# Declared here, not in cli/options.py: the token-tree options of the export command (docs/design.md §14).
ExportTreeOpt = Annotated[
    int | None,
    typer.Option(
        "--tree",
        min=0,
        help="Token-tree nodes per round (0: a chain; default: the preset's). SGLang gets "
        "--speculative-eagle-topk W --speculative-num-draft-tokens N+1, vLLM a static "
        "speculative_token_tree; llama.cpp drafts chains only.",
    ),
]
ExportTreeWidthOpt = Annotated[
    int | None,
    typer.Option(
        "--tree-width",
        min=1,
        help="Children per node and nodes expanded per depth of a token tree (default: the preset's, 2).",
    ),
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="text: the commands, ready to paste. json: for vllm the --speculative-config object alone "
        '(null without speculation); for sglang and llama.cpp {"engine", "argv": [...], "steps": '
        '[[...], ...] (downloads and GGUF conversions to run first), "notes": [...]}.',
        metavar="text|json",
    ),
]


EXAMPLES = (
    "Examples:\n\n"
    "  specli export vllm --preset llama-8b-eagle3\n\n"
    "  specli export vllm --preset llama-70b-1b --tp 4 --pp 2 --port 8000   # 2 nodes x 4 GPUs (Ray)\n\n"
    "  specli export vllm --preset llama-8b-pard --format json              # the --speculative-config\n\n"
    "  specli export sglang --preset qwen2.5-7b-0.5b -k 5 --tp 2\n\n"
    "  specli export llama.cpp --preset qwen2.5-7b-lookup                   # GGUF steps, llama-server\n\n"
    "  specli export sglang --preset llama-8b-eagle3 --tree 16 --tree-width 4  # an EAGLE-2 token tree\n\n"
    "Notes (options an engine has no counterpart for, assumptions, where files are) go to stderr as "
    "'note: ...'. Self-speculation runs in none of the engines; PARD and P-EAGLE parallel drafting in "
    "vLLM only. Nothing is downloaded or loaded: a drafter's kind comes from its config.json (local "
    "folder, embedded, hub cache) or the shipped presets."
)


@app.command("export", cls=Command, epilog=EXAMPLES)
def export_command(
    engine: EngineArg,
    preset: PresetOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    strategy: StrategyOpt = None,
    num_draft_tokens: DraftTokensOpt = None,
    fixed_k: FixedKOpt = False,
    draft_p_min: DraftPMinOpt = None,
    ngram_min: NgramMinOpt = None,
    ngram_max: NgramMaxOpt = None,
    tree: ExportTreeOpt = None,
    tree_width: ExportTreeWidthOpt = None,
    quant: QuantOpt = None,
    dtype: DtypeOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    host: HostOpt = None,
    port: PortOpt = None,
    output_format: FormatOpt = "text",
    debug: DebugOpt = False,
) -> None:
    """Print the command that serves this pair with vLLM, SGLang or llama.cpp, with the same speculation."""
    from specli import export as ex

    with user_errors(debug):
        name = ex.check_engine(engine)
        if output_format not in FORMATS:
            raise UsageError(f"unknown --format '{output_format}': use text or json.")
        pair = ex.resolve_pair(
            preset,
            target=target,
            draft=draft,
            strategy=strategy,
            quant=quant,
            dtype=dtype,
            num_draft_tokens=num_draft_tokens,
            fixed_k=True if fixed_k else None,
            draft_p_min=draft_p_min,
            ngram_min=ngram_min,
            ngram_max=ngram_max,
            tree=tree,
            tree_width=tree_width,
        )
        result = ex.export(name, pair, ex.ServeOptions(tp=tp, pp=pp, host=host, port=port))
        console = stderr_console()
        for note in result.notes:
            console.print(f"note: {note}", markup=False)
        if output_format == "json":
            typer.echo(json.dumps(result.machine_readable(), indent=2))
        else:
            typer.echo("\n".join(result.commands()))
