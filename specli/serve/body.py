"""Reading a request body: size-limited (413), strictly UTF-8 (400), valid JSON (400), then the schema
(422, see errors.validation_error)."""

from __future__ import annotations

import json
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from specli.serve.errors import APIError, validation_error

MAX_BODY_BYTES = 4 << 20  # 4 MiB: far above any prompt a local context holds

Model = TypeVar("Model", bound=BaseModel)


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than {limit} bytes.", code="request_too_large")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, at most `limit` bytes (checked on Content-Length first, then as it arrives)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse(data: bytes, model: type[Model]) -> Model:
    """Bytes -> the route's request model."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise APIError(
            400,
            f"the body is not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start}.",
            code="invalid_encoding",
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise APIError(
            400, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}.", code="invalid_json"
        ) from None
    if not isinstance(value, dict):
        raise APIError(400, "the body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise validation_error(e.errors(include_url=False)) from None


async def read_json(request: Request, model: type[Model], limit: int = MAX_BODY_BYTES) -> Model:
    return parse(await read_body(request, limit), model)
