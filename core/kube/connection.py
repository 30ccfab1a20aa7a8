"""Where a Kubernetes API server is and how to reach it (no client library imported here).

Read by both the official client's configuration (:mod:`.config`) and the light REST
path (:mod:`.rest`) that node daemons use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Where a pod finds its ServiceAccount credentials (Kubernetes docs, "Accessing the API from a Pod").
SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class KubeConnection:
    """Where the API server is, how to authenticate, and how long one request may take."""

    kubeconfig: Path | None = None
    context: str | None = None
    server: str | None = None
    token: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None
    insecure: bool = False
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    pool_size: int = 32

    @property
    def request_timeout(self) -> tuple[float, float]:
        """The ``_request_timeout`` of the official client: (connect, read) seconds."""
        return (self.connect_timeout_s, self.read_timeout_s)
