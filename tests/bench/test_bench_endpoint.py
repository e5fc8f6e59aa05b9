"""`specli bench --endpoint`: the parsers of what servers report (Prometheus texts of vLLM, llama.cpp and
specli serve; llama.cpp timings, SGLang meta_info and specli's spec_decode in responses), counter
differencing, the streamed reply's clock arithmetic, and whole benches against a tiny fake server on
127.0.0.1 (an OpenAI-compatible http.server in a thread): a refused key, a page that is not the API, a
silent server, a closed port; and against `specli serve` itself when it is there."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specli.bench import endpoint as e
from specli.bench import run as b
from specli.cli import app
from specli.engine.counters import SpecCounters
from specli.errors import UsageError
from specli.settings import resolve_settings

pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

# --------------------------------------------------------------------------- metrics texts
# Formats as the servers expose them: vLLM exposes one series per engine with `_total`, and the
# per-position counter labelled `position`; llama.cpp names its counters like vLLM's under `llamacpp:`
# (its TYPE lines carry `_total`); specli serve uses the `specli:` prefix.

VLLM = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 4.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 16.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 25.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 9.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 999.0
"""

LLAMA_CPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# HELP llamacpp:spec_decode_num_drafts_total Total speculative drafts.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 30
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 1000
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 630
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""

SPECLI = """\
# HELP specli:spec_decode_num_drafts_total Rounds that drafted.
# TYPE specli:spec_decode_num_drafts counter
specli:spec_decode_num_drafts_total 6.0
specli:spec_decode_num_drafts_created 1.7e+09
# TYPE specli:spec_decode_num_draft_tokens counter
specli:spec_decode_num_draft_tokens_total 24.0
# TYPE specli:spec_decode_num_accepted_tokens counter
specli:spec_decode_num_accepted_tokens_total 17.0
# TYPE specli:spec_decode_num_accepted_tokens_per_pos counter
specli:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6.0
specli:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 5.0
specli:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 4.0
specli:spec_decode_num_accepted_tokens_per_pos_total{position="4"} 2.0
"""


def test_vllm_metrics_sum_every_engine_and_order_positions():
    """Bug caught: reading one engine's series only (vLLM has one per engine), `_created` samples
    added as counts, or positions in the order the text lists them."""
    r = e.prometheus_counts(VLLM)
    c = r.counters
    assert (c.drafts, c.drafted, c.accepted) == (14, 56, 34)
    assert c.position_accepted == [13, 10, 7, 4]
    assert r.sources == ("/metrics vllm:",)


def test_llama_cpp_and_specli_metrics():
    c = e.prometheus_counts(LLAMA_CPP).counters
    assert (c.drafts, c.drafted, c.accepted, c.position_accepted) == (30, 1000, 630, None)
    s = e.prometheus_counts(SPECLI).counters  # TYPE lines without _total, positions counted from 1
    assert (s.drafts, s.drafted, s.accepted) == (6, 24, 17)
    assert s.position_accepted == [6, 5, 4, 2]


def test_metrics_without_speculation_or_not_prometheus_report_nothing():
    plain = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    assert not e.prometheus_counts(plain).reported
    assert not e.prometheus_counts("<html><body>Not found</body></html>").reported


def test_counter_growth_between_two_reads():
    """The bench reads /metrics before and after a request: growth per counter; a series that appears
    only after the request (vLLM creates per-position series lazily) counts from 0; a counter that went
    down (the server restarted) is unknown, never negative."""
    before = e.prometheus_counts(VLLM)
    after = e.prometheus_counts(
        VLLM.replace('engine="1",model_name="m"} 4.0', 'engine="1",model_name="m"} 7.0')
        .replace('engine="1",model_name="m"} 16.0', 'engine="1",model_name="m"} 28.0')
        .replace('engine="1",model_name="m"} 9.0', 'engine="1",model_name="m"} 17.0')
        .replace('position="2"} 2.0', 'position="2"} 4.0')
        + 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="3"} 1.0\n'
    )
    grown = after.since(before).counters
    assert (grown.drafts, grown.drafted, grown.accepted) == (3, 12, 8)
    assert grown.position_accepted == [0, 0, 2, 1]
    assert SpecCounters(drafts=2).since(SpecCounters(drafts=5)).drafts is None
    first = SpecCounters(drafts=3, position_accepted=[2, 1]).since(SpecCounters())
    assert (first.drafts, first.position_accepted) == (3, [2, 1])


