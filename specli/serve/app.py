"""The HTTP app: `create_app(pair, config)` serves one loaded Pair through an OpenAI-compatible API.

Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}, GET /metrics
(Prometheus text), GET /health (never needs the key); with cors_origins, CORS for browser clients
(preflight answered before the key is asked). Each generation is a Job for the one Worker thread
(worker.py), so requests run one at a time in arrival order; the event loop only relays rounds. A
streamed answer sends each round's text as soon as the round is verified; a client that leaves cancels
its job (within a round). Nothing here touches the models except through `Pair.stream` (in the worker)
and tokenization.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import Receive, Scope, Send

from specli.engine.events import Round
from specli.errors import UsageError
from specli.serve.auth import require_key
from specli.serve.body import MAX_BODY_BYTES, read_json
from specli.serve.errors import SERVER, APIError, install_handlers
from specli.serve.metrics import Metrics
from specli.serve.prompts import chat_ids, completion_ids
from specli.serve.report import Outcome, console_line, spec_decode, usage
from specli.serve.responses import DONE, Shape, sse
from specli.serve.schemas import ChatCompletionRequest, CompletionRequest, GenerationRequest
from specli.serve.stops import StopTrimmer
from specli.serve.worker import SHUTDOWN, Finished, Job, QueueFull, ShuttingDown, Worker
from specli.strategies import Strategy
from specli.wording import count

if TYPE_CHECKING:
    from specli.pair import Pair
    from specli.settings import Settings


@dataclass(frozen=True)
class ServeConfig:
    """How the app serves its pair.

    model: the id /v1/models lists; requests may name it, one of `aliases`, or no model at all.
    settings: every request's defaults (the preset's and the command line's); a request overrides
    max_tokens, temperature, top_p, top_k, min_p, seed, stop and ignore_eos. api_key: None = no auth.
    max_queue: requests that may wait while one runs (more get 503). log: receives one line per finished
    request (and one per request whose tools were ignored). cors_origins: origins a browser may call
    from ("*": any); none = no CORS headers.
    """

    model: str
    settings: Settings
    aliases: tuple[str, ...] = ()
    api_key: str | None = None
    max_queue: int = 16
    max_body_bytes: int = MAX_BODY_BYTES
    log: Callable[[str], Any] | None = None
    cors_origins: tuple[str, ...] = ()


IGNORED_HEADER = "X-Specli-Ignored"


def create_app(pair: Pair, config: ServeConfig) -> FastAPI:
    """An app serving `pair`. Its worker thread starts with the app's lifespan and stops with it;
    `app.state.worker.close()` cancels what runs and waits (shutdown)."""

    def finished(outcome: Outcome) -> None:  # on the worker thread, after each request
        metrics.observe(outcome)
        if config.log is not None:
            config.log(console_line(outcome))

    worker = Worker(pair, config.max_queue, finished)
    k = config.settings.num_draft_tokens if config.settings.strategy != Strategy.NONE else 0
    metrics = Metrics(k, running=lambda: worker.running, waiting=lambda: worker.waiting)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            worker.close()
            await asyncio.to_thread(worker.join, 10.0)

    app = FastAPI(title="specli", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.worker = worker
    app.state.metrics = metrics
    install_handlers(app)
    routes = _Routes(pair, config, worker, metrics, created=int(time.time()))

    app.add_api_route("/health", routes.health, methods=["GET"])
    api = APIRouter(dependencies=[Depends(require_key(config.api_key))])
    api.add_api_route("/v1/models", routes.models, methods=["GET"])
    api.add_api_route("/v1/models/{model_id:path}", routes.model, methods=["GET"])
    api.add_api_route("/metrics", routes.metrics, methods=["GET"])
    api.add_api_route("/v1/completions", routes.completions, methods=["POST"])
    api.add_api_route("/v1/chat/completions", routes.chat, methods=["POST"])
    app.include_router(api)
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["*"],  # the openai SDKs send x-stainless-* headers beside Authorization
            expose_headers=[IGNORED_HEADER],
        )
    return app


@dataclass(frozen=True)
class _Routes:
    pair: Pair
    config: ServeConfig
    worker: Worker
    meters: Metrics
    created: int

    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    def _card(self) -> dict[str, Any]:
        return {"id": self.config.model, "object": "model", "created": self.created, "owned_by": "specli"}

    async def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [self._card()]}

    async def model(self, model_id: str) -> dict[str, Any]:
        """GET /v1/models/{id}: the served model's card, by its id or an alias (404 otherwise)."""
        self._check_model(model_id)
        return self._card()

    async def metrics(self) -> Response:
        return Response(self.meters.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def completions(self, request: Request) -> Response:
        body = await read_json(request, CompletionRequest, self.config.max_body_bytes)
        self._check_model(body.model)
        ids = completion_ids(self.pair, body.prompt, self._wanted(body))
        return await self._generate(request, body, Shape.new("completion", self.config.model), ids)

    async def chat(self, request: Request) -> Response:
        body = await read_json(request, ChatCompletionRequest, self.config.max_body_bytes)
        self._check_model(body.model)
        ids = chat_ids(self.pair, body.as_dicts(), self._wanted(body))
        return await self._generate(request, body, Shape.new("chat", self.config.model), ids)

    # --- one generation ---------------------------------------------------------------------------
    def _check_model(self, name: str | None) -> None:
        if name is not None and name not in (self.config.model, *self.config.aliases):
            raise APIError(
                404,
                f"the model '{name}' does not exist: this server serves '{self.config.model}'.",
                param="model",
                code="model_not_found",
            )

    def _wanted(self, body: GenerationRequest) -> int:
        """The tokens the request asks for: max_completion_tokens, max_tokens, or the server's default."""
        return body.max_new_tokens or self.config.settings.max_new_tokens

    def _settings(self, body: GenerationRequest, prompt_tokens: int) -> Settings:
        """The server's settings with the request's on top. Past the context, max_tokens is cut to one
        more than fits: the engine then stops at the context itself (every token that fits, stop reason
        "context" as in `generate`), and no huge max_tokens reaches the caches. A seeded request that
        samples drafts a fixed k every round (as --fixed-k): k then reads no timings, so the same seed
        draws the same numbers in the same places and the server reproduces its answer."""
        base = self.config.settings
        max_new = self._wanted(body)
        if self.pair.max_positions is not None:
            max_new = min(max_new, self.pair.max_positions - prompt_tokens + 1)
        changes = {
            "max_new_tokens": max_new,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "top_k": None if body.top_k is None else max(body.top_k, 0),
            "min_p": body.min_p,
            "seed": body.seed,
            "ignore_eos": body.ignore_eos,
        }
        try:
            settings = base.replace(
                stop=body.stop_strings(), chat=False, **{n: v for n, v in changes.items() if v is not None}
            )
            if settings.seed is not None and not settings.greedy:
                settings = settings.replace(fixed_k=True)
            return settings
        except UsageError as e:
            raise APIError(422, e.message, code="invalid_value") from None

    async def _generate(
        self, request: Request, body: GenerationRequest, shape: Shape, ids: list[int]
    ) -> Response:
        settings = self._settings(body, len(ids))
        job = Job(shape.id, shape.endpoint, ids, settings, asyncio.get_running_loop())
        try:
            self.worker.submit(job)
        except QueueFull:
            raise APIError(
                503,
                "the server is busy: it runs one request at a time and "
                f"{count(self.config.max_queue, 'request')} {'is' if self.config.max_queue == 1 else 'are'} "
                "already waiting (--max-queue). Retry later.",
                SERVER,
                code="queue_full",
                headers={"Retry-After": "1"},
            ) from None
        except ShuttingDown:
            raise APIError(503, "the server is shutting down.", SERVER, code="shutting_down") from None
        headers = self._ignored(body, shape)
        if body.stream:
            return _JobStream(self._stream(job, shape, body), job, headers)
        return await self._complete(job, shape, request, headers)

    def _ignored(self, body: GenerationRequest, shape: Shape) -> dict[str, str]:
        """The header (and console line) naming fields accepted but not acted on (tools the model may
        answer without)."""
        if not body.ignored:
            return {}
        names = ", ".join(body.ignored)
        if self.config.log is not None:
            self.config.log(f"{shape.id} {shape.endpoint} · ignored {names}: the model answers without them")
        return {IGNORED_HEADER: names}

    async def _complete(self, job: Job, shape: Shape, request: Request, headers: dict[str, str]) -> Response:
        trimmer, parts, done = StopTrimmer(job.settings.stop), [], None
        try:
            async for event in job.events():
                if isinstance(event, Round):
                    parts.append(trimmer.push(event.text))
                    if await request.is_disconnected():
                        job.cancel()
                else:
                    done = event
        finally:
            job.cancel()  # the handler was cancelled, or it is over: either way the job is done with
        failure = _failure(done)
        if failure is not None:
            raise failure
        outcome = done.outcome
        parts.append(trimmer.finish())
        answer = shape.body("".join(parts), outcome.finish_reason, *_accounts(outcome))
        return JSONResponse(answer, headers=headers)

    async def _stream(self, job: Job, shape: Shape, body: GenerationRequest) -> AsyncIterator[str]:
        trimmer = StopTrimmer(job.settings.stop)
        if shape.kind == "chat":
            yield sse(shape.chunk(role=True))
        async for event in job.events():
            if isinstance(event, Round):
                text = trimmer.push(event.text)
                if text:
                    yield sse(shape.chunk(text))
                continue
            failure = _failure(event)
            if failure is not None:
                yield sse(failure.body())
                yield DONE
                return
            outcome = event.outcome
            tail = trimmer.finish()
            if tail:
                yield sse(shape.chunk(tail))
            used, spec = _accounts(outcome)
            last = shape.chunk(finish=outcome.finish_reason)
            if body.include_usage:
                yield sse(last)
                yield sse(shape.usage_chunk(used, spec))
            else:
                yield sse(last | {"spec_decode": spec})
            yield DONE


def _accounts(outcome: Outcome) -> tuple[dict[str, int], dict[str, Any]]:
    """(usage, spec_decode) of a finished request."""
    stats = outcome.stats
    return usage(outcome.prompt_tokens, stats.tokens), spec_decode(
        stats, outcome.strategy, outcome.num_draft_tokens
    )


def _failure(done: Finished | None) -> APIError | None:
    """The error a finished job answers with (None: it succeeded)."""
    if done is None:
        return APIError(500, "generation ended without a result.", SERVER, code="generation_failed")
    if done.status == 200:
        return None
    message = done.outcome.error or "generation failed"
    if done.status == 400:
        return APIError(400, message, code="invalid_value")
    if done.status == 503 or message == SHUTDOWN:
        return APIError(503, "the server is shutting down.", SERVER, code="shutting_down")
    if done.status == 499:
        return APIError(499, "the client closed the request.", code="client_closed_request")
    return APIError(500, f"generation failed: {message}", SERVER, code="generation_failed")


class _JobStream(StreamingResponse):
    """A server-sent-event stream whose job is cancelled however the stream ends (a client that
    disconnects ends it; Starlette notices and stops sending)."""

    def __init__(self, content: AsyncIterator[str], job: Job, headers: dict[str, str] | None = None) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})}
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.job = job

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel()
