"""One error tree for every Kubernetes API call in gpucaas, by the status the server answered.

``KubeError`` is the base; its subclasses are named by meaning, so callers catch
what they can act on:

* :class:`NotFound` (404), :class:`Conflict` (409: AlreadyExists or a stale
  resourceVersion), :class:`Gone` (410: a watch's resourceVersion is too old);
* :class:`Forbidden` (403) carrying the ``user``, ``verb`` and ``resource`` the
  API server named in its Status message, and :class:`Unauthorized` (401: the
  credentials themselves were refused);
* :class:`Invalid` (422 and 400) with the Status ``details.causes`` (field + message);
* :class:`Unavailable`: no answer (connection refused, DNS, TLS, timeout), 5xx or
  429, with the server's URL. Only this one is worth retrying as is.

The translations (:func:`from_api_exception` for the official synchronous client,
:func:`from_status` for a raw status + body, :func:`from_transport_error` for
urllib3/aiohttp/OS errors, :func:`from_kopf_error` for Kopf's aiohttp client)
are always used as ``raise translated from original`` so the cause stays chained.

Status bodies: ``metav1.Status`` (kind Status, reason, message, details.causes),
as documented in the Kubernetes API concepts ("Response status kinds"). The
403 message format is the apiserver's ``forbiddenMessage``
(k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go):
``<what> is forbidden: User "<user>" cannot <verb> resource "<resource>" in API
group "<group>" [in the namespace "<ns>" | at the cluster scope]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Cause",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "NotFound",
    "Unauthorized",
    "Unavailable",
    "from_api_exception",
    "from_kopf_error",
    "from_status",
    "from_transport_error",
]


@dataclass(frozen=True)
class Cause:
    """One ``details.causes`` entry of a 422: which field, and what is wrong with it."""

    field: str
    message: str
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class KubeError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP status, or None when nothing answered."""

    def __init__(
        self, message: str, *, status: int | None = None, reason: str | None = None, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.body = body or {}

    def summary(self) -> str:
        """One line for logs and readiness reports."""
        return self.message


class NotFound(KubeError):
    """404: the object, its namespace or its kind does not exist."""


class Conflict(KubeError):
    """409: the object already exists, or the write carried a stale resourceVersion."""


class Gone(KubeError):
    """410: the resourceVersion asked for is too old (list again, then watch)."""


class Unauthorized(KubeError):
    """401: the server did not accept the credentials (expired or wrong token)."""


class Forbidden(KubeError):
    """403: RBAC (or an admission rule) refused; ``user``/``verb``/``resource`` as the server named them."""

    def __init__(
        self,
        message: str,
        *,
        user: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        group: str | None = None,
        namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.user = user
        self.verb = verb
        self.resource = resource
        self.group = group
        self.namespace = namespace

    @property
    def is_rbac(self) -> bool:
        return self.user is not None and self.verb is not None

    def summary(self) -> str:
        """``forbidden: <user> cannot <verb> <resource>`` (or the server's message when it is no RBAC denial)."""
        if not self.is_rbac:
            return f"forbidden: {self.message}"
        resource = self.resource or "?"
        if self.group:
            resource = f"{resource}.{self.group}"
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"forbidden: {self.user} cannot {self.verb} {resource}{where}"


class Invalid(KubeError):
    """422 (or 400): the server refused the object or request; ``causes`` name the fields."""

    def __init__(self, message: str, *, causes: tuple[Cause, ...] = (), **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.causes = causes


class Unavailable(KubeError):
    """No usable answer: unreachable, timed out, 5xx or 429 (retry later). ``server`` is the URL tried."""

    def __init__(self, message: str, *, server: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.server = server

    def summary(self) -> str:
        if self.server is None:
            return f"Kubernetes unreachable: {self.message}"
        if self.status is None:
            return f"Kubernetes unreachable at {self.server}: {self.message}"
        return f"Kubernetes unavailable at {self.server}: {self.message}"


_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]*)"'
    r'(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]*)")?'
)


def _parse_body(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode("utf-8", "replace")
    try:
        body = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def from_status(
    status: int | None, body: Any = None, *, what: str = "", server: str | None = None, reason: str | None = None
) -> KubeError:
    """The error for an HTTP ``status`` and its (JSON ``Status``) ``body``; ``what`` prefixes the message."""
    parsed = _parse_body(body)
    message = parsed.get("message") or reason or (body if isinstance(body, str) and body else "") or ""
    status_reason = parsed.get("reason") or reason
    text = f"{what}: {status} {message}".strip() if what else f"{status} {message}".strip()
    kwargs: dict[str, Any] = {"status": status, "reason": status_reason, "body": parsed}
    if status is None or status >= 500 or status == 429:
        return Unavailable(text, server=server, **kwargs)
    if status == 404:
        return NotFound(text, **kwargs)
    if status == 409:
        return Conflict(text, **kwargs)
    if status == 410:
        return Gone(text, **kwargs)
    if status == 401:
        return Unauthorized(text, **kwargs)
    if status == 403:
        m = _FORBIDDEN.search(message)
        fields = {k: v for k, v in m.groupdict().items()} if m else {}
        if fields.get("group") == "":
            fields["group"] = None
        return Forbidden(text, **fields, **kwargs)
    if status in (400, 422):
        details = parsed.get("details") or {}
        causes = tuple(
            Cause(str(c.get("field") or ""), str(c.get("message") or ""), str(c.get("reason") or ""))
            for c in details.get("causes") or []
            if isinstance(c, dict)
        )
        return Invalid(text, causes=causes, **kwargs)
    return KubeError(text, **kwargs)


def from_api_exception(exc: Any, *, what: str = "", server: str | None = None) -> KubeError:
    """Translate a ``kubernetes.client.ApiException`` (status 0/None = no HTTP answer)."""
    status = getattr(exc, "status", None) or None
    return from_status(
        status, getattr(exc, "body", None), what=what, server=server, reason=getattr(exc, "reason", None)
    )


def from_transport_error(exc: BaseException, *, what: str = "", server: str | None = None) -> Unavailable:
    """An error before any HTTP answer (urllib3, aiohttp, socket, TLS, timeout): :class:`Unavailable`."""
    detail = f"{exc.__class__.__name__}: {exc}"
    return Unavailable(f"{what}: {detail}" if what else detail, server=server)


def from_kopf_error(exc: Any, *, what: str = "", server: str | None = None) -> KubeError:
    """Translate Kopf's ``kopf._cogs.clients.errors.APIError`` (its aiohttp client), or a transport error."""
    status = getattr(exc, "status", None)
    if status is None:
        return from_transport_error(exc, what=what, server=server)
    body = {"message": getattr(exc, "message", None) or str(exc), "details": getattr(exc, "details", None) or {}}
    return from_status(status, body, what=what, server=server)
