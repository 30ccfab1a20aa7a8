"""The sandbox with real nodes (containerd, runc, the kubelet run the containers), in each allocation mode.

Each mode gets a sandbox of its own (package scope, one after the other); the tests use the
tenant's interfaces (the API, caasctl) and read what happened from the cluster and the
fabric service's bookkeeping.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gpucaas.devtools import waiting
from gpucaas.programs.sandbox import runner
from tests.fixtures.sandbox import package_sandbox

CAASCTL = Path(sys.executable).with_name("caasctl")
TIMEOUT = 240.0


@dataclass
class Tenant:
    sandbox: runner.Sandbox
    token: str

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.sandbox.api_url + path, data=data, method=method)  # noqa: S310
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        ctx = ssl.create_default_context(cafile=str(self.sandbox.tls.ca_cert))
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:  # noqa: S310
                raw = resp.read()
                return resp.status, json.loads(raw) if raw.startswith((b"{", b"[")) else raw.decode()
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def caasctl(self, *args: str, timeout: float = TIMEOUT, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPUCAAS_CONFIG": str(runner.caasctl_config_path(self.sandbox)),
               "GPUCAAS_TOKEN": self.token, "COLUMNS": "200"}
        return subprocess.run([str(CAASCTL), *args], env=env, capture_output=True, text=True, timeout=timeout,
                              check=False, input=stdin)

    def wait(self, cid: str, *statuses: str) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status, body = self.call("GET", f"/v1/containers/{cid}")
            assert status == 200, body
            return body if body["status"] in statuses else None
        return waiting.wait_for(reached, TIMEOUT, interval=0.3, what=f"container {cid} in {statuses}")


@pytest.fixture(scope="package", params=["device-plugin", "dra"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    with package_sandbox(request, "gpucaas-real-", allocation_mode=request.param, real_nodes=2) as sb:
        yield sb


@pytest.fixture(scope="package")
def k8s(sandbox: runner.Sandbox) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(str(sandbox.kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture(scope="package")
def admin(sandbox: runner.Sandbox) -> Tenant:
    return Tenant(sandbox, sandbox.admin_token)


@pytest.fixture(scope="package")
def tenant(sandbox: runner.Sandbox, admin: Tenant) -> Tenant:
    status, body = admin.call("POST", "/v1/admin/tenancies", {"name": "realnode", "gpu_quota": 16})
    assert status in (201, 409), body
    status, body = admin.call("POST", "/v1/admin/tenancies/realnode/tokens", {})
    assert status == 201, body
    return Tenant(sandbox, body["token"])
