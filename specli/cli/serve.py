"""`specli serve`: load a pair once and serve it over an OpenAI-compatible HTTP API (specli.serve)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Annotated

import typer

from specli.cli.app import Command, app
from specli.cli.common import stderr_console, user_errors
from specli.cli.options import (
    AllowPickleOpt,
    DebugOpt,
    DeviceOpt,
    DraftOpt,
    DraftPMinOpt,
    DraftTokensOpt,
    DtypeOpt,
    EngineOpt,
    ExitLayerOpt,
    FixedKOpt,
    GenerationOptions,
    ModelOptions,
    NgramMaxOpt,
    NgramMinOpt,
    NoColorOpt,
    PresetOpt,
    QuantOpt,
    StrategyOpt,
    TargetOpt,
    ThreadsOpt,
    TreeOpt,
    TreeWidthOpt,
    TrustOpt,
    check_before_loading,
)
from specli.errors import SpecliError, UsageError
from specli.threads import AUTO

if TYPE_CHECKING:
    from rich.console import Console

    from specli.pair import Pair
    from specli.settings import Settings

EXTRA_HINT = "pip install -e '.[serve]' (in the specli checkout)"
KEY_VARIABLE = "SPECLI_API_KEY"
ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+", re.IGNORECASE)  # scheme://host[:port], no path


EXAMPLES = (
    "Examples:\n\n"
    "  specli serve                          # the embedded tiny pair, offline\n\n"
    "  specli serve --preset llama-8b-1b --port 8080\n\n"
    "  specli serve --target ./target --draft ./drafter -k 6 --max-queue 4\n\n"
    "  specli serve --preset llama-8b-1b --tree 16 --tree-width 2   # token trees by default\n\n"
    "  SPECLI_API_KEY=secret specli serve --host 0.0.0.0 --strategy lookup\n\n"
    "  curl 127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\\n"
    '      -d \'{"prompt": "def fibonacci(n):", "max_tokens": 64}\'\n\n'
    "Routes: POST /v1/completions and /v1/chat/completions (streaming with stream: true), GET /v1/models "
    "and /v1/models/{id}, GET /metrics (Prometheus), GET /health. Requests run one at a time in arrival "
    "order (batch size 1); "
    "each answer carries a spec_decode object (drafts, draft_tokens, accepted_tokens, acceptance_rate, "
    "mean_acceptance_length)."
)
MaxNewOpt = Annotated[
    int | None, typer.Option(help="max_tokens of a request that gives none (default: the preset's).")
]
TemperatureOpt = Annotated[
    float | None,
    typer.Option(help="temperature of a request that gives none (default: the preset's; 0 = greedy)."),
]
TopKOpt = Annotated[int | None, typer.Option(help="top_k of a request that gives none (0 = off).")]
TopPOpt = Annotated[float | None, typer.Option(help="top_p of a request that gives none (1 = off).")]
HostOpt = Annotated[
    str,
    typer.Option(help="Address to listen on. Anything but loopback without --api-key prints a warning."),
]
PortOpt = Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar=KEY_VARIABLE,
        show_default=False,
        help="Require 'Authorization: Bearer KEY' on every route but /health (an empty key is refused).",
    ),
]
CorsOriginOpt = Annotated[
    list[str] | None,
    typer.Option(
        show_default=False,
        help="Let browser pages from this origin call the API (CORS), e.g. http://localhost:3000; repeat "
        "for more, '*' for any. Off by default.",
    ),
]
MaxQueueOpt = Annotated[
    int,
    typer.Option(min=0, help="Requests that may wait while one runs; more get 503 (0: none wait)."),
]
HiddenCompileOpt = Annotated[bool, typer.Option("--compile", hidden=True)]


@app.command(cls=Command, epilog=EXAMPLES)
def serve(
    preset: PresetOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    strategy: StrategyOpt = None,
    exit_layer: ExitLayerOpt = None,
    ngram_min: NgramMinOpt = None,
    ngram_max: NgramMaxOpt = None,
    fixed_k: FixedKOpt = False,
    draft_p_min: DraftPMinOpt = None,
    num_draft_tokens: DraftTokensOpt = None,
    tree: TreeOpt = None,
    tree_width: TreeWidthOpt = None,
    max_new_tokens: MaxNewOpt = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    api_key: ApiKeyOpt = None,
    cors_origin: CorsOriginOpt = None,
    max_queue: MaxQueueOpt = 16,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    quant: QuantOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustOpt = False,
    threads: ThreadsOpt = AUTO,
    engine: EngineOpt = None,
    no_color: NoColorOpt = False,
    debug: DebugOpt = False,
    compile: HiddenCompileOpt = False,
) -> None:
    """Serve a pair over an OpenAI-compatible HTTP API; output is exactly the target's own."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, strategy=strategy, device=device, dtype=dtype,
        quant=quant, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads,
        engine=engine)  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, exit_layer=exit_layer, ngram_min=ngram_min, ngram_max=ngram_max,
        fixed_k=fixed_k or None, draft_p_min=draft_p_min, tree=tree, tree_width=tree_width)  # fmt: skip
    with user_errors(debug):
        if compile:
            raise UsageError(
                "specli serve does not compile: each request brings a prompt length and max_tokens of its "
                "own, and a shape not compiled yet would compile inside that request (10-75 s on CPU).",
                "Leave --compile out (on CPU it gains 5-15% on plain decoding only: docs/performance.md, "
                "--compile).",
            )
        key, origins = _checked_key(api_key), _checked_origins(cors_origin or [])
        stopped_by = _serve(models, options, host, port, key, max_queue, no_color, origins)
    if stopped_by is not None:
        from specli.serve.server import exit_now

        exit_now()  # a signal stopped it: skip tearing the loaded models down object by object (1-4 s)


