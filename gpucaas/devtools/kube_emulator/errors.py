"""Errors of the Kubernetes API emulator, each rendered as a Kubernetes ``Status`` object.

The emulator raises these from its store and request handlers; the HTTP layer turns
them into the ``Status`` body and HTTP code the real API server would send, so the
official client raises ``ApiException`` with the same ``status`` and ``reason``.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failed API request: HTTP ``code``, Kubernetes ``reason`` and a message."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        """The ``Status`` object sent as the response body."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Unauthorized(ApiError):
    code = 401
    reason = "Unauthorized"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class Gone(ApiError):
    code = 410
    reason = "Expired"


class NotAcceptable(ApiError):
    code = 406
    reason = "NotAcceptable"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    """422: the object failed validation; ``causes`` name each bad field."""

    code = 422
    reason = "Invalid"

    def __init__(self, kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> None:
        summary = ", ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
        if len(causes) > 1:
            summary = f"[{summary}]"
        super().__init__(
            f'{kind} "{name}" is invalid: {summary}',
            details={"name": name, "group": group, "kind": kind, "causes": causes},
        )
        self.causes = causes


def not_found(plural: str, name: str, group: str = "") -> NotFound:
    what = f"{plural}.{group}" if group else plural
    return NotFound(f'{what} "{name}" not found', details={"name": name, "group": group, "kind": plural})


def resource_not_found() -> NotFound:
    return NotFound("the server could not find the requested resource", details={})


def already_exists(plural: str, name: str, group: str = "") -> AlreadyExists:
    what = f"{plural}.{group}" if group else plural
    return AlreadyExists(
        f'{what} "{name}" already exists', details={"name": name, "group": group, "kind": plural}
    )


def conflict(plural: str, name: str, group: str = "", why: str | None = None) -> Conflict:
    what = f"{plural}.{group}" if group else plural
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return Conflict(
        f'Operation cannot be fulfilled on {what} "{name}": {why}',
        details={"name": name, "group": group, "kind": plural},
    )


def field_error(field: str, reason: str, message: str) -> dict[str, str]:
    """One ``Status.details.causes`` entry (reason e.g. FieldValueRequired, FieldValueInvalid)."""
    return {"reason": reason, "message": message, "field": field}