def test_a_counter_that_did_not_grow_is_zero_and_only_an_absent_one_is_unknown():
    """Issue 28 #36. Bug caught: a counter present before and after a request but unchanged (the request
    drafted nothing) taken as absent (None: "not reported") instead of 0."""
    seen = e.prometheus_counts(VLLM)
    still = seen.since(seen)
    c = still.counters
    assert (c.drafts, c.drafted, c.accepted) == (0, 0, 0)
    assert c.position_accepted == [0, 0, 0, 0] and still.reported
    absent = e.Reported().since(e.Reported())  # no counter either time: unknown, not 0
    assert absent == e.Reported() and not absent.reported
    gone = SpecCounters(accepted=3).since(SpecCounters(drafts=2, accepted=3))
    assert (gone.drafts, gone.accepted) == (None, 0)  # gone since: unknown; still there: 0


def test_counts_add_and_fill():
    a = e.Reported(SpecCounters(drafts=2, drafted=8, position_accepted=[2, 1]), ("spec_decode",))
    b_ = e.Reported(SpecCounters(drafts=1, accepted=3, position_accepted=[1, 1, 1]))
    s = (a + b_).counters
    assert (s.drafts, s.drafted, s.accepted, s.position_accepted) == (3, 8, 3, [3, 2, 1])
    assert a.counters.position_accepted == [2, 1]  # the sum is a new counter; its operands are unchanged
    timings = e.Reported(SpecCounters(drafted=8, accepted=5), ("timings",))
    metrics = e.Reported(SpecCounters(drafts=9, drafted=99, accepted=99), ("/metrics llamacpp:",))
    filled = timings.fill(metrics)  # the response's own figures first, /metrics' for what it lacks
    assert (filled.counters.drafts, filled.counters.drafted, filled.counters.accepted) == (9, 8, 5)
    assert filled.sources == ("timings", "/metrics llamacpp:")
    assert timings.fill(e.Reported()).sources == ("timings",)


# --------------------------------------------------------------------------- per-response figures


def test_llama_cpp_timings_in_the_last_chunk():
    chunk = {
        "choices": [],
        "usage": {"completion_tokens": 665, "prompt_tokens": 808},
        "timings": {"prompt_n": 4, "predicted_n": 665, "draft_n": 604, "draft_n_accepted": 515},
    }
    c = e.response_counts(chunk).counters
    assert (c.drafts, c.drafted, c.accepted) == (None, 604, 515)
    assert not e.response_counts({"timings": {"prompt_n": 4, "predicted_n": 9}}).reported  # no drafting


def test_sglang_meta_info():
    """spec_accept_length counts the bonus token: accepted drafts = (length − 1) × verify rounds."""
    c = e.response_counts(
        {"meta_info": {"completion_tokens": 12, "spec_verify_ct": 4, "spec_accept_length": 3.0}}
    ).counters
    assert (c.drafts, c.accepted, c.drafted) == (4, 8, None)
    m = b.speculation_metrics(c)
    assert m["acceptance_length"] == 3.0 and m["acceptance_rate"] is None
    assert not e.response_counts({"meta_info": {"spec_verify_ct": 0}}).reported


def test_specli_spec_decode_object():
    spec = {
        "drafts": 5, "draft_tokens": 20, "accepted_tokens": 13, "acceptance_rate": 0.65,
        "mean_acceptance_length": 3.4, "strategy": "draft", "num_draft_tokens": 4,
        "accepted_per_position": [5, 4, 3, 1],
    }  # fmt: skip
    c = e.response_counts({"choices": [], "spec_decode": spec}).counters
    assert (c.drafts, c.drafted, c.accepted, c.position_accepted) == (5, 20, 13, [5, 4, 3, 1])


