"""Errors as OpenAI shapes them: `{"error": {"message", "type", "param", "code"}}`, never a traceback.

`APIError` is raised anywhere in a request; `install_handlers` turns it, FastAPI's validation errors and
Starlette's HTTP errors (unknown route, wrong method) into that shape. An unexpected exception answers
500 with one line (type and first line of its message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

INVALID = "invalid_request_error"
SERVER = "server_error"


@dataclass
class APIError(Exception):
    """An answer other than 2xx: HTTP status, message, OpenAI error type, the offending field and a code."""

    status: int
    message: str
    type: str = INVALID
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] | None = None

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str = INVALID, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def one_line(exc: BaseException) -> str:
    """'RuntimeError: first line of the message' (never a traceback)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """Pydantic's first error as a 422: `param` the top-level field, the message its path (union
    members' type tags left out, e.g. "messages.0.role") and pydantic's words (the path left out when
    they begin with the field's name already: "n must be 1: ...")."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid value"}
    loc = [part for part in first.get("loc", ()) if part != "body"]
    path = [str(p) for p in loc[:1]] + [str(p) for p in loc[1:] if _is_field(p)]
    param = path[0] if path else None
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    if path and not message.startswith(f"{path[-1]} "):
        message = f"{'.'.join(path)}: {message}"
    return APIError(422, message, param=param, code="invalid_value")


def _is_field(part: Any) -> bool:
    """A list index or a field name, not the type tag pydantic adds for each member of a union."""
    return isinstance(part, int) or (str(part).isidentifier() and str(part) not in _TYPE_TAGS)


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "TextPart", "StreamOptions"}

_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 401: "invalid_api_key"}


def install_handlers(app: FastAPI) -> None:
    """Every error the app can give answers in OpenAI's shape."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}."
        code = _STATUS_CODES.get(exc.status_code)
        kind = INVALID if exc.status_code < 500 else SERVER
        return APIError(exc.status_code, message, kind, code=code, headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return APIError(500, one_line(exc), SERVER, code="internal_error").response()
