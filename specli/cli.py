"""The `specli` command line. Thin: parse, resolve, call the API, hand rounds to a renderer."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specli import __version__
from specli.errors import SpecliError

app = typer.Typer(
    name="specli",
    help="Local speculative generation you can see: exact output, faster, every draft shown.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
presets_app = typer.Typer(
    help="List and inspect presets (target/drafter pairs with settings).", no_args_is_help=True
)
app.add_typer(presets_app, name="presets")

DebugOpt = Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def _user_errors(debug: bool) -> Iterator[None]:
    """Turn failures into one or two lines on stderr and an exit code (2 usage, 1 runtime)."""
    debug = debug or os.environ.get("SPECLI_DEBUG") == "1"
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except SpecliError as e:
        if debug:
            raise
        _stderr().print(f"[bold red]error:[/] {escape(e.message)}", markup=True, highlight=False)
        if e.hint:
            _stderr().print(e.hint, markup=False)
        raise typer.Exit(e.exit_code) from None
    except Exception as e:  # a bug or an environment failure: say what, point to --debug
        if debug:
            raise
        _stderr().print(
            f"[bold red]error:[/] {type(e).__name__}: {escape(str(e))}", markup=True, highlight=False
        )
        _stderr().print("Run again with --debug for the full traceback.", markup=False)
        raise typer.Exit(1) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """specli: speculative decoding on your own machine."""


def _quiet_transformers() -> None:
    """Our own status line replaces transformers' per-file progress bars and advisory warnings."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _read_prompt(prompt: str) -> str:
    """'-' reads stdin (one trailing newline, as `echo` adds, is dropped)."""
    if prompt == "-":
        text = sys.stdin.read()
        return text[:-1] if text.endswith("\n") else text
    return prompt


@app.command(
    epilog="Examples:\n\n"
    "  specli generate 'def fibonacci(n):'            # the embedded tiny pair, offline\n\n"
    "  specli generate 'def fibonacci(n):' --strategy self --exit-layer 3\n\n"
    "  specli generate 'def fibonacci(n):' --target ./target --draft ./drafter\n\n"
    "  specli generate 'Explain KV caches' --preset llama-8b-1b --max-new-tokens 200\n\n"
    "  echo 'Once upon a time' | specli generate - --preset qwen2.5-7b-0.5b \\\n"
    "      --temperature 0.7 --seed 1 --json",
)
def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text; '-' reads it from stdin.")],
    preset: Annotated[
        str | None,
        typer.Option(help="Preset name or YAML path (see `specli presets list`); default: tiny (embedded)."),
    ] = None,
    target: Annotated[str | None, typer.Option(help="Target model: local folder or hub id.")] = None,
    draft: Annotated[str | None, typer.Option(help="Drafter model sharing the target's tokenizer.")] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            help="draft (a drafter model), lookup (n-grams of prompt + output), self (the target's first "
            "layers draft) or none (plain decoding). Default: the preset's."
        ),
    ] = None,
    exit_layer: Annotated[
        int | None,
        typer.Option(help="self: layers that draft (1 .. layers-1; default: the preset's, else a quarter)."),
    ] = None,
    ngram_min: Annotated[
        int | None, typer.Option(help="lookup: shortest n-gram to match (default 1).")
    ] = None,
    ngram_max: Annotated[
        int | None, typer.Option(help="lookup: longest n-gram to match (default 3).")
    ] = None,
    num_draft_tokens: Annotated[
        int | None, typer.Option("--num-draft-tokens", "-k", help="Tokens drafted per round (k).")
    ] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Most tokens to generate.")] = None,
    temperature: Annotated[float | None, typer.Option(help="0 = greedy; > 0 samples.")] = None,
    top_k: Annotated[int | None, typer.Option(help="Keep the k most likely tokens (0 = off).")] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus sampling mass in (0, 1] (1 = off).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for reproducible sampling.")] = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop after this string (repeatable).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    dtype: Annotated[str | None, typer.Option(help="auto, float32, float16 or bfloat16.")] = None,
    quant: Annotated[str | None, typer.Option(help="Quantize the target: none, 8bit or 4bit.")] = None,
    chat: Annotated[
        bool | None,
        typer.Option(
            "--chat/--no-chat", help="Apply the chat template (default: when the tokenizer has one)."
        ),
    ] = None,
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Allow loading pickle (.bin) weights.")
    ] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Run model code shipped with the checkpoint.")
    ] = False,
    as_json: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Generate text with speculative decoding; output is exactly the target's own."""
    import specli
    from specli.api import check_model_options, check_settings, check_speculation_options, check_strategy
    from specli.events import Stats
    from specli.render.plain import PlainWriter, summary_line

    with _user_errors(debug):
        # cheap checks first, so a typo does not wait for a model to load
        if strategy is not None:
            check_strategy(strategy)
        check_speculation_options(exit_layer=exit_layer, ngram_min=ngram_min, ngram_max=ngram_max)
        check_model_options(device=device, dtype=dtype, quant=quant)
        check_settings(
            max_new_tokens=1 if max_new_tokens is None else max_new_tokens,
            temperature=0.0 if temperature is None else temperature,
            top_k=0 if top_k is None else top_k,
            top_p=1.0 if top_p is None else top_p,
            num_draft_tokens=1 if num_draft_tokens is None else num_draft_tokens,
        )
        text = _read_prompt(prompt)
        _quiet_transformers()
        with _stderr().status("loading models…", spinner="dots"):
            pair = specli.load(
                preset,
                target=target,
                draft=draft,
                strategy=strategy,
                device=device,
                dtype=dtype,
                quant=quant,
                allow_pickle=allow_pickle,
                trust_remote_code=trust_remote_code,
            )
        ids = pair.prompt_ids(text, chat=chat)
        rounds = pair.stream(
            prompt_ids=ids,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            num_draft_tokens=num_draft_tokens,
            stop=stop,
            exit_layer=exit_layer,
            ngram_min=ngram_min,
            ngram_max=ngram_max,
        )
        k = num_draft_tokens or pair.speculation.num_draft_tokens
        stats, collected = Stats(), []
        writer = None if as_json else PlainWriter(pair.tokenizer, sys.stdout)
        interrupted = False
        try:
            for r in rounds:
                stats.observe(r)
                collected.append(r)
                if writer:
                    writer.round(r)
        except KeyboardInterrupt:
            interrupted = True
        tokens = [t for r in collected for t in r.committed]
        if as_json:
            result = specli.Result(pair.decode(tokens), tokens, ids, stats, collected).to_dict()
            result["stats"].update(strategy=pair.strategy, num_draft_tokens=k, interrupted=interrupted)
            typer.echo(json.dumps(result, ensure_ascii=False))
        else:
            writer.close()
            sys.stdout.write("\n")
            sys.stdout.flush()
            if interrupted:
                _stderr().print("interrupted: showing what was generated so far", markup=False)
            _stderr().print(summary_line(stats, pair.strategy, k), markup=False)
        if interrupted:
            raise typer.Exit(130)