def test_speculation_figures_follow_vllm():
    m = b.speculation_metrics(
        SpecCounters(drafts=14, drafted=56, accepted=34, position_accepted=[13, 10, 7, 4])
    )
    assert m["acceptance_rate"] == pytest.approx(34 / 56)
    assert m["acceptance_length"] == pytest.approx(1 + 34 / 14)
    assert m["per_position_acceptance_rate"] == pytest.approx([13 / 14, 10 / 14, 7 / 14, 4 / 14])
    none = b.speculation_metrics(SpecCounters())
    assert none["acceptance_rate"] is None and none["acceptance_length"] is None


# --------------------------------------------------------------------------- streams


def sse(*chunks: dict, done: bool = True) -> list[str]:
    lines = []
    for c in chunks:
        lines += [f"data: {json.dumps(c)}", ""]
    return lines + (["data: [DONE]", ""] if done else [])


def text_chunk(text: str, finish: str | None = None) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def test_stream_times_first_token_chunks_and_tokens_from_usage():
    """Chunks read at t = 0.5, 0.6, 0.9, 1.0 (the clock starts at 0.2): TTFT is the first chunk with
    text (an empty role chunk does not count), TPOT (end − first token) / (tokens − 1), ITL the gaps."""
    lines = [": keep-alive", *sse(
        text_chunk(""), text_chunk("Hello"), text_chunk(" wor"),
        {"choices": [{"index": 0, "text": "ld", "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 6}},
    )]  # fmt: skip
    ticks = iter([0.5, 0.6, 0.9, 1.0, 1.05, 1.1])
    reply = e.read_stream(lines, start=0.2, clock=lambda: next(ticks))
    assert reply.text == "Hello world" and reply.finish_reason == "length"
    assert (reply.prompt_tokens, reply.completion_tokens) == (3, 6)
    assert reply.ttft_s == pytest.approx(0.4)
    assert reply.chunk_times == pytest.approx([0.4, 0.7, 0.8])
    assert reply.chunk_gaps == pytest.approx([0.3, 0.1])
    assert reply.elapsed_s == pytest.approx(0.9)
    assert reply.tpot_s == pytest.approx((0.9 - 0.4) / 5)


def test_chat_stream_reads_deltas():
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    reply = e.read_stream(sse({"choices": [{"delta": {"role": "assistant"}}]}, chunk, usage), 0.0, chat=True)
    assert reply.text == "Hi"


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["<html>", "<body>hello</body>"], "not a stream of server-sent events"),
        (["data: not json"], "not JSON"),
        (sse({"error": {"message": "model overloaded", "code": 503}}), "model overloaded"),
        (sse(text_chunk("a")), "no usage"),
    ],
)
def test_streams_that_cannot_be_measured(lines, words):
    with pytest.raises(e.EndpointError, match=words):
        e.read_stream(lines, 0.0)


