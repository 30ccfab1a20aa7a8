"""What the store needs to know about the HTTP request it is serving, without new arguments.

The HTTP layer sets a :class:`RequestContext` (field manager, ``force``,
``fieldValidation``, the ``User-Agent``) for the duration of one request; the store's
write paths read it and add ``Warning`` headers to it. Writes made by the emulator's own
controllers (namespace cleanup, garbage collection, quota status) run outside any
request and see ``None``.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

FIELD_VALIDATION_VALUES = ("Ignore", "Warn", "Strict")


@dataclass
class RequestContext:
    user_agent: str = ""
    field_manager: str | None = None
    force: bool = False
    field_validation: str = "Warn"  # the server's default since Kubernetes 1.27
    warnings: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)  # duplicate JSON keys in the body
    applying: bool = False  # a server-side apply already set the object's managedFields

    def manager(self, default_operation: str = "Update") -> str:
        """The field manager of a write: ``fieldManager``, else the User-Agent's prefix.

        As the API server does (``prefixFromUserAgent`` in
        k8s.io/apiserver/pkg/endpoints/handlers/rest.go): the part before the first ``/``.
        """
        if self.field_manager:
            return self.field_manager
        return (self.user_agent.split("/", 1)[0] or "unknown")[:128]

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)


CURRENT: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("kube_emulator_request",
                                                                                default=None)


def current() -> RequestContext | None:
    return CURRENT.get()


def warn(text: str) -> None:
    """Add a ``Warning`` header to the response of the request being served (if any)."""
    ctx = CURRENT.get()
    if ctx is not None:
        ctx.warn(text)
