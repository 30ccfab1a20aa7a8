"""The API's error tree, named by meaning; translated to HTTP at one edge.

Domain code and adapters raise these (adapters chain the library error as the
cause); ``install_handlers`` turns each into ``{"code": ..., "detail": ...}`` with
its status. Request validation errors are rendered the same way, their detail
naming the offending field and what is allowed.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class ApiError(Exception):
    """Base of every error the API reports to a client."""

    status = 500
    code = "internal"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class BadRequest(ApiError):
    status = 400
    code = "bad_request"


class Invalid(ApiError):
    status = 422
    code = "invalid"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class RequestTimeout(ApiError):
    status = 408
    code = "request_timeout"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class QuotaExceeded(ApiError):
    status = 403
    code = "quota_exceeded"


class UpgradeRequired(ApiError):
    """A WebSocket endpoint asked over plain HTTP."""

    status = 426
    code = "upgrade_required"


class Unavailable(ApiError):
    """A dependency (the database, the Kubernetes API) cannot be reached now: the same request
    may be sent again, so it goes out with ``Retry-After`` (seconds) as a 429 does."""

    status = 503
    code = "unavailable"
    retry_after = 1


class TooManyRequests(ApiError):
    """A rate or concurrency limit: ``retry_after`` seconds go out as ``Retry-After``."""

    status = 429
    code = "too_many_requests"

    def __init__(self, detail: str, *, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after = max(1, int(retry_after))


class ErrorBody(BaseModel):
    """Every error the API sends: a stable machine ``code`` and a human ``detail`` that
    names the field and what is allowed. Some errors add fields (a quota error adds
    ``quota``, ``in_use`` and ``requested``)."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Machine-readable error code, e.g. invalid, not_found, too_many_requests.")
    detail: str = Field(description="What is wrong and what is allowed.")


def _described(text: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": text}


# The error responses every operation may give, for the OpenAPI schema (one error model).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _described("Bad request (e.g. control characters in the path or query)."),
    401: _described("Missing, invalid or revoked bearer token."),
    403: _described("The token may not do this (admin only), or a quota is exceeded."),
    404: _described("Not found (also for another tenancy's objects)."),
    405: _described("Method not allowed."),
    408: _described("The request body stalled; send it without pauses."),
    409: _described("Conflicts with the current state (e.g. changed or deleted concurrently)."),
    413: _described("Request body too large."),
    422: _described("Invalid input: the detail names each field and what is allowed."),
    429: _described("Too many requests or streams; retry after the Retry-After header's seconds."),
    503: _described("A dependency (database or Kubernetes API) is unavailable; retry later."),
}


def _allowed_methods(request: Any) -> str:
    """Every method some route serves for this path (Starlette names only the first
    matching route's, which is wrong where GET and POST are separate routes)."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _child = route.matches(request.scope)
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def response_of(exc: ApiError) -> Any:
    """The JSON response an API error is answered with (also a refused WebSocket's)."""
    from fastapi.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if isinstance(exc, TooManyRequests | Unavailable):
        headers = {"Retry-After": str(exc.retry_after)}
    return JSONResponse({"code": exc.code, "detail": exc.detail, **exc.extra}, status_code=exc.status, headers=headers)


def install_handlers(app: Any) -> None:
    """Register the one handler that renders every API error as ``{code, detail}``."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from services.api.domain.validation import describe_validation_errors

    # the database went away or is busy (a restart, a lost connection, SQLite locked)
    database_gone = (OperationalError, InterfaceError, DisconnectionError)

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, ApiError):
            return response_of(exc)
        if isinstance(exc, RequestValidationError):
            status, body = 422, {"code": "invalid", "detail": describe_validation_errors(exc.errors())}
        elif isinstance(exc, database_gone):
            # the pool has discarded the connection: the same request can be sent again
            log.warning("database unavailable: %s", exc)
            status, body = 503, {"code": Unavailable.code, "detail": "database: unavailable; retry shortly"}
        elif isinstance(exc, StarletteHTTPException):
            codes = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}
            status = exc.status_code
            body = {"code": codes.get(status, "http_error"), "detail": str(exc.detail)}
        else:  # pragma: no cover - registered only for the types above
            status, body = 500, {"code": "internal", "detail": "internal error"}
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status == 405:
            headers = {"Allow": _allowed_methods(request)}
        if isinstance(exc, database_gone):
            headers = {"Retry-After": "1"}
        if isinstance(exc, StarletteHTTPException) and exc.headers and status != 405:
            headers = {**(headers or {}), **exc.headers}
        return JSONResponse(body, status_code=status, headers=headers)

    for exc_type in (ApiError, RequestValidationError, StarletteHTTPException, *database_gone):
        app.add_exception_handler(exc_type, handle)
