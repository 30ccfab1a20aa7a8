"""The one Kubernetes adapter of gpucaas: configuration, timeouts, retries and errors.

Every service, the sandbox, its node agent and doctor reach Kubernetes through
this package (``from core import kube``): :class:`KubeConnection` /
:func:`load_configuration` say where and how, :class:`Kube` makes calls with
timeouts and bounded retries, :mod:`.errors` is the one error tree, and
:class:`Informer` (:mod:`.informer`) is the one list-and-watch loop over either adapter.

Node daemons that make a handful of calls use :class:`RestKube` (:mod:`.rest`): the
same calls, errors and retries over plain HTTPS, without importing the official
client's ~600 generated model modules (about 35 MB resident, of a 60 MB budget).
:func:`connect` (:mod:`.adapters`, above both adapters: neither imports the other) gives
a daemon the light one where it serves, and :data:`KubeAdapter` names either. The names
that need the official client (``Kube``, ``translated``, ``load_configuration``,
``new_api_client``, ``kopf_connection_info``) are imported on first use, so
importing this package, its errors or :class:`RestKube` does not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .adapters import KubeAdapter, adapter, connect
from .connection import KubeConnection
from .errors import (
    Cause,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Unauthorized,
    Unavailable,
    from_api_exception,
    from_kopf_error,
    from_status,
    from_transport_error,
)
from .rest import RestKube
from .retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy, retrying

if TYPE_CHECKING:
    from .client import Kube, translated
    from .config import kopf_connection_info, load_configuration, new_api_client
    from .informer import Informer
    from .watched import WatchedObjects

_LAZY = {
    "Informer": "informer",
    "WatchedObjects": "watched",
    "Kube": "client",
    "translated": "client",
    "load_configuration": "config",
    "new_api_client": "config",
    "kopf_connection_info": "config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_RETRY",
    "NO_RETRY",
    "Cause",
    "Conflict",
    "Forbidden",
    "Gone",
    "Informer",
    "Invalid",
    "Kube",
    "KubeAdapter",
    "KubeConnection",
    "KubeError",
    "NotFound",
    "RestKube",
    "RetryPolicy",
    "Unauthorized",
    "Unavailable",
    "WatchedObjects",
    "adapter",
    "connect",
    "from_api_exception",
    "from_kopf_error",
    "from_status",
    "from_transport_error",
    "kopf_connection_info",
    "load_configuration",
    "new_api_client",
    "retrying",
    "translated",
]
