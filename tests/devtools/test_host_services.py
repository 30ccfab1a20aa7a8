"""The sandbox's forwarders from the node bridges to this machine's servers: a connection
carried through one is closed when it stops (a pod's watch left open through it would keep
kube-apiserver's graceful shutdown waiting on that request)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from devtools.ports import free_port
from devtools.sandbox.host_services import Forwarder
from devtools.waiting import wait_for


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[socket.socket]]]:
    """A server on loopback that keeps each accepted connection open (as kube-apiserver holds a watch)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()
    for conn in accepted:
        conn.close()


def test_stopping_a_forwarder_closes_the_connections_it_carries(upstream: tuple[int, list[socket.socket]]) -> None:
    port, accepted = upstream
    forwarder = Forwarder(("127.0.0.1", free_port()), port)
    forwarder.start()
    client = socket.create_connection(forwarder.server.getsockname(), timeout=10)
    client.sendall(b"GET /watch\n")
    server_side = wait_for(lambda: accepted[0] if accepted else None, 10, what="the forwarded connection accepted")
    server_side.settimeout(10)
    assert server_side.recv(64) == b"GET /watch\n"  # carried through

    forwarder.stop()

    # both ends see the connection end: the upstream server's request is over, and so is the client's
    assert server_side.recv(64) == b""
    client.settimeout(10)
    assert client.recv(64) == b""
    client.close()
