"""Bearer-key auth: with a key set, every route but /health needs `Authorization: Bearer KEY`."""

from __future__ import annotations

import hmac

from fastapi import Request

from specli.serve.errors import APIError


def key_matches(header: str | None, key: str) -> bool:
    """Whether an Authorization header carries `key`, compared in constant time."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode())


def require_key(key: str | None):  # noqa: ANN201 (a FastAPI dependency)
    """A dependency that answers 401 unless the request carries `key` (no key: everything passes)."""

    async def check(request: Request) -> None:
        if key is not None and not key_matches(request.headers.get("authorization"), key):
            raise APIError(
                401,
                "missing or wrong API key: send the header 'Authorization: Bearer KEY'.",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check