def _checked_key(api_key: str | None) -> str | None:
    """The API key, None for none; an empty one is refused (`--api-key "$KEY"` with KEY unset would
    otherwise serve with no key, silently)."""
    if api_key is None and os.environ.get(KEY_VARIABLE) is not None:
        api_key = os.environ[KEY_VARIABLE]  # click reads an empty variable as unset
        if not api_key.strip():
            raise UsageError(
                f"{KEY_VARIABLE} is set but empty: the server would run with no API key.",
                f"Set {KEY_VARIABLE} to the key, or unset it to serve without one.",
            )
    if api_key is not None and not api_key.strip():
        raise UsageError(
            '--api-key is empty (is the variable in "$KEY" unset?): the server would run with no API key.',
            "Give the key, or leave --api-key out to serve without one.",
        )
    return api_key


def _checked_origins(origins: list[str]) -> tuple[str, ...]:
    """--cors-origin values: '*' or scheme://host[:port], as browsers send them in the Origin header."""
    for origin in origins:
        if origin != "*" and not ORIGIN.fullmatch(origin):
            raise UsageError(
                f"--cors-origin '{origin}' is not an origin.",
                "Give scheme://host[:port] with no path or trailing slash (e.g. http://localhost:3000), "
                "or '*' for any.",
            )
    return tuple(dict.fromkeys(origins))


def _serve(
    models: ModelOptions,
    options: GenerationOptions,
    host: str,
    port: int,
    api_key: str | None,
    max_queue: int,
    no_color: bool,
    cors_origins: tuple[str, ...] = (),
) -> str | None:
    """Load, serve until a signal; the signal's name (None: the server stopped by itself)."""
    try:  # the extra, before anything loads
        from specli.serve import ServeConfig, create_app
        from specli.serve.prompts import has_chat_template
        from specli.serve.server import bind, run, url
    except ImportError as e:
        raise SpecliError(f"specli serve needs the serve extra ({e.name} is missing): {EXTRA_HINT}") from None
    check_before_loading(models, options)  # before torch: a usage error comes at once
    from specli.api import preset_for
    from specli.cli.run import load_pair

    console = stderr_console(no_color)
    spec = preset_for(models.preset, target=models.target, draft=models.draft)
    model_id = models.target or (spec.name if spec is not None else "specli")
    sock = bind(host, port)  # a busy port fails before the models load
    try:
        pair, settings = load_pair(models, options, note_greedy=False, no_color=no_color, announce="serve")
        aliases = tuple({pair.target_name, *([spec.name] if spec else [])} - {model_id})
        config = ServeConfig(
            model=model_id,
            settings=settings,
            aliases=aliases,
            api_key=api_key,
            max_queue=max_queue,
            log=lambda line: console.print(line, markup=False),
            cors_origins=cors_origins,
        )
        server_app = create_app(pair, config)
        _serving_notes(console, pair, host, api_key, has_chat_template(pair))
        ready = _ready_line(model_id, settings, url(sock), api_key, cors_origins, max_queue)
        stopped_by = run(
            server_app,
            sock,
            on_signal=lambda sig: server_app.state.worker.close(),
            on_ready=lambda: console.print(ready, markup=False),
        )
    finally:
        sock.close()
    console.print(f"stopped{f' ({stopped_by})' if stopped_by else ''}.", markup=False)
    return stopped_by


def _serving_notes(console: Console, pair: Pair, host: str, api_key: str | None, chat_template: bool) -> None:
    """What a client should know before the first request: no chat template (chat messages are joined),
    or a listener open beyond this machine with no API key."""
    if not chat_template:
        console.print(
            f"note: '{pair.target_name}' has no chat template: /v1/chat/completions continues the "
            "messages' text joined by newlines.",
            markup=False,
        )
    from specli.serve.server import is_loopback

    if not is_loopback(host) and api_key is None:
        console.print(
            f"warning: listening on {host} without an API key: anyone who can reach this machine can "
            "use it. Pass --api-key KEY (or set SPECLI_API_KEY).",
            markup=False,
        )


def _ready_line(
    model_id: str,
    settings: Settings,
    address: str,
    api_key: str | None,
    cors_origins: tuple[str, ...],
    max_queue: int,
) -> str:
    """The line printed once the server listens: the model, its speculation, where, and who may call."""
    from specli.wording import strategy_label

    label = strategy_label(settings.strategy, settings.num_draft_tokens)
    if settings.drafts_tree:
        label += f", trees of {settings.tree} nodes, width {settings.tree_width}"
    auth = "API key required" if api_key else "no API key"
    if cors_origins:
        auth += f" · CORS for {', '.join(cors_origins)}"
    return (
        f"serving '{model_id}' ({label}) on {address}/v1 · {auth} · one request at a time, up to "
        f"{max_queue} waiting · Ctrl-C stops"
    )