def test_request_body():
    greedy = b.BenchSettings(resolve_settings(max_new_tokens=7, temperature=0, seed=5))
    body = e.request_body("m", "def f():", greedy, repeat=1)
    assert body == {
        "model": "m", "prompt": "def f():", "max_tokens": 7, "temperature": 0.0, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    sampling = b.BenchSettings(resolve_settings(temperature=0.7, top_k=20, top_p=0.9, seed=5))
    body = e.request_body("m", "x", sampling, repeat=2, chat=True)
    assert body["messages"] == [{"role": "user", "content": "x"}] and "prompt" not in body
    assert (body["seed"], body["top_k"], body["top_p"]) == (7, 20, 0.9)  # seed + repeat, as local runs
    # "off" is said, not left to the server's defaults (llama-server's: top-k 40, top-p 0.95, min-p 0.05)
    plain = e.request_body("m", "x", b.BenchSettings(resolve_settings(temperature=0.7, seed=0)), repeat=0)
    assert (plain["top_k"], plain["top_p"], plain["min_p"]) == (0, 1.0, 0.0)
    assert "ignore_eos" not in plain and "ignore_eos" not in body
    told = b.BenchSettings(resolve_settings(temperature=0, ignore_eos=True))
    assert e.request_body("m", "x", told, repeat=0)["ignore_eos"] is True


# --------------------------------------------------------------------------- endpoints


def test_parse_endpoint():
    x = e.parse_endpoint("http://127.0.0.1:8080/v1/")
    assert (x.url, x.label, x.root) == ("http://127.0.0.1:8080/v1", "127.0.0.1:8080", "http://127.0.0.1:8080")
    assert e.parse_endpoint("http://localhost:8080").url == "http://localhost:8080/v1"  # no path: /v1
    named = e.parse_endpoint("llama=http://h:1/v1?x=1", api_key="k")
    assert (named.label, named.url, named.headers()) == (
        "llama",
        "http://h:1/v1",
        {"Authorization": "Bearer k"},
    )
    assert e.parse_endpoint("http://h:1/v1?x=1").label == "h:1"  # '=' after :// is the URL's
    for bad in ("127.0.0.1:8080", "ftp://h/v1", "name=", "http://"):
        with pytest.raises(UsageError):
            e.parse_endpoint(bad)
    with pytest.raises(UsageError, match="NAME=URL"):
        e.parse_endpoints(["http://h:1/v1", "http://h:1/v1"])
    with pytest.raises(UsageError, match="'draft'"):
        e.parse_endpoints(["draft=http://h:1/v1"], taken=["none", "draft"])


# --------------------------------------------------------------------------- a fake server


@dataclass
class Fake:
    """How the fake server answers. flavour: what it reports of speculation ("vllm": counters in
    /metrics split over two engines; "llama.cpp": timings in the last chunk; "sglang": meta_info;
    "plain": nothing). Every completion drafts 2 rounds of 4 tokens, 5 of them accepted (3 then 2)."""

    flavour: str = "vllm"
    status: int = 200  # of every route but /metrics
    models_body: bytes | None = None  # replaces the /v1/models JSON
    hang: threading.Event | None = None  # completions wait for it (a silent server)
    usage: bool = True
    lag: bool = True  # count a request only once /metrics was read after it (servers count late)
    flat: bool = False  # "vllm": its counters never move (every request drafted nothing)
    completions: int = 0
    metrics_read: threading.Event = field(default_factory=threading.Event)
    bodies: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)

    def metrics(self) -> str:
        if self.flavour != "vllm":
            return "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
        done = 3 if self.flat else self.completions  # flat: as after 3 requests, ever after
        per_engine = [(done + 1 - i) // 2 for i in (0, 1)]  # requests alternate engines
        lines = []
        for name, each in (("drafts", 2), ("draft_tokens", 8), ("accepted_tokens", 5), ("generation", 6)):
            for engine, n in enumerate(per_engine):
                counter = "generation_tokens" if name == "generation" else f"spec_decode_num_{name}"
                if name == "generation" and self.flat:  # the tokens it generated are still counted
                    n = self.completions
                lines.append(f'vllm:{counter}_total{{engine="{engine}"}} {n * each}')
        for position, each in enumerate((2, 2, 1, 0)):
            for engine, n in enumerate(per_engine):
                labels = f'engine="{engine}",position="{position}"'
                lines.append(f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}} {n * each}")
        return "\n".join(lines) + "\n"

    def chunks(self, prompt: str) -> list[dict]:
        words = ["Fake", " text", " for", " you"]
        out = [text_chunk(w) for w in words]
        last: dict = {"choices": []}
        if self.usage:
            last["usage"] = {"prompt_tokens": len(prompt.split()), "completion_tokens": 6}
        if self.flavour == "llama.cpp":
            last["timings"] = {"predicted_n": 6, "draft_n": 8, "draft_n_accepted": 5}
        if self.flavour == "sglang":
            last["meta_info"] = {"completion_tokens": 6, "spec_verify_ct": 2, "spec_accept_length": 3.5}
        return [*out, last]


