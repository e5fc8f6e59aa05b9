"""`specli bench --endpoint URL`: measure a running OpenAI-compatible server (specli serve, vLLM, SGLang,
llama-server) on the prompts, warm-up and repeats of a local bench, with the same words (docs/design.md §4).

Every request streams `POST {url}/completions` (`/chat/completions` with --chat) with
`stream_options.include_usage`: the time to its first token and between its chunks are measured here,
its tokens are the server's `usage`. Speculation is what the server reports, in two ways:

- per response: specli serve's `spec_decode` object, llama.cpp's `timings.draft_n` / `draft_n_accepted`,
  SGLang's `meta_info.spec_accept_length` / `spec_verify_ct` (the last streamed chunk that has one);
- as counters: the Prometheus `spec_decode` counters of `/metrics` at the server's root (`vllm:`,
  `llamacpp:` or `specli:` prefix, one series per engine summed), read before and after each request
  (at concurrency 1) or around the whole measuring stage (concurrency > 1: overall only).

A response's own figures come first; the counters fill what it lacks. Either way they are read into the
engine's own counter type (`SpecCounters`, engine/counters.py, with each count None where the server
did not say), whose rates follow `vllm bench serve`: acceptance rate = accepted / draft tokens,
acceptance length = 1 + accepted / drafts.

The parsers are pure functions; httpx and prometheus_client (the `serve` extra) are imported only when a
server is actually asked, so a local bench needs neither.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from specli.bench.prompts import BenchPrompt
from specli.bench.run import BenchSettings, Progress, latency_metrics, speculation_metrics
from specli.engine.counters import COUNTS, SpecCounters
from specli.errors import UsageError
from specli.wording import count

if TYPE_CHECKING:
    import httpx

PREFIXES = ("vllm:", "llamacpp:", "specli:")  # engines whose /metrics name spec_decode counters as vLLM
COUNTERS = {  # counter (prefix and _total stripped) -> SpecCounters field
    "spec_decode_num_drafts": "drafts",
    "spec_decode_num_draft_tokens": "drafted",
    "spec_decode_num_accepted_tokens": "accepted",
}
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos"
GENERATED = ("generation_tokens", "tokens_predicted")  # tokens generated: vLLM and specli, llama.cpp
SETTLE_S = 2.0  # how long a server may take to count a request it has answered
NOT_REPORTED = "not reported by this server"
DEFAULT_TIMEOUT = 60.0


class EndpointError(Exception):
    """A server that cannot be benchmarked: the message is one line naming the endpoint and why."""


# --------------------------------------------------------------------------- endpoints


@dataclass(frozen=True)
class Endpoint:
    """A server to measure: its API base URL (ending in /v1 unless given otherwise), the label its rows
    carry, the API key sent as a bearer token, and the model to ask for (None: the first of /models)."""

    url: str
    label: str
    api_key: str | None = None
    model: str | None = None

    @property
    def root(self) -> str:
        """Where /metrics lives: the URL without a trailing /v1."""
        return self.url.removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def parse_endpoint(text: str, api_key: str | None = None, model: str | None = None) -> Endpoint:
    """'URL' or 'NAME=URL' -> Endpoint. An http(s) URL with a host; no path means /v1; the label is NAME,
    else host:port. UsageError otherwise."""
    name, sep, rest = text.partition("=")
    label, url = (name.strip(), rest.strip()) if sep and "://" not in name and name.strip() else (None, text)
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--endpoint '{text}' is not an http(s) URL.",
            "Give the server's API base, e.g. http://127.0.0.1:8000/v1, or NAME=URL to label it.",
        )
    path = parts.path.rstrip("/") or "/v1"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{parts.port}" if parts.port else host
    base = urlunsplit((parts.scheme, netloc, path, "", ""))
    return Endpoint(base, label or netloc, api_key or None, model or None)


def parse_endpoints(
    texts: Sequence[str], api_key: str | None = None, model: str | None = None, taken: Iterable[str] = ()
) -> list[Endpoint]:
    """Every --endpoint, labels unique and unlike the local rows' names (`taken`); UsageError otherwise."""
    endpoints = [parse_endpoint(t, api_key, model) for t in texts]
    seen = set(taken)
    for e in endpoints:
        if e.label in seen:
            raise UsageError(
                f"two rows would be named '{e.label}'.", "Label each endpoint: --endpoint NAME=URL."
            )
        seen.add(e.label)
    return endpoints


