"""The sandbox with real nodes (containerd, runc, the kubelet run the containers), in each allocation mode.

Each mode gets a sandbox of its own (package scope, one after the other); the tests use the
tenant's interfaces (the API, caasctl) and read what happened from the cluster and the
fabric service's bookkeeping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gpucaas.devtools import waiting
from gpucaas.programs.sandbox import runner
from tests.e2e.conftest import Caller
from tests.fixtures.sandbox import package_sandbox

CAASCTL = Path(sys.executable).with_name("caasctl")
TIMEOUT = 240.0


class Tenant(Caller):
    """A token's view of the API (:class:`tests.e2e.conftest.Caller`), with caasctl beside it."""

    def caasctl(
        self, *args: str, timeout: float = TIMEOUT, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "GPUCAAS_CONFIG": str(runner.caasctl_config_path(self.sandbox)),
            "GPUCAAS_TOKEN": self.token,
            "COLUMNS": "200",
        }
        return subprocess.run(
            [str(CAASCTL), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False, input=stdin
        )

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


def new_tenant(admin: Tenant, name: str, gpu_quota: int) -> Tenant:
    """A tenancy (made once per sandbox) and a fresh admin-scope token of it."""
    status, body = admin.call("POST", "/v1/admin/tenancies", {"name": name, "gpu_quota": gpu_quota})
    assert status in (201, 409), body
    status, body = admin.call("POST", f"/v1/admin/tenancies/{name}/tokens", {})
    assert status == 201, body
    return Tenant(admin.sandbox, body["token"])


@pytest.fixture(scope="package")
def tenant(sandbox: runner.Sandbox, admin: Tenant) -> Tenant:
    return new_tenant(admin, "realnode", 16)
