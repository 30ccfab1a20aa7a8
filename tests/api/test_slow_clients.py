"""Slow clients are cut off: a request head that does not complete in time closes the
connection; a body that stalls is answered 408."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from tests.api.harness import ApiServer


def _connect(api: ApiServer) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", api.port), timeout=60)
    return api.trust.wrap_socket(raw, server_hostname="127.0.0.1")


def _read_all(sock: ssl.SSLSocket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout
    only guards against a server that never closes)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_stalled_request_head_is_closed(
    serve: Callable[..., ApiServer], sqlite_url: str, dead_kubeconfig: Path
) -> None:
    api = serve(sqlite_url, dead_kubeconfig, header_timeout_seconds=1.0)
    with _connect(api) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # ... and nothing more
        assert _read_all(sock) == b""  # closed by the server, no response
    with _connect(api) as sock:  # a connection that sends nothing at all
        assert _read_all(sock) == b""
    with _connect(api) as sock:  # a prompt request is served as ever
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _read_all(sock).startswith(b"HTTP/1.1 200")


def test_a_stalled_body_is_answered_408(
    serve: Callable[..., ApiServer], sqlite_url: str, dead_kubeconfig: Path
) -> None:
    api = serve(sqlite_url, dead_kubeconfig, body_timeout_seconds=1.0)
    with _connect(api) as sock:
        sock.sendall(
            b"POST /v1/admin/tenancies HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            b"admin-test-token-0123456789\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"name": '
        )
        reply = _read_all(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'"code":"request_timeout"' in reply.replace(b" ", b"")
