"""Request bodies of the OpenAI-compatible routes (pydantic, strict types: "5" is not a number).

What each field does:
- honoured: max_tokens / max_completion_tokens (OpenAI's newer name; it wins when both are given, as in
  vLLM), temperature, top_p, top_k, min_p (vLLM's; after temperature, top-k and top-p, as transformers
  orders them, on the target's p and the drafter's q alike), seed, stop, stream, stream_options,
  ignore_eos (vLLM's: EOS does not end the answer), response_format of type "text" (the default);
- ignored, said so: `tools` / `functions` while the model may answer without calling one (tool_choice
  absent, "auto" or "none"): the model never sees them (the app sends the header X-Specli-Ignored);
- refused with a 422 naming the field: what would change the answer or its shape in ways specli does not
  do (n > 1, best_of > 1, penalties, logit_bias, logprobs, top_logprobs, echo, suffix, response_format
  json_object / json_schema, a required or named tool call, non-text content parts such as images).
Unknown fields are ignored, as OpenAI clients send extras. `None` (or an explicit JSON null) means "not
given": the server's default (the preset's, or what `specli serve` was given).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SEED_MAX = 2**63 - 2  # the engine seeds the drafter with seed + 1 (torch takes < 2**63)

EXACT = "specli's output is exactly the target's"
IMAGE_PARTS = ("image_url", "input_image", "image")


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
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=-1)  # -1 and 0: off (vLLM's and specli's spellings)
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)  # 0: off
    seed: int | None = Field(None, ge=0, le=SEED_MAX)
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    ignore_eos: bool | None = None
    n: int | None = None
    best_of: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        for text in [value] if isinstance(value, str) else value or []:
            if not text:
                raise ValueError("a stop string cannot be empty")
            _utf8(text, "stop")
        return value

    @field_validator("n", "best_of")
    @classmethod
    def _one(cls, value: int | None, info: Any) -> int | None:
        if value not in (None, 1):
            raise ValueError(f"{info.field_name} must be 1: specli serves one completion per request")
        return value

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, value: float | None, info: Any) -> float | None:
        if value not in (None, 0):
            raise ValueError(f"{info.field_name} is not supported (only 0): {EXACT}")
        return value

    @field_validator("repetition_penalty")
    @classmethod
    def _no_repetition_penalty(cls, value: float | None) -> float | None:
        if value not in (None, 1):
            raise ValueError(f"repetition_penalty is not supported (only 1): {EXACT}")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value:
            raise ValueError(f"logit_bias is not supported: {EXACT}")
        return value

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        kind = None if value is None else value.get("type")
        if value is not None and kind != "text":
            raise ValueError(
                f"response_format of type {kind!r} is not supported: specli does not constrain the output "
                "(only type 'text')"
            )
        return value

    @property
    def max_new_tokens(self) -> int | None:
        """max_completion_tokens, else max_tokens (None: the server's default)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def ignored(self) -> tuple[str, ...]:
        """Fields accepted but not acted on (the app says so in a header and the console)."""
        return ()


class CompletionRequest(GenerationRequest):
    """POST /v1/completions. `prompt`: text, token ids, or a list holding one text (one prompt a request)."""

    prompt: str | list[int] | list[str]
    echo: bool | None = None
    logprobs: bool | int | None = None  # false, 0 and null: none asked
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

    @field_validator("echo", "logprobs", "suffix")
    @classmethod
    def _no_extras(cls, value: Any, info: Any) -> Any:
        if value:
            raise ValueError(f"{info.field_name} is not supported")
        return value


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    type: Literal["text"]
    text: str


def _content_parts(value: Any) -> Any:
    """Before the types are checked: a part that is not text is refused as what it is."""
    for part in value if isinstance(value, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in IMAGE_PARTS:
            raise ValueError("images are not supported: specli serves a text model (send text parts only)")
        if isinstance(kind, str) and kind != "text":
            raise ValueError(f"content parts of type '{kind}' are not supported (send text parts only)")
    return value


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        return _content_parts(value)

    @field_validator("content")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if isinstance(value, list):
            return _utf8("".join(part.text for part in value), "content")
        return _utf8(value, "content") if isinstance(value, str) else value


def _calls_a_tool(choice: Any) -> bool:
    """Whether tool_choice / function_call requires a call: "required", "any" or a named function."""
    return choice not in (None, "auto", "none")


class ChatCompletionRequest(GenerationRequest):
    """POST /v1/chat/completions: the messages go through the target's chat template."""

    messages: Annotated[list[Message], Field(min_length=1)]
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[Any] | None = None
    function_call: str | dict[str, Any] | None = None

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _no_logprobs(cls, value: Any, info: Any) -> Any:
        if value:
            raise ValueError(f"{info.field_name} is not supported")
        return value

    @field_validator("tool_choice", "function_call")
    @classmethod
    def _no_forced_call(cls, value: Any, info: Any) -> Any:
        if _calls_a_tool(value):
            shown = f"'{value}'" if isinstance(value, str) else "naming a function"
            raise ValueError(
                f"{info.field_name} {shown} is not supported: specli generates text and cannot call tools "
                "(leave it out, or give 'auto' / 'none')"
            )
        return value

    @property
    def ignored(self) -> tuple[str, ...]:
        return tuple(name for name in ("tools", "functions") if getattr(self, name))

    def as_dicts(self) -> list[dict[str, str]]:
        """The messages as chat templates take them (content as plain text)."""
        return [{"role": m.role, "content": m.content or ""} for m in self.messages]