# --------------------------------------------------------------------------- speculation counters


@dataclass(frozen=True)
class Reported:
    """Speculation counters as a server reported them over some requests (`counters`: each count None
    where it did not say) and where the figures came from (`sources`: "spec_decode", "timings",
    "meta_info", "/metrics vllm:", ...)."""

    counters: SpecCounters = field(default_factory=SpecCounters)
    sources: tuple[str, ...] = ()

    @property
    def reported(self) -> bool:
        return self.counters.reported

    def __add__(self, other: Reported) -> Reported:
        """Count by count sums (SpecCounters.__add__); the sources of both."""
        return Reported(self.counters + other.counters, _union(self.sources, other.sources))

    def fill(self, other: Reported) -> Reported:
        """These counts, with `other`'s where these are None (its source kept when it gave one)."""
        mine, theirs = self.counters, other.counters
        used = any(getattr(mine, f) is None and getattr(theirs, f) is not None for f in COUNTS)
        return Reported(mine.fill(theirs), _union(self.sources, other.sources if used else ()))

    def since(self, before: Reported) -> Reported:
        """The counters' growth from `before` (SpecCounters.since)."""
        return Reported(self.counters.since(before.counters), self.sources)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reported:
        """The inverse of to_dict."""
        positions = d.get("accepted_per_position")
        counters = SpecCounters(
            d.get("drafts"),
            d.get("draft_tokens"),
            d.get("accepted_tokens"),
            list(positions) if positions is not None else None,
        )
        return cls(counters, tuple(d.get("sources", ())))

    def to_dict(self) -> dict[str, Any]:
        """The counts under vLLM's names (as specli serve's spec_decode object has them), and the sources."""
        c = self.counters
        return {
            "drafts": c.drafts,
            "draft_tokens": c.drafted,
            "accepted_tokens": c.accepted,
            "accepted_per_position": list(c.position_accepted) if c.position_accepted is not None else None,
            "sources": list(self.sources),
        }


def _union(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*a, *b]))


def total(counts: Iterable[Reported]) -> Reported:
    """The sum of several requests' counts."""
    out = Reported()
    for c in counts:
        out = out + c
    return out


@dataclass(frozen=True)
class Scrape:
    """One read of /metrics: the spec_decode counters, and the engine's count of generated tokens (None
    without one), which tells when the server has counted a request (it may do so just after answering)."""

    counts: Reported = field(default_factory=Reported)
    generated: int | None = None


def scrape(text: str) -> Scrape:
    """A Prometheus text exposition -> Scrape. Counters of the first of PREFIXES that has spec_decode
    counters (else of any), every series of a counter summed (vLLM: one per engine), per-position
    series ordered by their `position` label. Empty when the text is not Prometheus."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, dict[str, float]] = {}
    positions: dict[str, dict[int, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                prefix, name = _counter_name(sample.name)
                if prefix is None:
                    continue
                if name == PER_POSITION and str(sample.labels.get("position", "")).isdigit():
                    at = positions.setdefault(prefix, {})
                    i = int(sample.labels["position"])
                    at[i] = at.get(i, 0.0) + sample.value
                elif name in COUNTERS or name in GENERATED:
                    sums = found.setdefault(prefix, {})
                    key = COUNTERS.get(name, "generated")
                    sums[key] = sums.get(key, 0.0) + sample.value
    except (ValueError, TypeError, KeyError, IndexError):  # not Prometheus text (an HTML page, ...)
        return Scrape()
    speculating = [p for p in PREFIXES if p in positions or set(found.get(p, {})) - {"generated"}]
    prefix = next(iter(speculating or [p for p in PREFIXES if p in found]), None)
    if prefix is None:
        return Scrape()
    sums, at = dict(found.get(prefix, {})), positions.get(prefix)
    generated = sums.pop("generated", None)
    counts = Reported()
    if speculating:
        per_position = None
        if at:
            per_position = [round(at.get(i, 0.0)) for i in range(min(at), max(at) + 1)]
        values = {f: round(v) for f, v in sums.items()}
        counters = SpecCounters(**values, position_accepted=per_position)
        counts = Reported(counters, (f"/metrics {prefix}",))
    return Scrape(counts, round(generated) if generated is not None else None)


def prometheus_counts(text: str) -> Reported:
    """The spec_decode counters of a Prometheus text exposition (see `scrape`); empty without any."""
    return scrape(text).counts


def _counter_name(sample: str) -> tuple[str | None, str]:
    """'vllm:spec_decode_num_drafts_total' -> ('vllm:', 'spec_decode_num_drafts'); (None, '') for a
    sample of another engine or a `_created` timestamp."""
    for prefix in PREFIXES:
        if sample.startswith(prefix) and not sample.endswith("_created"):
            return prefix, sample[len(prefix) :].removesuffix("_total")
    return None, ""


def response_counts(obj: dict[str, Any]) -> Reported:
    """What one response object (or streamed chunk) says of its request's speculation: specli serve's
    `spec_decode`, llama.cpp's `timings`, SGLang's `meta_info`. Empty when it says nothing."""
    for read in (_specli_counts, _llama_cpp_counts, _sglang_counts):
        counts = read(obj)
        if counts.reported:
            return counts
    return Reported()


def _int(value: Any) -> int | None:
    """A count as the JSON gave it (an int, or a float holding one); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return round(value)


