"""`specli serve`'s request fields, in process: the app on the embedded tiny pair (loaded once for the
module) behind Starlette's TestClient, which the official `openai` client can use as its transport.

What is checked: each field OpenAI or vLLM defines is honoured, refused with a 422 naming it, or (tools
the model may answer without) accepted and said to be ignored; a request's settings reach the engine's
own config; seeded sampling reproduces its answer; the context limit's error and stop reason; the
model card route and CORS.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import openai
import pytest
from fastapi.testclient import TestClient

import specli
import specli.pair
from specli.engine.draft_length import DraftLength
from specli.engine.sampling import SamplingConfig
from specli.serve import ServeConfig, create_app

PROMPT = "def fibonacci(n):"
N = 24


@dataclass
class Served:
    """The app on the real pair, the console lines it printed, and what reached the engine."""

    pair: specli.Pair
    http: TestClient
    lines: list[str]
    engine: list = field(default_factory=list)  # (EngineConfig, prompt ids) per generation

    def complete(self, **body) -> dict:
        response = self.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": N, **body})
        assert response.status_code == 200, response.text
        return response.json()

    def chat(self, **body) -> dict:
        messages = [{"role": "user", "content": PROMPT}]
        response = self.http.post("/v1/chat/completions", json={"messages": messages, **body})
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def pair() -> specli.Pair:
    return specli.load("tiny", device="cpu", threads=1)


@pytest.fixture(scope="module")
def app_client(pair) -> Iterator[tuple[TestClient, list[str]]]:
    lines: list[str] = []
    config = ServeConfig(
        model="tiny", settings=pair.settings(), aliases=(pair.target_name,), log=lines.append
    )
    with TestClient(create_app(pair, config)) as http:
        yield http, lines


@pytest.fixture
def served(pair, app_client, monkeypatch) -> Served:
    """The module's app, recording each generation's EngineConfig as `Pair.stream` hands it to the
    engine."""
    http, lines = app_client
    lines.clear()
    here = Served(pair, http, lines)
    engine = specli.pair.generate_rounds

    def recording(target, drafter, ids, config, criteria, max_positions, *rest):
        here.engine.append((config, list(ids)))
        return engine(target, drafter, ids, config, criteria, max_positions, *rest)

    monkeypatch.setattr(specli.pair, "generate_rounds", recording)
    return here


@pytest.fixture(scope="module")
def greedy(pair) -> str:
    return pair.generate(PROMPT, max_new_tokens=N).text


def text_of(answer: dict) -> str:
    choice = answer["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


# --------------------------------------------------------------------------- honoured


def test_max_completion_tokens_is_honoured_and_wins_over_max_tokens(served):
    """Catches (issue 28 item 1): max_completion_tokens ignored (langchain's and guidellm's chat requests
    then ran to the server default), or max_tokens winning when both are given (vLLM: the newer wins)."""
    assert served.chat(max_completion_tokens=12)["usage"]["completion_tokens"] == 12
    assert served.chat(max_tokens=30, max_completion_tokens=7)["usage"]["completion_tokens"] == 7
    assert served.complete(max_tokens=9)["usage"]["completion_tokens"] == 9
    assert [config.max_new_tokens for config, _ in served.engine] == [12, 7, 9]


def test_request_settings_reach_the_engine(served):
    """A request's temperature, top_k, top_p and min_p are the engine's sampling config; top_k 0 and -1
    turn top-k off and keep sampling (not greedy). Catches (item 33) a setting lost between the request
    and the engine (the answer silently comes from other settings), top_k <= 0 taken for greedy."""
    served.complete(temperature=0.7, top_k=5, top_p=0.8, min_p=0.05, seed=1)
    served.complete(temperature=0.9, top_k=0, seed=1)
    served.complete(temperature=1.3, top_k=-1, seed=1)
    served.complete()  # the server's defaults: the tiny preset's greedy decoding
    samplings = [config.sampling for config, _ in served.engine]
    assert samplings == [
        SamplingConfig(0.7, 5, 0.8, 0.05),
        SamplingConfig(0.9, 0, 1.0, 0.0),
        SamplingConfig(1.3, 0, 1.0, 0.0),
        served.pair.settings().sampling,
    ]
    assert served.pair.settings().greedy


def test_min_p_reaches_the_target_and_the_drafter(served, greedy):
    """min_p 1 keeps only the top token of p and of q: sampling at temperature 1 then gives the greedy
    answer exactly. Catches min_p accepted and dropped anywhere on its way (request -> Settings ->
    SamplingConfig -> process_logits): the answer is then a sample."""
    assert text_of(served.complete(temperature=1.0, min_p=1.0, seed=5)) == greedy
    assert text_of(served.complete(temperature=1.0, seed=5)) != greedy  # the control: it samples


def test_max_tokens_past_the_context_gives_exactly_the_tokens_that_fit(served):
    """A prompt 500 tokens long in a 512-token context: max_tokens 100 gives the 12 that fit, stopped at
    the context (the console says "stop: context", as `specli generate` does); max_tokens 12 and 5 give
    12 and 5, stopped by max_tokens. Catches (items 33 and 8) one token too few or too many at the
    context's end, and the console blaming max_new_tokens for the context."""
    limit = served.pair.max_positions
    ids = (served.pair.encode("for i in range(10):\n    print(i)\n", chat=False) * 100)[: limit - 12]
    for asked, got, stop in ((100, 12, "context"), (12, 12, "max_new_tokens"), (5, 5, "max_new_tokens")):
        answer = served.complete(prompt=ids, max_tokens=asked)
        assert answer["usage"] == {"prompt_tokens": limit - 12, "completion_tokens": got,
                                   "total_tokens": limit - 12 + got}  # fmt: skip
        assert answer["choices"][0]["finish_reason"] == "length"
        assert served.lines[-1].endswith(f"stop: {stop}"), served.lines[-1]