def handler_for(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self.send(200, fake.metrics().encode(), "text/plain; version=0.0.4")
                return fake.metrics_read.set()
            if fake.status != 200:
                return self.send(fake.status, b'{"error": {"message": "Invalid API key", "code": 401}}')
            if self.path == "/v1/models":
                body = fake.models_body or b'{"object": "list", "data": [{"id": "fake-model"}]}'
                return self.send(200, body, "text/html" if fake.models_body else "application/json")
            self.send(404, b'{"error": {"message": "no such route"}}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.bodies.append(body)
            fake.headers.append(dict(self.headers))
            if fake.hang is not None:
                fake.hang.wait(30)
                return self.send(500, b"{}")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in fake.chunks(body.get("prompt", "")):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            if fake.lag:  # as specli serve and vLLM: the counters move just after the answer
                fake.metrics_read.clear()
                fake.metrics_read.wait(5)
            fake.completions += 1
            self.close_connection = True

    return Handler


@pytest.fixture
def serve_fake() -> Iterator:
    """serve_fake(Fake(...)) -> its base URL; every server stops at the test's end."""
    servers = []

    def start(fake: Fake) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, fake))
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server, fake in servers:
        if fake.hang is not None:
            fake.hang.set()
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prompts_file(tmp_path) -> Path:
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"id": "a", "category": "completion", "prompt": "def add(a, b):"},
        {"id": "b", "category": "completion", "prompt": "class Stack:"},
        {"id": "c", "category": "editing", "prompt": "x = [1, 2, 3]"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bench(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["bench", *args])
    return result.exit_code, result.stdout, result.stderr


def test_endpoint_only_bench_reads_speculation_from_metrics(serve_fake, prompts_file, tmp_path):
    """3 prompts × 2 repeats after 2 warm-up requests: 6 measured requests of 2 drafts, 8 draft tokens
    and 5 accepted each. Bugs caught: warm-up requests counted, one engine's series read, counters
    taken as totals instead of differences, a category's figures mixed with another's, /metrics read
    before the server counted the request it just answered (the fake counts one only after a read)."""
    fake = Fake()
    url = serve_fake(fake)
    out = tmp_path / "run.json"
    code, stdout, stderr = bench(
        "--endpoint", url, "--prompts", str(prompts_file), "--repeats", "2", "--warmup", "2",
        "--max-new-tokens", "6", "--json", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    assert fake.completions == 8
    data = json.loads(out.read_text())
    label = url.removeprefix("http://").removesuffix("/v1")
    assert list(data["summary"]) == ["completion", "editing", "overall"]
    row = data["summary"]["overall"][label]
    assert (row["requests"], row["prompts"], row["tokens"]) == (6, 3, 18)
    assert (row["drafts"], row["draft_tokens"], row["accepted_tokens"]) == (12, 48, 30)
    assert row["acceptance_rate"] == pytest.approx(30 / 48)
    assert row["acceptance_length"] == pytest.approx(1 + 30 / 12)
    assert row["accepted_per_position"] == [12, 12, 6, 0]
    assert row["per_position_acceptance_rate"] == pytest.approx([1.0, 1.0, 0.5, 0.0])
    assert row["speculation"] == "/metrics vllm:" and row["model"] == "fake-model"
    assert row["mean_ttft_ms"] > 0 and row["tokens_per_second"] > 0
    editing = data["summary"]["editing"][label]
    assert (editing["requests"], editing["drafts"], editing["accepted_tokens"]) == (2, 4, 10)
    assert data["errors"] == [] and data["runs"] == []
    runs = data["endpoint_runs"]
    assert len(runs) == 6 and {r["text"] for r in runs} == {"Fake text for you"}
    assert data["endpoints"][label]["model"] == "fake-model"
    sent = fake.bodies[-1]
    assert (
        sent["model"] == "fake-model" and sent["stream"] and sent["stream_options"] == {"include_usage": True}
    )
    assert sent["max_tokens"] == 6 and sent["temperature"] == 0.0
    assert "acc. length" in stdout and "TTFT ms" in stdout and "3.50" in stdout  # 1 + 30/12


@pytest.mark.parametrize(
    ("flavour", "drafts", "draft_tokens", "accepted"),
    [("llama.cpp", None, 8, 5), ("sglang", 2, None, 5), ("plain", None, None, None)],
)
def test_speculation_from_responses_or_not_reported(serve_fake, prompts_file, tmp_path, flavour, drafts,
                                                    draft_tokens, accepted):  # fmt: skip
    out = tmp_path / "run.json"
    url = serve_fake(Fake(flavour=flavour))
    code, stdout, stderr = bench(
        "--endpoint", f"x={url}", "--prompts", str(prompts_file), "--limit", "1", "--category", "editing",
        "--warmup", "0", "--json", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    row = json.loads(out.read_text())["summary"]["overall"]["x"]
    assert (row["drafts"], row["draft_tokens"], row["accepted_tokens"]) == (drafts, draft_tokens, accepted)
    if flavour == "plain":
        assert row["speculation"] == "not reported by this server"
        assert "not reported by this server" in stdout
    else:
        assert "not reported" not in stdout


def test_counters_that_never_move_give_zero_not_not_reported(serve_fake, prompts_file, tmp_path):
    """Issue 28 #36, the whole path: a server whose spec_decode counters stay put (nothing drafted) gives
    rows of 0 drafts, 0 draft tokens, 0 accepted, from /metrics, and the table prints 0, never "not
    reported". Bug caught: a zero growth read as an absent counter."""
    out = tmp_path / "run.json"
    url = serve_fake(Fake(flat=True))
    code, stdout, stderr = bench(
        "--endpoint", f"x={url}", "--prompts", str(prompts_file), "--warmup", "1", "--json", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(out.read_text())
    for category in ("completion", "editing", "overall"):
        row = data["summary"][category]["x"]
        assert (row["drafts"], row["draft_tokens"], row["accepted_tokens"]) == (0, 0, 0), category
        assert row["accepted_per_position"] == [0, 0, 0, 0] and row["speculation"] == "/metrics vllm:"
        assert row["acceptance_rate"] is None and row["acceptance_length"] is None  # 0 / 0: no figure
    assert all(r["speculation_metrics"]["drafts"] == 0 for r in data["endpoint_runs"])
    assert "not reported" not in stdout


def test_a_refused_key_is_one_line_exit_1_and_no_report(serve_fake, prompts_file, tmp_path):
    """Issue 28 #22. Bugs caught: the 401 printed twice (stderr, then the report), an empty report's
    footer printed after it, exit 0."""
    url = serve_fake(Fake(status=401))
    out = tmp_path / "run.json"
    code, stdout, stderr = bench(
        "--endpoint", url, "--api-key", "wrong", "--prompts", str(prompts_file), "--json", str(out)
    )
    assert code == 1
    lines = [line for line in stderr.replace("\n", " ").split("error:") if line.strip()]
    assert len(lines) == 1 and "401" in lines[0] and "API key given was refused" in lines[0], stderr
    assert stderr.startswith("error: endpoint ") and stderr.count("answered 401") == 1  # a port may hold 401
    assert stdout == "" and not out.exists()  # no report: nothing ran


def test_failing_endpoints_are_one_line_each_and_the_rest_runs(serve_fake, prompts_file, tmp_path):
    """A refused key, a page that is not the API, a server that never answers a completion, and a
    closed port: one line each on stderr and in the report's errors, exit 1, and the healthy endpoint's
    row is still there."""
    good = serve_fake(Fake())
    locked = serve_fake(Fake(status=401))
    html = serve_fake(Fake(models_body=b"<html><body>Welcome to nginx</body></html>"))
    silent = serve_fake(Fake(hang=threading.Event()))
    refused = f"http://127.0.0.1:{closed_port()}/v1"
    out = tmp_path / "run.json"
    code, stdout, stderr = bench(
        "--endpoint", f"good={good}", "--endpoint", f"locked={locked}", "--endpoint", f"html={html}",
        "--endpoint", f"silent={silent}", "--endpoint", f"refused={refused}", "--timeout", "0.5",
        "--prompts", str(prompts_file), "--limit", "1", "--warmup", "0", "--json", str(out),
    )  # fmt: skip
    assert code == 1
    data = json.loads(out.read_text())
    assert list(data["summary"]["overall"]) == ["good"]
    errors = data["errors"]
    assert len(errors) == 4 and all("\n" not in line for line in errors)
    by_label = {line.split()[1].rstrip(":"): line for line in errors}
    assert "401" in by_label["locked"] and "--api-key" in by_label["locked"]
    assert "not an OpenAI-compatible answer" in by_label["html"] and "text/html" in by_label["html"]
    assert "no answer within 0.5 s" in by_label["silent"]
    assert "cannot connect" in by_label["refused"]
    for line in errors:
        assert f"error: {line}" in stderr.replace("\n", " ") or f"error: {line}" in stderr
    assert data["endpoints"]["silent"]["error"] == by_label["silent"]
    flat = " ".join(stdout.split())
    # each error printed once: on stderr (a port number may contain "401", so look for the message)
    assert "answered 401" not in flat and "--api-key" not in flat and "cannot connect" not in flat
    assert f"locked: {locked} · failed, no row" in flat and "good: " in flat


def test_api_key_is_sent_and_a_stream_without_usage_fails(serve_fake, prompts_file):
    fake = Fake(usage=False)
    url = serve_fake(fake)
    code, _, stderr = bench(
        "--endpoint", url, "--api-key", "sesame", "--model", "mine", "--prompts", str(prompts_file),
        "--limit", "1", "--warmup", "0",
    )  # fmt: skip
    assert code == 1 and "no usage" in stderr
    assert fake.headers[0]["Authorization"] == "Bearer sesame" and fake.bodies[0]["model"] == "mine"


def test_concurrency_reads_metrics_around_the_whole_stage(serve_fake, prompts_file, tmp_path):
    fake = Fake()
    url = serve_fake(fake)
    out = tmp_path / "run.json"
    code, _, stderr = bench(
        "--endpoint", f"c={url}", "--prompts", str(prompts_file), "--concurrency", "3", "--warmup", "1",
        "--json", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(out.read_text())
    overall = data["summary"]["overall"]["c"]
    assert (overall["requests"], overall["drafts"], overall["accepted_tokens"]) == (3, 6, 15)
    assert overall["output_throughput"] > 0 and overall["concurrency"] == 3
    assert data["summary"]["editing"]["c"]["speculation"] == "not reported by this server"  # not attributable


def test_endpoint_only_loads_no_model_and_no_torch(serve_fake, prompts_file):
    """With --endpoint alone nothing local runs: not even torch is imported."""
    url = serve_fake(Fake())
    code = (
        "import sys\nfrom specli.cli import main\n"
        f"try:\n    main(['bench', '--endpoint', '{url}', '--prompts', '{prompts_file}', '--limit', '1'])\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False False", done.stdout


def test_a_missing_local_target_is_refused_before_any_server_is_asked(serve_fake, prompts_file, tmp_path):
    """A local run beside an endpoint checks its model options first: a folder that does not exist is
    one usage line (exit 2) and the server got no request, not even /v1/models. Catches: the endpoints
    contacted (warm-up requests sent) before the local target is refused."""
    fake = Fake()
    url = serve_fake(fake)
    missing = tmp_path / "nothere"
    code, _, stderr = bench("--target", str(missing), "--endpoint", url, "--prompts", str(prompts_file))
    assert code == 2, stderr
    assert "nothere" in stderr and "Traceback" not in stderr
    assert fake.completions == 0 and fake.headers == [] and not fake.metrics_read.is_set()


def test_endpoint_only_refuses_local_only_options(prompts_file):
    code, _, stderr = bench("--endpoint", "http://127.0.0.1:9/v1", "--compare-hf")
    assert code == 2 and "--compare-hf" in stderr
    code, _, stderr = bench("--endpoint", "127.0.0.1:9")
    assert code == 2 and "http(s) URL" in stderr


def test_local_strategies_and_an_endpoint_side_by_side(tiny_pair, serve_fake, prompts_file, tmp_path):
    """One run, one table per category with the local rows and the server's; local rows carry the same
    serving figures (latency, drafts, acceptance length) so the columns mean the same."""
    target, draft = tiny_pair
    url = serve_fake(Fake())
    out = tmp_path / "run.json"
    code, stdout, stderr = bench(
        "--target", str(target), "--draft", str(draft), "--strategy", "draft", "--endpoint", f"srv={url}",
        "--prompts", str(prompts_file), "--limit", "1", "--max-new-tokens", "8", "--fixed-k", "-k", "3",
        "--json", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(out.read_text())
    overall = data["summary"]["overall"]
    assert list(overall) == ["none", "draft", "srv"]
    local = overall["draft"]
    assert local["draft_tokens"] == sum(r["drafted"] for r in data["runs"] if r["strategy"] == "draft")
    assert local["accepted_tokens"] == local["accepted"] and local["drafts"] >= 1
    assert local["acceptance_length"] == pytest.approx(1 + local["accepted"] / local["drafts"])
    assert local["mean_ttft_ms"] > 0 and local["mean_itl_ms"] > 0
    assert overall["srv"]["drafts"] == 2 * 2  # 2 prompts (one per category) × 2 drafts
    assert "overall: side by side" in stdout and "srv" in stdout
    assert "bench: measuring 2 prompts × 2 strategies (+ 1 endpoint) × 1 repeat" in stderr


# --------------------------------------------------------------------------- against specli serve


def free_port() -> int:
    return closed_port()


@pytest.fixture(scope="module")
def specli_server() -> Iterator[str]:
    """`specli serve` on the embedded pair, greedy-ready, k fixed at 4, one thread, on a free port."""
    if not (Path(__file__).resolve().parents[2] / "specli" / "cli" / "serve.py").exists():
        pytest.skip("specli serve is not there yet")
    import httpx

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("SPECLI_API_KEY", None)
    args = ["serve", "--device", "cpu", "--threads", "1", "-k", "4", "--fixed-k", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "specli.cli", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # up to 60 s to load and bind
            if proc.poll() is not None:
                pytest.fail(f"specli serve exited: {proc.stdout.read().decode()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                threading.Event().wait(0.1)
        else:
            pytest.fail("specli serve did not answer /health")
        yield f"{url}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bench_endpoint_against_specli_serve_equals_a_local_bench(specli_server, tmp_path):
    """Greedy and a fixed k make speculation deterministic: the drafts, draft tokens, accepted tokens
    and per-position counts the bench derives from the server (its responses' spec_decode and its
    /metrics, each on its own) equal those of a local bench of the same pair on the same prompts."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("def fibonacci(n):\nimport os\nfor i in range(10):\n")
    common = ["--prompts", str(prompts), "--max-new-tokens", "24", "--warmup", "1", "--repeats", "1"]
    served_json, local_json = tmp_path / "served.json", tmp_path / "local.json"
    code, _, stderr = bench("--endpoint", f"serve={specli_server}", *common, "--json", str(served_json))
    assert code == 0, stderr
    code, _, stderr = bench(
        "--strategy", "draft", "-k", "4", "--fixed-k", "--device", "cpu", "--threads", "1", "--no-chat",
        *common, "--json", str(local_json),
    )  # fmt: skip
    assert code == 0, stderr
    served = json.loads(served_json.read_text())
    local = json.loads(local_json.read_text())["summary"]["overall"]["draft"]
    row = served["summary"]["overall"]["serve"]
    keys = ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_position")
    assert {k: row[k] for k in keys} == {k: local[k] for k in keys}
    assert row["acceptance_rate"] == pytest.approx(local["acceptance_rate"])
    assert row["acceptance_length"] == pytest.approx(local["acceptance_length"])
    assert row["tokens"] == local["tokens"]
    assert "spec_decode" in row["speculation"]
    runs = served["endpoint_runs"]
    for source in ("speculation_response", "speculation_metrics"):  # each source on its own agrees too
        summed = e.total(e.Reported.from_dict(r[source]) for r in runs).counters
        assert (summed.drafts, summed.drafted, summed.accepted) == (
            local["drafts"],
            local["draft_tokens"],
            local["accepted_tokens"],
        ), source
        assert summed.position_accepted == local["accepted_per_position"], source
