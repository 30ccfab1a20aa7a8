"""The one Kubernetes adapter of gpucaas: configuration, timeouts, retries and errors.

Every service, the sandbox, its node agent and doctor reach Kubernetes through
this package (``from gpucaas.core import kube``): :class:`KubeConnection` /
:func:`load_configuration` say where and how, :class:`Kube` makes calls with
timeouts and bounded retries, and :mod:`.errors` is the one error tree.
"""

from __future__ import annotations

from .client import Kube, translated
from .config import KubeConnection, kopf_connection_info, load_configuration, new_api_client
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
from .retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy, retrying

__all__ = [
    "DEFAULT_RETRY", "NO_RETRY", "Cause", "Conflict", "Forbidden", "Gone", "Invalid", "Kube", "KubeConnection",
    "KubeError", "NotFound", "RetryPolicy", "Unauthorized", "Unavailable", "from_api_exception",
    "from_kopf_error", "from_status", "from_transport_error", "kopf_connection_info", "load_configuration",
    "new_api_client", "retrying", "translated",
]
