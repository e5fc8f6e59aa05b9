"""`specli serve`: a real server process on a free port with the embedded tiny pair, driven by the official
`openai` client and by raw HTTP (httpx).

One server serves most tests; a second, with an API key and --max-queue 1, serves the auth,
queue-overflow and SIGTERM tests (both start once per module, together). The app's error path for a
failing generation runs in-process on a fake pair (a real pair cannot be made to fail on demand).
No sleeping: readiness is the server's own "serving ... on http://..." line, printed once it accepts
requests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

import httpx
import openai
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from specli.cli import app as cli_app
from specli.engine.events import Round, StopReason, TokenKind
from specli.errors import UsageError
from specli.models.loading import embedded_dir

KEY = "test-key-7f3a"
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:\n", "for i in range(10):"]
N = 40  # tokens per reference answer
START_TIMEOUT = 180  # seconds for a server to load the pair (a busy 2-core machine)
REQUEST_TIMEOUT = 120


@dataclass
class Server:
    """A `specli serve` subprocess; `url` waits for its ready line (the port it chose for --port 0)."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen = field(init=False)
    lines: list[str] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _url: str | None = None

    def __post_init__(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("SPECLI_API_KEY", None)
        command = [sys.executable, "-m", "specli.cli", "serve", "--device", "cpu", "--threads", "1"]
        self.proc = subprocess.Popen(
            [*command, "--port", "0", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env | self.env,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            found = re.search(r"serving .* on (http://127\.0\.0\.1:\d+)", line)
            if found:
                self._url = found.group(1)
                self._ready.set()
        self._ready.set()  # it exited: url raises with what it said

    @property
    def url(self) -> str:
        self._ready.wait(START_TIMEOUT)
        if self._url is None:
            raise RuntimeError("specli serve did not start:\n" + "\n".join(self.lines))
        return self._url

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    """Both servers, started together (they load while the first tests run): the main one, and one with
    an API key (from SPECLI_API_KEY) and --max-queue 1, decoding plainly so that a long request runs for
    seconds (the queue test needs one still running while two more arrive)."""
    started = Server([]), Server(["--max-queue", "1", "--strategy", "none"], env={"SPECLI_API_KEY": KEY})
    yield started
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def server(servers) -> Server:
    return servers[0]


@pytest.fixture(scope="module")
def keyed(servers) -> Server:
    return servers[1]


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", timeout=REQUEST_TIMEOUT, max_retries=0
    )


@pytest.fixture(scope="module")
def reference(server) -> dict[str, str]:
    """The target's own greedy generate() for each prompt (transformers, float32 as specli loads on CPU).
    Requesting `server` first lets the server load while this does."""
    folder = embedded_dir() / "tiny-target"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    answers = {}
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=N, do_sample=False)[0, ids.shape[1] :]
        answers[prompt] = tokenizer.decode(out, skip_special_tokens=True)
    return answers


def complete(http: httpx.Client, **body) -> dict:
    response = http.post("/v1/completions", json={"max_tokens": N, **body})
    assert response.status_code == 200, response.text
    return response.json()


def sse_events(response: httpx.Response) -> Iterator[dict | str]:
    """The `data:` payloads of a server-sent-event stream ([DONE] as the string)."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            yield data if data == "[DONE]" else json.loads(data)
        else:
            assert line == "", f"not an SSE line: {line!r}"


def metrics(http: httpx.Client, **headers) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, keyed by (name, sorted labels)."""
    response = http.get("/metrics", headers=headers)
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def check_spec_decode(spec: dict, completion_tokens: int) -> None:
    """The documented shape, and counts that agree with each other."""
    assert set(spec) == {
        "strategy", "num_draft_tokens", "rounds", "drafts", "draft_tokens", "accepted_tokens",
        "accepted_per_position", "drafted_per_position", "acceptance_rate", "mean_acceptance_length",
    }  # fmt: skip
    assert spec["strategy"] == "draft" and spec["num_draft_tokens"] == 4
    assert sum(spec["accepted_per_position"]) == spec["accepted_tokens"] <= spec["draft_tokens"]
    assert sum(spec["drafted_per_position"]) == spec["draft_tokens"]
    assert spec["drafted_per_position"][0] == spec["drafts"] <= spec["rounds"]
    assert spec["acceptance_rate"] == pytest.approx(spec["accepted_tokens"] / spec["draft_tokens"])
    assert spec["mean_acceptance_length"] == pytest.approx(completion_tokens / spec["rounds"])


# --------------------------------------------------------------------------- lossless, through the server


def test_openai_completions_equal_the_targets_own_generate(reference, client):
    """Catches: a lossy server path (wrong prompt ids, dropped or repeated round text, wrong settings)."""
    for prompt in PROMPTS[:2]:
        answer = client.completions.create(model="tiny", prompt=prompt, max_tokens=N, temperature=0)
        assert answer.choices[0].text == reference[prompt]
        assert answer.choices[0].finish_reason == "length"
        assert answer.usage.completion_tokens == N
        check_spec_decode(answer.model_extra["spec_decode"], N)
    # sampling settings reach the engine (top_k is vLLM's extension, sent as an extra field)
    sampled = client.completions.create(
        model="tiny", prompt=PROMPTS[0], max_tokens=N, temperature=1.0, top_p=0.9, seed=3,
        extra_body={"top_k": 50},
    )  # fmt: skip
    assert 0 < sampled.usage.completion_tokens <= N


def test_greedy_answer_equals_specli_generate(reference, http):
    """Catches: the server and `specli generate` disagreeing (other defaults, other tokenization)."""
    prompt = PROMPTS[0]
    result = CliRunner().invoke(
        cli_app,
        ["generate", prompt, "--json", "--max-new-tokens", str(N), "--device", "cpu", "--threads", "1"],
    )
    assert result.exit_code == 0, result.output
    generated = json.loads(result.stdout)
    answer = complete(http, prompt=prompt)
    assert answer["choices"][0]["text"] == generated["text"] == reference[prompt]
    # token ids as the prompt give the same answer
    by_ids = complete(http, prompt=generated["prompt_token_ids"])
    assert by_ids["choices"][0]["text"] == generated["text"]
    assert by_ids["usage"]["prompt_tokens"] == len(generated["prompt_token_ids"])


def test_chat_and_streaming_through_the_openai_client(reference, client):
    """Catches: a broken chat route, streamed deltas that do not add up, no spec_decode on the last chunk.
    The embedded target has no chat template: a chat continues its messages' text."""
    prompt = PROMPTS[1]
    messages = [{"role": "user", "content": prompt}]
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=N)
    assert chat.choices[0].message.content == reference[prompt]
    assert chat.choices[0].message.role == "assistant"
    check_spec_decode(chat.model_extra["spec_decode"], chat.usage.completion_tokens)

    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=N, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reference[prompt]
    assert chunks[-1].choices[0].finish_reason == "length"
    check_spec_decode(chunks[-1].model_extra["spec_decode"], N)

    stream = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=N, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reference[prompt]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == N
    check_spec_decode(chunks[-1].model_extra["spec_decode"], N)


