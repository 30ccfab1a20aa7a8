"""A scripted HTTP server that answers as the Kubernetes API server documents, for what the
a healthy API server does not answer (a 403 for a given identity, 503 then 200, ...).

Bodies are ``metav1.Status`` objects as the API server writes them (Kubernetes API
concepts, "Response status kinds"; the 403 wording is the apiserver's forbiddenMessage in
k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def forbidden(user: str, verb: str, resource: str, group: str = "", namespace: str | None = None) -> dict:
    """The Status a real API server answers when RBAC denies ``user`` ``verb`` on ``resource``."""
    what = f"{resource}.{group}" if group else resource
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group '
        f'"{group}" {where}',
        "reason": "Forbidden",
        "details": {"group": group, "kind": resource},
        "code": 403,
    }


FORBIDDEN_STATUS = forbidden("system:serviceaccount:gpucaas-system:gpucaas-api", "list", "namespaces")
NOT_FOUND_STATUS = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "NotFound",
    "message": "not found",
    "code": 404,
}


class Scripted(ThreadingHTTPServer):
    """Answers each request with the next (status, body) of ``script`` (the last one repeats).
    A body that is a list is a watch's stream: one JSON event a line, then the end of the stream."""

    daemon_threads = True

    def __init__(self, script: list[tuple[int, dict | list[dict]]]) -> None:
        self.script = list(script)
        self.requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(inner) -> None:  # noqa: N805 - `self` is the server
                self.requests.append(inner.path)
                status, body = self.script.pop(0) if len(self.script) > 1 else self.script[0]
                data = (
                    b"".join(json.dumps(event).encode() + b"\n" for event in body)
                    if isinstance(body, list)
                    else json.dumps(body).encode()
                )
                inner.send_response(status)
                inner.send_header("Content-Type", "application/json")
                inner.send_header("Content-Length", str(len(data)))
                inner.end_headers()
                inner.wfile.write(data)

            do_POST = do_GET  # noqa: N815

            def log_message(inner, *args: object) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def write_kubeconfig(path: Path, server: str, token: str = "t0k3n") -> Path:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: scripted
  cluster: {{server: "{server}"}}
users:
- name: sa
  user: {{token: {token}}}
contexts:
- name: scripted
  context: {{cluster: scripted, user: sa}}
current-context: scripted
"""
    )
    return path


@pytest.fixture
def scripted() -> Iterator[Callable[[list[tuple[int, dict | list[dict]]]], Scripted]]:
    """Start scripted servers: ``scripted([(status, body), ...])`` (shut down after the test)."""
    servers: list[Scripted] = []

    def start(script: list[tuple[int, dict | list[dict]]]) -> Scripted:
        srv = Scripted(script)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
