"""The placement service's error tree, named by meaning; translated to HTTP in server.py."""

from __future__ import annotations


class PlacementError(Exception):
    """Base of every error the placement service raises."""

    status = 500
    code = "internal"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(PlacementError):
    """A scheduler request that does not follow the extender protocol."""

    status = 400
    code = "invalid_request"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field


class BindFailed(PlacementError):
    """The pod could not be bound to the node through the Kubernetes API."""

    status = 500
    code = "bind_failed"


class NoRoom(BindFailed):
    """The node no longer has a whole free partition of the pod's size when its bind arrives:
    another pod was bound there between this pod's filter and its bind. kube-scheduler
    takes the refused bind as a failed binding cycle and schedules the pod again."""

    code = "no_room"


class BindingDisabled(PlacementError):
    """The bind verb was called but no Kubernetes binder is configured."""

    status = 501
    code = "bind_disabled"


class KubernetesUnavailable(PlacementError):
    """The Kubernetes API could not be reached."""

    status = 503
    code = "kubernetes_unavailable"
