"""The checks the chart's `helm test` pods run (gpucaas/helm_test.py), against local servers
standing in for the API and for kube-apiserver: they pass once the condition holds, wait for it
meanwhile, and fail with the last answer when it never does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpucaas import helm_test


class _Server:
    """Answers GET with the next of ``answers`` (status, body), repeating the last one."""

    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers = answers
        self.requests: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append({"path": self.path, **dict(self.headers)})
                status, body = server.answers[0] if len(server.answers) == 1 else server.answers.pop(0)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[_Server] = []

    def start(answers: list[tuple[int, Any]]) -> _Server:
        servers.append(_Server(answers))
        return servers[-1]

    yield start
    for s in servers:
        s.http.shutdown()
        s.http.server_close()


def test_api_check_waits_for_readyz_then_passes(serve: Any) -> None:
    api = serve([(503, {"status": "unavailable", "database": "OperationalError"}), (200, {"status": "ok"})])
    assert "answered 200" in helm_test.api_ready(f"{api.url}/readyz", timeout_s=30, poll_s=0.01)
    assert [r["path"] for r in api.requests] == ["/readyz", "/readyz"]


def test_api_check_fails_with_the_last_answer(serve: Any) -> None:
    api = serve([(503, {"status": "unavailable", "kubernetes": "Kubernetes unreachable at https://x"})])
    with pytest.raises(helm_test.CheckFailed, match="503.*Kubernetes unreachable"):
        helm_test.api_ready(f"{api.url}/readyz", timeout_s=0.2, poll_s=0.01)


def _deployment(ready: int, updated: int, generation: int = 2, observed: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpucaas-controller", "generation": generation},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": observed, "readyReplicas": ready, "updatedReplicas": updated},
    }


@pytest.fixture
def service_account(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text("the-token\n")
    return tmp_path


def test_controller_check_waits_for_every_replica_of_the_newest_spec(serve: Any, service_account: Path) -> None:
    kube = serve([(200, _deployment(2, 2, observed=1)), (200, _deployment(1, 2)), (200, _deployment(2, 2))])
    message = helm_test.controller_ready(
        "gpucaas-system", "gpucaas-controller", server=kube.url, service_account=service_account, poll_s=0.01
    )
    assert message == "deployment gpucaas-system/gpucaas-controller: 2 of 2 replicas Ready"
    assert len(kube.requests) == 3
    assert kube.requests[0]["path"] == "/apis/apps/v1/namespaces/gpucaas-system/deployments/gpucaas-controller"
    assert kube.requests[0]["Authorization"] == "Bearer the-token"


def test_controller_check_says_what_is_missing(serve: Any, service_account: Path) -> None:
    kube = serve([(200, _deployment(1, 1))])
    with pytest.raises(helm_test.CheckFailed, match="1 of 2 replicas Ready, 1 updated"):
        helm_test.controller_ready(
            "ns", "gpucaas-controller", server=kube.url, service_account=service_account, timeout_s=0.2, poll_s=0.01
        )
    forbidden = serve([(403, {"kind": "Status", "message": "deployments is forbidden"})])
    with pytest.raises(helm_test.CheckFailed, match="403.*forbidden"):
        helm_test.controller_ready(
            "ns", "x", server=forbidden.url, service_account=service_account, timeout_s=0.1, poll_s=0.01
        )


def test_command_line(serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    api = serve([(200, {"status": "ok"})])
    assert helm_test.main(["api", f"{api.url}/readyz"]) == 0
    assert helm_test.main(["nonsense"]) == 2
    assert "usage" in capsys.readouterr().err