def test_ignore_eos_runs_past_the_eos_token(served, monkeypatch):
    """With a token of the greedy answer made the EOS, the answer stops there; ignore_eos runs to
    max_tokens. Catches ignore_eos accepted and dropped (by the schema, the app or Pair.stream)."""
    ids = served.pair.generate(PROMPT, max_new_tokens=N).token_ids
    eos = ids[6]
    monkeypatch.setattr(served.pair, "eos_ids", {eos})
    stopped = served.complete()
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == ids.index(eos) + 1
    running = served.complete(ignore_eos=True)
    assert running["choices"][0]["finish_reason"] == "length"
    assert running["usage"]["completion_tokens"] == N


def test_a_seed_reproduces_the_answer_even_where_k_follows_timings(served, monkeypatch):
    """k per round depends on measured timings (here: a random k stands in for them). The same seed must
    still give the same text, every time: a seeded sampling request drafts a fixed k. Catches (item 5) a
    seeded request whose random draws land elsewhere each time because its k changed."""
    choose, rng = DraftLength.choose, random.Random(0)

    def timing_dependent(self, budget, state=None):
        if self.fixed:
            return choose(self, budget, state)
        cap = min(self.max_k, budget - 1)
        return (rng.randint(1, cap), "cost model") if cap >= 1 else (0, "budget")

    monkeypatch.setattr(DraftLength, "choose", timing_dependent)
    body = {"temperature": 1.0, "seed": 11, "max_tokens": 40}
    answers = {text_of(served.complete(**body)) for _ in range(3)}
    assert len(answers) == 1
    assert text_of(served.complete(**{**body, "seed": 12})) not in answers  # the seed matters