def _specli_counts(obj: dict[str, Any]) -> Reported:
    spec = obj.get("spec_decode")
    if not isinstance(spec, dict):
        return Reported()
    per_position = spec.get("accepted_per_position")
    positions = None
    if isinstance(per_position, list) and all(_int(n) is not None for n in per_position):
        positions = [_int(n) or 0 for n in per_position]
    counters = SpecCounters(
        _int(spec.get("drafts")), _int(spec.get("draft_tokens")), _int(spec.get("accepted_tokens")), positions
    )
    return Reported(counters, ("spec_decode",))


def _llama_cpp_counts(obj: dict[str, Any]) -> Reported:
    """llama-server's timings: draft_n (draft tokens) and draft_n_accepted; no draft rounds. It leaves
    both out of a response that drafted nothing."""
    timings = obj.get("timings")
    if not isinstance(timings, dict) or "draft_n" not in timings:
        return Reported()
    drafted, accepted = _int(timings.get("draft_n")), _int(timings.get("draft_n_accepted"))
    return Reported(SpecCounters(drafted=drafted, accepted=accepted), ("timings",))


def _sglang_counts(obj: dict[str, Any]) -> Reported:
    """SGLang's meta_info: spec_verify_ct verify rounds (each drafted) and spec_accept_length, tokens
    per round with the bonus: accepted = (length − 1) × rounds. Draft tokens are not reported."""
    meta = obj.get("meta_info")
    if not isinstance(meta, dict):
        return Reported()
    rounds, length = _int(meta.get("spec_verify_ct")), meta.get("spec_accept_length")
    if not rounds or not isinstance(length, (int, float)):
        return Reported()
    return Reported(SpecCounters(drafts=rounds, accepted=round((length - 1) * rounds)), ("meta_info",))


# --------------------------------------------------------------------------- streamed replies


@dataclass
class Reply:
    """One streamed request. Times in seconds from the moment it was sent: the first text, each chunk
    that carried text, the end of the stream. Tokens from `usage`; `counts` what the response itself
    reported of its speculation."""

    text: str
    ttft_s: float | None
    elapsed_s: float
    chunk_times: list[float]
    prompt_tokens: int | None
    completion_tokens: int
    finish_reason: str | None
    counts: Reported

    @property
    def tpot_s(self) -> float | None:
        """Seconds per output token after the first (None below 2 tokens)."""
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.elapsed_s - self.ttft_s) / (self.completion_tokens - 1)

    @property
    def chunk_gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


