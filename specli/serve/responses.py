"""Response bodies and stream chunks in OpenAI's shapes, for both routes. Every body and the last chunk
of a stream carry `spec_decode` (report.py); `usage` is on every body, and in a stream on a last chunk
of its own when stream_options.include_usage asks for it (then that chunk carries spec_decode)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["completion", "chat"]


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event: `data: {...}` and a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n"


DONE = sse("[DONE]")


@dataclass(frozen=True)
class Shape:
    """How one request's answer looks: its id, model name and route."""

    kind: Kind
    model: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def new(cls, kind: Kind, model: str) -> Shape:
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        return cls(kind, model, prefix + uuid.uuid4().hex[:24])

    @property
    def endpoint(self) -> str:
        return "chat" if self.kind == "chat" else "completions"

    def _head(self, chunk: bool) -> dict[str, Any]:
        if self.kind == "chat":
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def body(self, text: str, finish: str, usage: dict[str, int], spec: dict[str, Any]) -> dict[str, Any]:
        """The whole answer (stream false)."""
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        else:
            choice = {"index": 0, "text": text}
        choice |= {"logprobs": None, "finish_reason": finish}
        return self._head(False) | {"choices": [choice], "usage": usage, "spec_decode": spec}

    def chunk(self, text: str | None = None, finish: str | None = None, role: bool = False) -> dict[str, Any]:
        """A streamed piece: new text, or the closing chunk with finish_reason (chat: the first chunk
        opens the assistant's turn)."""
        if self.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text or ""}
        choice |= {"logprobs": None, "finish_reason": finish}
        return self._head(True) | {"choices": [choice]}

    def usage_chunk(self, usage: dict[str, int], spec: dict[str, Any]) -> dict[str, Any]:
        """stream_options.include_usage: the chunk after the last one, with no choices."""
        return self._head(True) | {"choices": [], "usage": usage, "spec_decode": spec}