def test_raw_stream_sends_each_round_as_it_is_verified(reference, http):
    """Catches: an answer buffered to the end (one chunk), a missing [DONE], usage only on some paths."""
    prompt = PROMPTS[2]
    body = {"prompt": prompt, "max_tokens": N, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(response))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"][0]["text"]]
    spec = chunks[-1]["spec_decode"]
    assert "".join(texts) == reference[prompt]
    assert 1 < len(texts) <= spec["rounds"]  # one chunk per round that completed text
    assert all("spec_decode" not in c for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_stop_string_ends_the_answer_before_it(reference, http, client):
    """Catches: the stop string left in the text (the engine keeps it), or streamed before it is known."""
    full = reference[PROMPTS[0]]
    start = len(full) // 2
    stop = full[start : start + 3]
    expected = full[: full.index(stop)]
    answer = complete(http, prompt=PROMPTS[0], stop=[stop])
    assert answer["choices"][0]["text"] == expected
    assert answer["choices"][0]["finish_reason"] == "stop"
    stream = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=N, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in stream) == expected


# ---------------------------------------------------------------- metrics, concurrency, disconnects


def test_metrics_counters_are_the_sums_of_the_responses(http):
    """Catches: counters not updated, updated twice, per-position labels shifted, the wrong meaning of
    accepted (bonus tokens counted)."""
    before = metrics(http)
    answers = [complete(http, prompt=p, max_tokens=24 + 8 * i) for i, p in enumerate(PROMPTS[:3])]
    body = {"prompt": PROMPTS[3], "max_tokens": 30, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/completions", json=body) as response:
        last = [e for e in sse_events(response) if e != "[DONE]"][-1]
    answers.append(last)
    after = metrics(http)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    specs = [a["spec_decode"] for a in answers]
    prefix = "specli:spec_decode_"
    assert delta(prefix + "num_drafts_total") == sum(s["drafts"] for s in specs) > 0
    assert delta(prefix + "num_draft_tokens_total") == sum(s["draft_tokens"] for s in specs)
    assert delta(prefix + "num_accepted_tokens_total") == sum(s["accepted_tokens"] for s in specs)
    for position in range(4):
        kept = sum(
            s["accepted_per_position"][position] for s in specs if len(s["accepted_per_position"]) > position
        )
        assert delta(prefix + "num_accepted_tokens_per_pos_total", position=str(position)) == kept
    assert delta("specli:prompt_tokens_total") == sum(a["usage"]["prompt_tokens"] for a in answers)
    assert delta("specli:generation_tokens_total") == sum(a["usage"]["completion_tokens"] for a in answers)
    assert delta("specli:request_success_total", finished_reason="length") == 4
    assert delta("specli:e2e_request_latency_seconds_count") == 4
    assert delta("specli:time_to_first_token_seconds_count") == 4
    assert after[("specli:num_requests_running", ())] == 0


def test_eight_concurrent_clients_get_exactly_their_own_answers(http, server):
    """Catches: events routed to the wrong request, two generations sharing caches, a lost request."""
    requests = [{"prompt": PROMPTS[i % 4], "max_tokens": 10 + 2 * i, "stream": i % 2 == 1} for i in range(8)]

    def ask(body: dict) -> str:
        with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as own:
            if not body["stream"]:
                return complete(own, **body)["choices"][0]["text"]
            with own.stream("POST", "/v1/completions", json=body) as response:
                assert response.status_code == 200
                events = [e for e in sse_events(response) if e != "[DONE]"]
            return "".join(e["choices"][0]["text"] for e in events)

    alone = [ask(body) for body in requests]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, requests))
    assert together == alone
    assert len(set(alone)) == 8  # every request's answer differs, so a mix-up shows


