"""The API's error tree, named by meaning; translated to HTTP at one edge.

Domain code and adapters raise these (adapters chain the library error as the
cause); ``install_handlers`` turns each into ``{"code": ..., "detail": ...}`` with
its status. Request validation errors are rendered the same way, their detail
naming the offending field and what is allowed.
"""

from __future__ import annotations

from typing import Any


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


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class QuotaExceeded(ApiError):
    status = 403
    code = "quota_exceeded"


class Unavailable(ApiError):
    status = 503
    code = "unavailable"


def install_handlers(app: Any) -> None:
    """Register the one handler that renders every API error as ``{code, detail}``."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from services.api.validation import describe_validation_errors

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, ApiError):
            status, body = exc.status, {"code": exc.code, "detail": exc.detail, **exc.extra}
        elif isinstance(exc, RequestValidationError):
            status, body = 422, {"code": "invalid", "detail": describe_validation_errors(exc.errors())}
        elif isinstance(exc, StarletteHTTPException):
            codes = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed"}
            status = exc.status_code
            body = {"code": codes.get(status, "http_error"), "detail": str(exc.detail)}
        else:  # pragma: no cover - registered only for the types above
            status, body = 500, {"code": "internal", "detail": "internal error"}
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(body, status_code=status, headers=headers)

    for exc_type in (ApiError, RequestValidationError, StarletteHTTPException):
        app.add_exception_handler(exc_type, handle)
