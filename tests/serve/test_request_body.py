"""The request body's size limit (specli/serve/body.py): a body of exactly the limit is read, one byte
more is refused with 413, whether or not the client declared its length."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from specli.serve.body import read_body
from specli.serve.errors import APIError

LIMIT = 64


def _request(body: bytes, declared: bool, chunk: int = 10) -> Request:
    """A POST whose body arrives in chunks of `chunk` bytes, with a Content-Length header or without
    (chunked transfer)."""
    headers = [(b"content-length", str(len(body)).encode())] if declared else []
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages = [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]

    async def receive() -> dict:
        return messages.pop(0)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/completions",
        "headers": headers,
        "query_string": b"",
    }
    return Request(scope, receive)


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(declared):
    """Bug caught: a body of exactly the limit refused as too large (an off-by-one in either check)."""
    body = b"x" * LIMIT
    assert asyncio.run(read_body(_request(body, declared), LIMIT)) == body
    with pytest.raises(APIError) as refused:
        asyncio.run(read_body(_request(body + b"y", declared), LIMIT))
    assert refused.value.status == 413 and refused.value.code == "request_too_large"