def test_a_disconnect_mid_stream_stops_its_generation(http, server):
    """Catches: a generation that runs on after its client left (the next request waits behind it, and
    its tokens are counted), and a server that cannot serve the request after it."""
    before = metrics(http)
    body = {"prompt": PROMPTS[0], "max_tokens": 480, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as leaving,
        leaving.stream("POST", "/v1/completions", json=body) as response,
    ):
        next(e for e in sse_events(response) if e["choices"][0]["text"])
    # leaving the block closed the connection mid-stream
    answer = complete(http, prompt=PROMPTS[1], max_tokens=N)
    assert answer["choices"][0]["finish_reason"] == "length"
    after = metrics(http)
    aborted = ("specli:request_success_total", (("finished_reason", "abort"),))
    assert after[aborted] - before[aborted] == 1
    generated = after[("specli:generation_tokens_total", ())] - before[("specli:generation_tokens_total", ())]
    assert generated - answer["usage"]["completion_tokens"] < 480  # the abandoned one stopped early


# --------------------------------------------------------------------------- bad requests

LONG_PROMPT = "def f(x): " * 400  # > 512 tokens: the embedded target's context

BAD_REQUESTS = [
    # (name, route, raw body or JSON, status, param, code)
    ("malformed JSON", "/v1/completions", b'{"prompt": "x",', 400, None, "invalid_json"),
    ("not UTF-8", "/v1/completions", b'{"prompt": "caf\xe9"}', 400, None, "invalid_encoding"),
    ("not an object", "/v1/completions", b"[1, 2]", 400, None, "invalid_json"),
    ("no prompt", "/v1/completions", {"max_tokens": 4}, 422, "prompt", "invalid_value"),
    ("max_tokens as text", "/v1/completions", {"prompt": "x", "max_tokens": "5"}, 422, "max_tokens", None),
    ("max_tokens 0", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 422, "max_tokens", None),
    ("max_tokens < 0", "/v1/completions", {"prompt": "x", "max_tokens": -3}, 422, "max_tokens", None),
    ("temperature < 0", "/v1/completions", {"prompt": "x", "temperature": -0.5}, 422, "temperature", None),
    ("top_p 0", "/v1/completions", {"prompt": "x", "top_p": 0}, 422, "top_p", None),
    ("stream as text", "/v1/completions", {"prompt": "x", "stream": "yes"}, 422, "stream", None),
    ("seed too large", "/v1/completions", {"prompt": "x", "seed": 2**64}, 422, "seed", None),
    ("n > 1", "/v1/completions", {"prompt": "x", "n": 2}, 422, "n", None),
    ("lone surrogate", "/v1/completions", b'{"prompt": "\\ud800"}', 422, "prompt", None),
    ("prompt ids outside the vocabulary", "/v1/completions", {"prompt": [1, 999999]}, 400, "prompt", None),
    ("prompt longer than the context", "/v1/completions", {"prompt": LONG_PROMPT}, 400, "prompt",
     "context_length_exceeded"),
    ("unknown model", "/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model", "model_not_found"),
    ("messages not a list", "/v1/chat/completions", {"messages": "hi"}, 422, "messages", None),
    ("no messages", "/v1/chat/completions", {"messages": []}, 422, "messages", None),
    ("unknown role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 422,
     "messages", None),
    ("content of the wrong type", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 422,
     "messages", None),
    ("prompt of the wrong type", "/v1/completions", {"prompt": 5}, 422, "prompt", None),
    ("chat longer than the context", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": LONG_PROMPT}]}, 400, "messages", "context_length_exceeded"),
    ("body too large", "/v1/completions", b'{"prompt": "' + b"a" * (5 << 20) + b'"}', 413, None,
     "request_too_large"),
]  # fmt: skip


def check_error(response: httpx.Response, status: int) -> dict:
    """OpenAI's error shape, exactly, with a one-line message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "\n" not in error["message"] and "Traceback" not in error["message"]
    return error


@pytest.mark.parametrize(
    ("route", "body", "status", "param", "code"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[c[0] for c in BAD_REQUESTS],
)
def test_bad_requests_get_their_status_and_an_openai_error(http, route, body, status, param, code):
    """Catches: FastAPI's own {"detail": ...} shape, a 500 or traceback on bad input, a missing limit."""
    if isinstance(body, bytes):
        response = http.post(route, content=body, headers={"Content-Type": "application/json"})
    else:
        response = http.post(route, json=body)
    error = check_error(response, status)
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code


def test_unknown_routes_and_methods(http):
    check_error(http.get("/v1/nothing"), 404)
    check_error(http.get("/v1/completions"), 405)
    assert http.get("/health").json() == {"status": "ok"}
    assert http.get("/v1/models").json()["data"][0]["id"] == "tiny"


# --------------------------------------------------------------------------- API key, queue, SIGTERM


def test_api_key_is_enforced_everywhere_but_health(keyed):
    """Catches: a route left open (/metrics), /health locked, a key compared by prefix."""
    with httpx.Client(base_url=keyed.url, timeout=REQUEST_TIMEOUT) as http:
        assert http.get("/health").status_code == 200
        for wrong in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {KEY}x"},
                      {"Authorization": KEY}):  # fmt: skip
            check_error(http.get("/v1/models", headers=wrong), 401)
            check_error(http.get("/metrics", headers=wrong), 401)
            check_error(http.post("/v1/completions", json={"prompt": "x"}, headers=wrong), 401)
        assert http.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="wrong", max_retries=0).models.list()
    good = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0, timeout=REQUEST_TIMEOUT)
    assert good.completions.create(model="tiny", prompt="x", max_tokens=4).usage.completion_tokens == 4
    assert KEY not in keyed.output  # never printed


