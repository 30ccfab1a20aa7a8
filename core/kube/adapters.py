"""Which adapter a component gets: the light :class:`.rest.RestKube` where it serves, the official
client's :class:`.client.Kube` where only that can.

This module sits above both (neither :mod:`.rest` nor :mod:`.client` imports the other) and
imports :mod:`.client`, hence the ``kubernetes`` package, only when a ``Kube`` is needed: a node
daemon that connects through :func:`connect` to a kubeconfig or ServiceAccount without credential
plugins never loads the official client's models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from .connection import KubeConnection
from .rest import NeedsFullClient, RestKube
from .retry import DEFAULT_RETRY, RetryPolicy

if TYPE_CHECKING:
    import kubernetes

    from .client import Kube

#: Either adapter: the same ``call``/``json``/``request``/``custom``/``server``/``close``, the same
#: errors and retries (:class:`RestKube` offers the subset of ``custom`` node daemons use).
KubeAdapter: TypeAlias = "RestKube | Kube"


def connect(
    connection: KubeConnection | None = None,
    *,
    timeout: tuple[float, float] | float | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> KubeAdapter:
    """A :class:`RestKube` for ``connection``, or the official client's ``Kube`` where only it can
    (a kubeconfig user with an ``exec`` or ``auth-provider`` plugin)."""
    try:
        return RestKube(connection, timeout=timeout, retry=retry)
    except NeedsFullClient:
        from .client import Kube

        return Kube(connection, timeout=timeout, retry=retry)


def adapter(api: KubeAdapter | kubernetes.client.ApiClient) -> KubeAdapter:
    """``api`` itself when it is an adapter, else a ``Kube`` around the official ``ApiClient``
    (which its owner closes)."""
    if isinstance(api, RestKube):
        return api
    from .client import Kube

    return Kube.of(api)