def request_body(
    model: str, prompt: str, bench: BenchSettings, repeat: int, chat: bool = False
) -> dict[str, Any]:
    """The streamed request for one prompt: max_tokens and temperature as the bench's settings; when
    sampling, seed base_seed + repeat (as local runs) and top_k, top_p and min_p always, "off" values
    included: a server's own defaults would sample another distribution than specli's runs (llama-server
    truncates to top-k 40, top-p 0.95 and min-p 0.05 unless told, which keeps far more drafts); and
    ignore_eos when set."""
    s = bench.settings
    body: dict[str, Any] = {"model": model}
    body |= {"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt}
    body |= {
        "max_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if not s.greedy:
        body |= {"seed": bench.base_seed + repeat, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p}
    if s.ignore_eos:
        body["ignore_eos"] = True  # llama-server, vLLM and specli serve read it
    return body


def read_stream(
    lines: Iterable[str], start: float, clock: Callable[[], float] = time.perf_counter, chat: bool = False
) -> Reply:
    """A server-sent-events stream (`data: {...}` lines, `data: [DONE]`) -> Reply, each chunk timed by
    `clock` when it is read. EndpointError for a stream that is not one of OpenAI chunks, an error
    chunk, or no usage (the server ignored stream_options.include_usage: tokens cannot be counted)."""
    pieces: list[str] = []
    times: list[float] = []
    usage: dict[str, Any] | None = None
    finish: str | None = None
    counts = Reported()
    events = 0
    for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, comments, `event:` lines
        data = line[5:].strip()
        if data == "[DONE]":
            break
        now = clock() - start
        chunk = _chunk(data)
        events += 1
        piece, reason = _choice(chunk, chat)
        if piece:
            pieces.append(piece)
            times.append(now)
        finish = reason or finish
        usage = chunk["usage"] if isinstance(chunk.get("usage"), dict) else usage
        reported = response_counts(chunk)
        counts = reported if reported.reported else counts
    end = clock() - start
    if not events:
        raise EndpointError("the answer was not a stream of server-sent events ('data: {...}' lines)")
    tokens = _int((usage or {}).get("completion_tokens"))
    if tokens is None:
        raise EndpointError(
            "the stream carried no usage (the server ignores stream_options.include_usage): "
            "its tokens cannot be counted"
        )
    prompt_tokens = _int((usage or {}).get("prompt_tokens"))
    return Reply(
        "".join(pieces), times[0] if times else None, end, times, prompt_tokens, tokens, finish, counts
    )


def _chunk(data: str) -> dict[str, Any]:
    """One event's JSON object; EndpointError for anything else or an error object."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise EndpointError(f"a streamed event is not JSON: {_excerpt(data)}") from None
    if not isinstance(chunk, dict):
        raise EndpointError(f"a streamed event is not a JSON object: {_excerpt(data)}")
    if "error" in chunk:
        raise EndpointError(f"the server sent an error mid-stream: {_error_message(chunk)}")
    return chunk


def _choice(chunk: dict[str, Any], chat: bool) -> tuple[str, str | None]:
    """(text, finish_reason) of a chunk's first choice ('' and None without one)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", None
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
    return (text if isinstance(text, str) else ""), choice.get("finish_reason")


def _excerpt(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[:width] + "…")


def _error_message(obj: Any) -> str:
    """The message of an OpenAI-shaped error ({"error": {"message": ...}} or {"error": "..."})."""
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    detail = obj.get("detail") if isinstance(obj, dict) else None  # FastAPI's own errors
    return str(detail) if detail else _excerpt(json.dumps(obj))


# --------------------------------------------------------------------------- HTTP


class Client:
    """HTTP to one endpoint (httpx); every failure an EndpointError with one line."""

    def __init__(self, endpoint: Endpoint, timeout: float = DEFAULT_TIMEOUT) -> None:
        import httpx

        self.endpoint, self.timeout = endpoint, timeout
        self.http = httpx.Client(timeout=httpx.Timeout(timeout), headers=endpoint.headers())

    def close(self) -> None:
        self.http.close()

    def models(self) -> list[str]:
        """The ids of GET {url}/models, in the server's order."""
        what = f"GET {self.endpoint.url}/models"
        with _asking(what, self.timeout):
            response = self.http.get(f"{self.endpoint.url}/models")
        self._check(response, what)
        try:
            data = response.json()["data"]
            return [str(m["id"]) for m in data]
        except (ValueError, KeyError, TypeError):
            raise EndpointError(
                f"{what} is not an OpenAI-compatible answer ({_content_type(response)}: "
                f"{_excerpt(response.text)})"
            ) from None

    def metrics(self) -> Scrape | None:
        """GET {root}/metrics now; None when there is no such page."""
        try:
            response = self.http.get(f"{self.endpoint.root}/metrics")
        except Exception:  # noqa: BLE001  (no /metrics is an answer, not a failure)
            return None
        if response.status_code != 200:
            return None
        return scrape(response.text)

    def complete(self, body: dict[str, Any], chat: bool = False) -> Reply:
        """Send one streamed request and read its answer to the end."""
        route = "chat/completions" if chat else "completions"
        what = f"POST {self.endpoint.url}/{route}"
        with _asking(what, self.timeout):
            start = time.perf_counter()
            with self.http.stream("POST", f"{self.endpoint.url}/{route}", json=body) as response:
                if response.status_code != 200:
                    response.read()
                    self._check(response, what)
                try:
                    return read_stream(response.iter_lines(), start, chat=chat)
                except EndpointError as e:
                    raise EndpointError(f"{what}: {e}") from None

    def _check(self, response: httpx.Response, what: str) -> None:
        """EndpointError for a status other than 200: a refused key, or the server's message."""
        status = response.status_code
        if status == 200:
            return
        if status in (401, 403):
            fix = (
                "the API key given was refused: check --api-key (or SPECLI_API_KEY)"
                if self.endpoint.api_key
                else "the server wants an API key: give --api-key KEY (or set SPECLI_API_KEY)"
            )
            raise EndpointError(f"{what} answered {status} {response.reason_phrase}: {fix}")
        try:
            message = _error_message(response.json())
        except ValueError:
            message = f"{_content_type(response)}: {_excerpt(response.text)}"
        raise EndpointError(f"{what} answered {status} {response.reason_phrase}: {message}")


@contextmanager
def _asking(what: str, timeout: float) -> Iterator[None]:
    """httpx's failures inside the block as EndpointError: refused, timed out, broken off."""
    import httpx

    try:
        yield
    except httpx.TimeoutException:
        raise EndpointError(f"{what}: no answer within {timeout:g} s") from None
    except httpx.ConnectError as e:
        raise EndpointError(f"{what}: cannot connect ({_reason(e)})") from None
    except (httpx.HTTPError, httpx.StreamError) as e:
        raise EndpointError(f"{what}: {type(e).__name__}: {_reason(e)}") from None


def _reason(error: BaseException) -> str:
    """'Connection refused' from '[Errno 111] Connection refused'."""
    text = str(error) or type(error).__name__
    return text.split("] ", 1)[1] if text.startswith("[Errno") and "] " in text else text


def _content_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "no content type").split(";")[0]


# --------------------------------------------------------------------------- runs


@dataclass
class EndpointRun:
    """One measured request: the prompt, the reply, and the growth of /metrics' counters around it."""

    label: str
    prompt_id: str
    category: str
    repeat: int
    reply: Reply
    metrics: Reported = field(default_factory=Reported)

    @property
    def counts(self) -> Reported:
        """The response's own figures, /metrics' where it has none."""
        return self.reply.counts.fill(self.metrics)

    def to_dict(self) -> dict[str, Any]:
        """A JSON "endpoint_runs" row (flat; the output text kept, not checked: engines differ)."""
        r = self.reply
        return {
            "endpoint": self.label,
            "prompt_id": self.prompt_id,
            "category": self.category,
            "repeat": self.repeat,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "ttft_s": r.ttft_s,
            "elapsed_s": r.elapsed_s,
            "chunks": len(r.chunk_times),
            "finish_reason": r.finish_reason,
            "speculation": self.counts.to_dict(),
            "speculation_response": r.counts.to_dict(),  # each source apart, to check one by the other
            "speculation_metrics": self.metrics.to_dict(),
            "text": r.text,
        }


class EndpointRunner:
    """One endpoint through a bench (specli.bench.run.Remote): `start` asks for its models and its /metrics,
    `run` sends one prompt, `run_concurrently` all prompts N at a time, each with the `bench` settings
    (set before the first run) and as a chat message when `chat`. The first failure sets `error`
    (one line, told to `on_error`) and the endpoint does nothing more."""

    def __init__(
        self,
        endpoint: Endpoint,
        bench: BenchSettings | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        chat: bool = False,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.endpoint, self.bench, self.timeout, self.chat = endpoint, bench, timeout, chat
        self.label = endpoint.label
        self.on_error = on_error
        self.error: str | None = None
        self.model = endpoint.model
        self.has_metrics = False
        self.settles = True  # its /metrics catches up with each answered request (see _settled)
        self.runs: list[EndpointRun] = []
        self.stage_metrics: Reported | None = None  # concurrency > 1: the growth over the whole stage
        self.wall_s = 0.0  # concurrency > 1: wall time of the measured stages
        self.concurrency = 1
        self.client: Client | None = None

    def fail(self, error: Exception | str) -> None:
        if self.error is None:
            self.error = f"endpoint {self.label}: {error}"  # the error names the URL it asked
            if self.on_error:
                self.on_error(self.error)

    def start(self) -> bool:
        """Reach the server: its first model unless one was named, and whether it has /metrics."""
        try:
            self.client = Client(self.endpoint, self.timeout)
            models = self.client.models()
            if self.model is None:
                if not models:
                    raise EndpointError(f"GET {self.endpoint.url}/models lists no model: give --model NAME")
                self.model = models[0]
            self.has_metrics = self.client.metrics() is not None
        except EndpointError as e:
            self.fail(e)
            return False
        return True

    def _scrape(self) -> Scrape:
        read = self.client.metrics() if self.has_metrics and self.client else None
        return read or Scrape()

    def _settled(self, before: Scrape, tokens: int) -> Scrape:
        """/metrics once the server has counted the `tokens` generated since `before` (servers update
        their counters just after answering), waiting up to SETTLE_S; a server whose counter never
        catches up is read at once from then on."""
        deadline = time.perf_counter() + SETTLE_S
        while True:
            after = self._scrape()
            if not self.settles or after.generated is None or before.generated is None:
                return after
            if after.generated - before.generated >= tokens:
                return after
            if time.perf_counter() > deadline:
                self.settles = False
                return after
            time.sleep(0.005)

    def _send(self, prompt: BenchPrompt, repeat: int) -> Reply:
        assert self.client is not None and self.model is not None and self.bench is not None
        body = request_body(self.model, prompt.text, self.bench, repeat, self.chat)
        return self.client.complete(body, self.chat)

    def run(self, prompt: BenchPrompt, repeat: int, warm_up: bool = False) -> None:
        """One request, the counters' growth around it kept with it (a warm-up is sent, not kept)."""
        if self.error is not None:
            return
        try:
            before = self._scrape()
            reply = self._send(prompt, repeat)
            grown = self._settled(before, reply.completion_tokens).counts.since(before.counts)
        except EndpointError as e:
            self.fail(e)
            return
        if not warm_up:
            self.runs.append(EndpointRun(self.label, prompt.id, prompt.category, repeat, reply, grown))

    def run_concurrently(
        self, prompts: Sequence[BenchPrompt], concurrency: int, progress: Progress | None = None
    ) -> None:
        """Warm-up runs one at a time, then each repeat sends every prompt, `concurrency` in flight at
        once; /metrics is read around each repeat (no single request's share can be told apart)."""
        self.concurrency = concurrency
        bench = self.bench
        assert bench is not None
        if progress and bench.warmup:
            progress.stage(f"{self.label}: warm-up (not counted)", bench.warmup)
        for _ in range(bench.warmup):
            self.run(prompts[0], 0, warm_up=True)
            if progress:
                progress.advance()
        if progress:
            progress.stage(
                f"{self.label}: {count(len(prompts), 'prompt')} × {count(bench.repeats, 'repeat')}, "
                f"{concurrency} at a time",
                len(prompts) * bench.repeats,
            )
        grown = Reported()
        for repeat in range(bench.repeats):
            if self.error is not None:
                return
            before, done = self._scrape(), len(self.runs)
            start = time.perf_counter()
            self._repeat_concurrently(prompts, repeat, concurrency, progress)
            self.wall_s += time.perf_counter() - start
            tokens = sum(r.reply.completion_tokens for r in self.runs[done:])
            grown = grown + self._settled(before, tokens).counts.since(before.counts)
        self.stage_metrics = grown if grown.reported else None

    def _repeat_concurrently(
        self, prompts: Sequence[BenchPrompt], repeat: int, concurrency: int, progress: Progress | None
    ) -> None:
        stop = threading.Event()  # a failure: requests not yet sent are not sent

        def send(prompt: BenchPrompt) -> Reply | None:
            return None if stop.is_set() else self._send(prompt, repeat)

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures = {pool.submit(send, p): p for p in prompts}
            for future in as_completed(futures):
                prompt = futures[future]
                try:
                    reply = future.result()
                except EndpointError as e:
                    stop.set()
                    self.fail(e)
                    reply = None
                if reply is not None and self.error is None:
                    self.runs.append(EndpointRun(self.label, prompt.id, prompt.category, repeat, reply))
                if progress:
                    progress.advance()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


# --------------------------------------------------------------------------- summaries


def _median_runs(runs: list[EndpointRun]) -> list[EndpointRun]:
    """Each prompt's run of median elapsed time (the lower median of an even count), as local rows."""
    by_prompt: dict[str, list[EndpointRun]] = {}
    for r in runs:
        by_prompt.setdefault(r.prompt_id, []).append(r)
    out = []
    for same in by_prompt.values():
        ordered = sorted(same, key=lambda r: r.reply.elapsed_s)
        out.append(ordered[(len(ordered) - 1) // 2])
    return out


def endpoint_metrics(
    runner: EndpointRunner, runs: list[EndpointRun], overall: bool = False
) -> dict[str, Any]:
    """One summary row for `runs` of an endpoint (one category, or all of them: `overall`). Speed from
    each prompt's median run, as local rows; latencies and speculation over every run. Speculation
    fields are None where the server did not report them (`speculation` then says so; else where the
    figures came from). At concurrency > 1 the overall row also has /metrics' growth over the whole
    stages (what the responses lack) and output_throughput, every token over the stages' wall time."""
    stage = runner.stage_metrics if overall else None
    medians = _median_runs(runs)
    tokens = sum(r.reply.completion_tokens for r in medians)
    elapsed = sum(r.reply.elapsed_s for r in medians)
    counts = total(r.counts for r in runs)
    if stage is not None:
        counts = counts.fill(stage)
    row: dict[str, Any] = {
        "kind": "endpoint",
        "strategy": None,  # the server's own business
        "endpoint": runner.endpoint.url,
        "model": runner.model,
        "prompts": len(medians),
        "requests": len(runs),
        "tokens": tokens,
        "prompt_tokens": sum(r.reply.prompt_tokens or 0 for r in medians),
        "elapsed_s": elapsed,
        "tokens_per_second": tokens / elapsed if elapsed else 0.0,
        "speedup": None,
        "concurrency": runner.concurrency,
        **latency_metrics(
            [r.reply.ttft_s for r in runs if r.reply.ttft_s is not None],
            [t for r in runs if (t := r.reply.tpot_s) is not None],
            [g for r in runs for g in r.reply.chunk_gaps],
        ),
        **speculation_metrics(counts.counters),
        "speculation": ", ".join(counts.sources) if counts.reported else NOT_REPORTED,
    }
    if overall and runner.concurrency > 1:
        every = sum(r.reply.completion_tokens for r in runs)
        row["output_throughput"] = every / runner.wall_s if runner.wall_s else None
    return row


def served_report(runners: Sequence[EndpointRunner]) -> dict[str, Any]:
    """The servers' part of a bench report (specli.bench.run.report(served=...)): "summary" {category or
    "overall": {label: row}}, "endpoints" {label: url, model, /metrics or not, concurrency, error},
    "runs" (every measured request) and "errors" (one line per endpoint that failed; it has no row)."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for runner in runners:
        if runner.error is not None or not runner.runs:
            continue
        by_category: dict[str, list[EndpointRun]] = {}
        for r in runner.runs:
            by_category.setdefault(r.category, []).append(r)
        for category, runs in by_category.items():
            summary.setdefault(category, {})[runner.label] = endpoint_metrics(runner, runs)
        summary.setdefault("overall", {})[runner.label] = endpoint_metrics(runner, runner.runs, overall=True)
    endpoints = {
        r.label: {
            "url": r.endpoint.url,
            "model": r.model,
            "metrics": r.has_metrics,
            "concurrency": r.concurrency,
            "error": r.error,
        }
        for r in runners
    }
    return {
        "summary": summary,
        "endpoints": endpoints,
        "runs": [run.to_dict() for r in runners if r.error is None for run in r.runs],
        "errors": [r.error for r in runners if r.error is not None],
    }


def client_environment() -> dict[str, Any]:
    """The environment of a bench that loaded no model (servers only)."""
    import platform

    from specli.version import __version__

    return {"specli": __version__, "python": platform.python_version(), "device": None, "local": False}