def test_past_max_queue_a_request_gets_503(keyed, reference):
    """--max-queue 1: one runs, one waits, the third is refused. Catches: an unbounded line, an off-by-one
    in what counts as waiting, and a waiting request lost when the one before it is cancelled."""
    auth = {"Authorization": f"Bearer {KEY}"}
    long = {"prompt": PROMPTS[0], "max_tokens": 480, "stream": True}
    short = {"prompt": PROMPTS[1], "max_tokens": 8, "stream": True}
    with (
        httpx.Client(base_url=keyed.url, timeout=REQUEST_TIMEOUT, headers=auth) as a,
        httpx.Client(base_url=keyed.url, timeout=REQUEST_TIMEOUT, headers=auth) as b,
        httpx.Client(base_url=keyed.url, timeout=REQUEST_TIMEOUT, headers=auth) as c,
    ):
        with a.stream("POST", "/v1/completions", json=long) as running:
            # keep the event iterator referenced: a dropped one closes the response, which the server
            # takes for a client gone and cancels the running request
            events_a = sse_events(running)
            next(e for e in events_a if e["choices"][0]["text"])  # it runs
            with b.stream("POST", "/v1/completions", json=short) as waiting:
                assert waiting.status_code == 200  # admitted: it waits in line
                error = check_error(c.post("/v1/completions", json={"prompt": "x", "max_tokens": 4}), 503)
                assert error["code"] == "queue_full" and "--max-queue" in error["message"]
                assert "1 request is already waiting" in error["message"]  # not "1 are"
                running.close()  # the running one leaves; the waiting one is served in full
                events = list(sse_events(waiting))
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
        text = "".join(e["choices"][0]["text"] for e in events[:-1])
        assert text and reference[PROMPTS[1]].startswith(text)


