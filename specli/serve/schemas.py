"""Request bodies of the OpenAI-compatible routes (pydantic, strict types: "5" is not a number).

Fields OpenAI defines that specli cannot honour (n > 1, penalties, logprobs, echo, suffix) are refused
with a 422 naming them instead of being silently ignored; unknown fields are ignored, as OpenAI clients
send extras. `None` means "the server's default" (the preset's, or what `specli serve` was given).
With sampling, `seed` reproduces an answer only when the server runs with --fixed-k (otherwise each
round's k follows measured speed, as in `specli generate`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SEED_MAX = 2**63 - 2  # the engine seeds the drafter with seed + 1 (torch takes < 2**63)

_UNSUPPORTED_ZERO = ("presence_penalty", "frequency_penalty")


def _utf8(text: str, field: str) -> str:
    """JSON escapes can carry lone surrogates ("\\ud800"): text no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} is not valid Unicode (a lone surrogate)") from None
    return text


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    include_usage: bool = False


class GenerationRequest(BaseModel):
    """What both routes share: the model, how much to generate, how to sample it, how to answer."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=-1)  # -1 and 0: off (vLLM's and specli's spellings)
    seed: int | None = Field(None, ge=0, le=SEED_MAX)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        for text in [value] if isinstance(value, str) else value or []:
            if not text:
                raise ValueError("a stop string cannot be empty")
            _utf8(text, "stop")
        return value

    @model_validator(mode="after")
    def _supported(self) -> GenerationRequest:
        if self.n != 1:
            raise ValueError("n must be 1: specli serves one completion per request")
        for name in _UNSUPPORTED_ZERO:
            if getattr(self, name) != 0:
                raise ValueError(f"{name} is not supported: specli's output is exactly the target's")
        return self

    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(GenerationRequest):
    """POST /v1/completions. `prompt`: text, token ids, or a list holding one text (one prompt a request)."""

    prompt: str | list[int] | list[str]
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], str):
            if len(value) != 1:
                raise ValueError("one prompt per request (specli serves one generation at a time)")
            return _utf8(value[0], "prompt")
        if isinstance(value, str):
            return _utf8(value, "prompt")
        if not value:
            raise ValueError("the prompt is empty")
        return value

    @model_validator(mode="after")
    def _no_extras(self) -> CompletionRequest:
        for name in ("echo", "logprobs", "suffix"):
            if getattr(self, name):
                raise ValueError(f"{name} is not supported")
        return self


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    @field_validator("content")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if isinstance(value, list):
            return _utf8("".join(part.text for part in value), "content")
        return _utf8(value, "content") if isinstance(value, str) else value


class ChatCompletionRequest(GenerationRequest):
    """POST /v1/chat/completions: the messages go through the target's chat template."""

    messages: Annotated[list[Message], Field(min_length=1)]
    logprobs: bool = False

    @model_validator(mode="after")
    def _no_logprobs(self) -> ChatCompletionRequest:
        if self.logprobs:
            raise ValueError("logprobs is not supported")
        return self

    def as_dicts(self) -> list[dict[str, str]]:
        """The messages as chat templates take them (content as plain text)."""
        return [{"role": m.role, "content": m.content or ""} for m in self.messages]