def test_explicit_nulls_mean_not_given(served):
    """The openai SDK sends null for every parameter a wrapper passes as None. Catches (item 3) a 422 for
    null n, penalties, stream, chat logprobs, completions echo, and for completions logprobs false."""
    nulls = {"n": None, "presence_penalty": None, "frequency_penalty": None, "stream": None, "seed": None,
             "temperature": None, "top_p": None, "stop": None, "stream_options": None, "best_of": None,
             "logit_bias": None, "response_format": None, "max_completion_tokens": None, "min_p": None,
             "ignore_eos": None, "repetition_penalty": None}  # fmt: skip
    assert served.complete(**nulls, echo=None, logprobs=None, suffix=None)["usage"]["completion_tokens"] == N
    assert served.complete(logprobs=False, echo=False)["usage"]["completion_tokens"] == N
    chat = served.chat(**nulls, max_tokens=N, logprobs=None, top_logprobs=None, tools=None, tool_choice=None)
    assert chat["usage"]["completion_tokens"] == N
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=served.http)
    answer = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": PROMPT}], max_completion_tokens=5, n=None,
        presence_penalty=None, frequency_penalty=None, stream=None, logprobs=None, top_logprobs=None,
    )  # fmt: skip
    assert answer.usage.completion_tokens == 5


def test_accepted_no_ops_and_ignored_tools(served):
    """response_format text, repetition_penalty 1 and penalties 0 change nothing and are accepted; a tool
    list the model may answer without (tool_choice auto or none) is ignored, and the answer and the
    console say so. Catches tools dropped silently, or refused when no call is required."""
    plain = text_of(served.chat(max_tokens=N))
    same = served.chat(
        max_tokens=N, response_format={"type": "text"}, repetition_penalty=1.0, presence_penalty=0
    )
    assert text_of(same) == plain
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    for choice in ("auto", "none", None):
        body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4, "tools": tools}
        response = served.http.post("/v1/chat/completions", json=body | {"tool_choice": choice})
        assert response.status_code == 200 and response.headers["x-specli-ignored"] == "tools"
    assert sum("ignored tools" in line for line in served.lines) == 3
    response = served.http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert "x-specli-ignored" not in response.headers