def test_sigterm_during_a_stream_exits_cleanly(keyed):
    """Catches: uvicorn re-raising SIGTERM after shutdown (exit 143), a worker thread holding the exit, an
    in-flight stream left hanging."""
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"prompt": PROMPTS[2], "max_tokens": 480, "stream": True}
    with (
        httpx.Client(base_url=keyed.url, timeout=REQUEST_TIMEOUT, headers=auth) as http,
        http.stream("POST", "/v1/completions", json=body) as response,
    ):
        events = sse_events(response)
        next(e for e in events if e["choices"][0]["text"])
        keyed.proc.send_signal(signal.SIGTERM)
        rest = list(events)  # ends: the generation is cancelled
    assert rest[-1] == "[DONE]" and rest[-2]["error"]["code"] == "shutting_down"
    assert keyed.proc.wait(60) == 0
    assert "stopped (SIGTERM)" in keyed.output


# ---------------------------------------------------------------- in-process: the app and the command


def _round(token: int, text: str, stop: StopReason | None = None) -> Round:
    return Round(
        index=0, drafted=[token], draft_probs=[1.0], target_probs=[], target_argmax=[token, token],
        accept_probs=[1.0], uniforms=[], accepted=1, token=token, kind=TokenKind.BONUS,
        committed=[token, token], draft_time=0.0, verify_time=0.0, elapsed=0.01, stop=stop, text=text,
    )  # fmt: skip


