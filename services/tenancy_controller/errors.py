"""The tenancy controller's errors, named by meaning.

Domain code raises :class:`InvalidSpec` for a Tenancy the controller cannot
realise (it becomes ``phase: Failed`` with a condition naming the field); the
Kubernetes adapter re-raises client errors as :class:`KubeError` subclasses
chained to the original. Kopf handlers translate them at the edge:
``InvalidSpec`` -> Failed status (no retry until the spec changes), the others
-> ``kopf.TemporaryError`` (retried with backoff).
"""

from __future__ import annotations


class TenancyControllerError(Exception):
    """Base of every error the tenancy controller raises."""


class InvalidSpec(TenancyControllerError):
    """The Tenancy cannot be realised as written; ``field`` names the culprit."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


class NotReadyYet(TenancyControllerError):
    """Something the reconcile depends on is still settling (retry later)."""


class PodsRemaining(NotReadyYet):
    """Deletion waits: the tenancy's namespace still holds pods."""

    def __init__(self, namespace: str, pods: list[str]) -> None:
        shown = ", ".join(pods[:5]) + (" ..." if len(pods) > 5 else "")
        super().__init__(f"waiting for {len(pods)} pod(s) in {namespace} to be gone: {shown}")
        self.namespace = namespace
        self.pods = pods


class NFSServerUnresolvable(NotReadyYet):
    """spec.nfs.server is a host name that does not resolve (yet)."""


class KubeError(TenancyControllerError):
    """The Kubernetes API answered with an error (or could not be reached)."""

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeUnavailable(KubeError):
    """The API server could not be reached or answered 5xx / 429."""


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: a write raced another writer, or the object already exists."""


class Invalid(KubeError):
    """422 / 400: the API server refused the object (schema, immutable field)."""


class Forbidden(KubeError):
    """403: not allowed (RBAC), or the namespace is being terminated."""