TOOLS = [{"type": "function", "function": {"name": "add"}}]
NAMED = {"type": "function", "function": {"name": "add"}}
REFUSED = [
    # (route, fields, the field named)
    ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ("chat", {"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
    ("chat", {"tools": TOOLS, "tool_choice": NAMED}, "tool_choice"),
    ("chat", {"function_call": {"name": "add"}}, "function_call"),
    ("chat", {"logit_bias": {"50": -100}}, "logit_bias"),
    ("completions", {"logit_bias": {"50": 5}}, "logit_bias"),
    ("chat", {"repetition_penalty": 1.2}, "repetition_penalty"),
    ("chat", {"presence_penalty": 0.5}, "presence_penalty"),
    ("completions", {"frequency_penalty": -1.0}, "frequency_penalty"),
    ("chat", {"top_logprobs": 2}, "top_logprobs"),
    ("chat", {"logprobs": True}, "logprobs"),
    ("completions", {"logprobs": 2}, "logprobs"),
    ("completions", {"logprobs": True}, "logprobs"),
    ("completions", {"echo": True}, "echo"),
    ("completions", {"suffix": "}"}, "suffix"),
    ("completions", {"n": 2}, "n"),
    ("completions", {"best_of": 3}, "best_of"),
    ("chat", {"min_p": 1.5}, "min_p"),
    ("completions", {"ignore_eos": "yes"}, "ignore_eos"),
    ("completions", {"max_completion_tokens": 0}, "max_completion_tokens"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("route", "fields", "name"), REFUSED, ids=[f"{r[2]}-{i}" for i, r in enumerate(REFUSED)]
)
def test_unsupported_fields_are_refused_naming_them(served, route, fields, name):
    """Catches (item 2) a field specli cannot honour answered 200 and ignored (the client then believes
    it got JSON, a tool call, a bias or logprobs), or refused without saying which field."""
    body = {"prompt": "x"} if route == "completions" else {"messages": [{"role": "user", "content": "x"}]}
    response = served.http.post(f"/v1/{route.replace('chat', 'chat/completions')}", json=body | fields)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["param"] == name and name in error["message"] and "\n" not in error["message"]
    assert not served.engine  # refused before anything ran


def test_an_image_part_is_refused_as_an_image(served):
    """Catches (item 7) an image refused as "input should be a valid string" (a type error about text)."""
    content = [{"type": "text", "text": "what is this?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]  # fmt: skip
    response = served.http.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": content}]}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["param"] == "messages"
    assert error["message"].startswith("messages.0.content: images are not supported")
    audio = [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]
    response = served.http.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": audio}]}
    )
    assert "'input_audio'" in response.json()["error"]["message"]
    texts = [{"type": "text", "text": "def "}, {"type": "text", "text": "f(x):"}]
    assert served.chat(messages=[{"role": "user", "content": texts}], max_tokens=4)["usage"]["prompt_tokens"]


def test_a_prompt_past_the_context_gets_openais_words_and_code(served):
    """litellm maps "This model's maximum context length is" and the code context_length_exceeded to its
    context-window error (its fallbacks run on it). Catches (item 4) a message in other words."""
    long = "def f(x): " * 400
    response = served.http.post("/v1/completions", json={"prompt": long, "max_tokens": 40})
    error = response.json()["error"]
    prompt = len(served.pair.encode(long, chat=False))
    assert response.status_code == 400 and error["code"] == "context_length_exceeded"
    assert error["message"] == (
        f"This model's maximum context length is 512 tokens. However, you requested {prompt + 40} tokens "
        f"({prompt} in the prompt, 40 in the completion). Please reduce the length of the prompt."
    )
    chat = served.http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": long}]})
    message = chat.json()["error"]["message"]
    assert message.startswith("This model's maximum context length is 512 tokens. However, you requested")
    assert "in the messages" in message and chat.json()["error"]["param"] == "messages"


def test_console_counts_agree_in_number(served):
    """Catches (item 25a) "prompt 1 tokens"."""
    served.complete(prompt=[5], max_tokens=2)
    assert " · prompt 1 token · " in served.lines[-1]
    served.complete(prompt=[5, 6], max_tokens=2)
    assert " · prompt 2 tokens · " in served.lines[-1]


def test_metrics_describe_draft_tokens_as_what_they_count(served):
    """Catches (item 9) the help text saying the target verified every drafted token (those after a
    rejection were never judged)."""
    text = served.http.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("# HELP specli:spec_decode_num_draft_tokens"))
    assert "after a rejection" in line and "verified" not in line


# --------------------------------------------------------------------------- routes: model card, CORS


def test_a_model_card_by_its_id(served):
    """Catches (item 6) GET /v1/models/{id} missing (404 no route), or answering for any id."""
    card = served.http.get("/v1/models/tiny").json()
    assert card == served.http.get("/v1/models").json()["data"][0] and card["id"] == "tiny"
    assert served.http.get(f"/v1/models/{served.pair.target_name}").json()["id"] == "tiny"  # an alias
    missing = served.http.get("/v1/models/org/other-model")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_cors_is_opt_in_and_answers_the_preflight_before_the_key(pair, served):
    """Catches (item 6) a browser's preflight answered 405 (or 401: the preflight never carries the key)
    once --cors-origin is given, CORS headers for an origin not given, and CORS on by default."""
    preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}  # fmt: skip
    assert served.http.options("/v1/chat/completions", headers=preflight).status_code == 405
    config = ServeConfig(
        model="tiny", settings=pair.settings(), api_key="k", cors_origins=("http://localhost:3000",)
    )
    with TestClient(create_app(pair, config)) as http:
        answer = http.options("/v1/chat/completions", headers=preflight)
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "x-stainless-os" in answer.headers["access-control-allow-headers"]
        models = http.get(
            "/v1/models", headers={"Origin": "http://localhost:3000", "Authorization": "Bearer k"}
        )
        assert models.status_code == 200
        assert models.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = http.options("/v1/chat/completions", headers=preflight | {"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        assert http.get("/v1/models", headers={"Origin": "http://localhost:3000"}).status_code == 401