class FailingPair:
    """Just enough of a Pair: with max_new_tokens 13 one round then a failure, with 14 a refusal before
    any round (as Pair.stream checks settings eagerly), else one normal round."""

    tokenizer = SimpleNamespace(chat_template=None)
    max_positions = 64
    target_name = "fake"

    def encode(self, text: str, chat: bool | None = None) -> list[int]:
        return [1] * max(1, len(text))

    def prompt_ids(self, prompt_ids: list[int]) -> list[int]:
        return list(prompt_ids)

    def stream(self, prompt_ids, settings):
        if settings.max_new_tokens == 14:
            raise UsageError("exit layer 9 is out of range for 'fake' (8 layers).")
        return self._rounds(settings.max_new_tokens == 13)

    def _rounds(self, fail: bool):
        if fail:
            yield _round(5, "ab")
            raise RuntimeError("device-side assert triggered\nCompile with TORCH_USE_CUDA_DSA")
        yield _round(5, "ok", StopReason.MAX_NEW_TOKENS)


def test_a_generation_error_answers_500_in_one_line_and_the_server_keeps_serving():
    """Catches: a traceback or a hung request on a failing generation, a worker thread that dies with it
    (also when the pair refuses the settings before its first round)."""
    from fastapi.testclient import TestClient

    from specli.serve import ServeConfig, create_app
    from specli.settings import resolve_settings

    lines: list[str] = []
    config = ServeConfig(model="fake", settings=resolve_settings(), log=lines.append)
    with TestClient(create_app(FailingPair(), config)) as http:
        error = check_error(http.post("/v1/completions", json={"prompt": "x", "max_tokens": 13}), 500)
        assert error["message"] == "generation failed: RuntimeError: device-side assert triggered"
        with http.stream(
            "POST", "/v1/completions", json={"prompt": "x", "max_tokens": 13, "stream": True}
        ) as r:
            events = list(sse_events(r))
        assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "generation_failed"
        refused = check_error(http.post("/v1/completions", json={"prompt": "x", "max_tokens": 14}), 400)
        assert refused["message"] == "exit layer 9 is out of range for 'fake' (8 layers)."
        answer = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 4})
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "ok"
        failed = metrics(http)[("specli:request_success_total", (("finished_reason", "error"),))]
        assert failed == 3  # two failures, one refusal
    assert sum("failed: RuntimeError" in line for line in lines) == 2


def test_public_address_without_a_key_warns(monkeypatch):
    """Catches: binding beyond loopback silently with no key."""
    import specli.serve.server as server_module

    monkeypatch.setattr(server_module, "run", lambda *args, **kwargs: None)
    result = CliRunner().invoke(
        cli_app, ["serve", "--host", "0.0.0.0", "--port", "0", "--device", "cpu", "--threads", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "warning: listening on 0.0.0.0 without an API key" in result.stderr
    assert server_module.is_loopback("127.0.0.1") and server_module.is_loopback("::1")
    assert not server_module.is_loopback("0.0.0.0") and not server_module.is_loopback("192.168.1.2")


def test_missing_extra_is_one_line_naming_the_install(monkeypatch):
    """Catches: an ImportError traceback when fastapi/uvicorn are not installed."""
    for name in [m for m in sys.modules if m.startswith("specli.serve")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(cli_app, ["serve", "--device", "cpu"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "error: specli serve needs the serve extra (uvicorn is missing): pip install -e '.[serve]' "
        "(in the specli checkout)"
    ]


def test_the_command_line_stays_free_of_torch_and_fastapi():
    """Catches: `specli --help` paying for torch or the server's imports."""
    code = "import sys, specli.cli; print(sorted({'torch', 'fastapi', 'uvicorn'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
