"""A node daemon's Prometheus ``/metrics`` on a port of its own (prometheus-client's HTTP
server in a thread): the device plugin's and the DRA driver's."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, start_http_server


class MetricsServer:
    """Serving ``registry`` on ``0.0.0.0:port`` (0: a free port, then ``port`` says which)."""

    def __init__(self, port: int, registry: CollectorRegistry) -> None:
        self._server: Any
        self._server, self._thread = start_http_server(port, registry=registry)
        self.port: int = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