def _preset_row(name: str, path: Any) -> list[str]:
    from specli.presets import load_preset_file

    try:
        p = load_preset_file(path)
    except SpecliError as e:
        return [name, "[red]invalid[/]", str(e).splitlines()[0], "", ""]
    drafter = p.draft.model if p.draft else ("n-gram" if p.strategy == "lookup" else "")
    return [name, p.strategy, p.target.model, drafter, p.target.quantization]


@presets_app.command("list")
def presets_list(as_json: JsonOpt = False, debug: DebugOpt = False) -> None:
    """List the presets: built-in ones and yours ($SPECLI_PRESETS, ~/.config/specli/presets)."""
    from specli.presets import available_presets, load_preset_file, preset_to_dict

    with _user_errors(debug):
        found = available_presets()
        if as_json:
            out = []
            for name, path in found.items():
                try:
                    out.append(preset_to_dict(load_preset_file(path)))
                except SpecliError as e:
                    out.append({"name": name, "source": str(path), "error": str(e)})
            typer.echo(json.dumps(out, indent=2))
            return
        table = Table("name", "strategy", "target", "drafter", "quant", title="specli presets")
        for column in table.columns:
            column.overflow = "fold"
        for name, path in found.items():
            table.add_row(*_preset_row(name, path))
        Console().print(table)


@presets_app.command("show")
def presets_show(
    name: Annotated[str, typer.Argument(help="Preset name or YAML path.")],
    as_json: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Show one preset in full."""
    import yaml

    from specli.presets import preset_to_dict, resolve_preset

    with _user_errors(debug):
        data = preset_to_dict(resolve_preset(name))
        if as_json:
            typer.echo(json.dumps(data, indent=2))
        else:
            typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="specli")


if __name__ == "__main__":
    main()
