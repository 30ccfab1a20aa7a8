"""The tenancy controller's errors, named by meaning.

Domain code raises :class:`InvalidSpec` for a Tenancy the controller cannot
realise (it becomes ``phase: Failed`` with a condition naming the field); the
core Kubernetes adapter raises its :class:`KubeError` subclasses chained to the
original. Kopf handlers translate them at the edge:
``InvalidSpec`` -> Failed status (no retry until the spec changes), the others
-> ``kopf.TemporaryError`` (retried with backoff).
"""

from __future__ import annotations

# The Kubernetes errors are the core adapter's one tree (core.kube.errors), named here
# for the controller's modules; the controller defines none of its own.
from core.kube.errors import Conflict, Forbidden, Invalid, KubeError, NotFound, Unavailable

__all__ = [
    "Conflict",
    "Forbidden",
    "InvalidSpec",
    "Invalid",
    "KubeError",
    "NFSServerUnresolvable",
    "NotFound",
    "NotReadyYet",
    "PodsRemaining",
    "TenancyControllerError",
    "Unavailable",
]


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
