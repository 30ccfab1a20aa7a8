"""A running sandbox (the whole control plane + two simulated HGX H100 nodes) for end-to-end tests.

The tests talk to it as tenants and an admin would: HTTPS to the API, and, to check
the outcome, the Kubernetes API (emulator), the nodes' fabric sockets and CDI specs.
"""

from __future__ import annotations

import json
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gpucaas.core.crds import GPULEASE_PLURAL, GROUP, VERSION
from gpucaas.core.fabric_client import FabricClient
from gpucaas.programs.sandbox import runner
from gpucaas.devtools.waiting import wait_for


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The chart-RBAC audit checks read what every other end-to-end test did: run them last."""
    last = [i for i in items if i.module is not None and i.module.__name__.endswith("test_rbac_of_the_chart")]
    items[:] = [i for i in items if i not in last] + last


class Caller:
    """One bearer token's view of the API."""

    def __init__(self, sandbox: runner.Sandbox, token: str) -> None:
        self.sandbox = sandbox
        self.token = token
        self.ctx = ssl.create_default_context(cafile=str(sandbox.tls.ca_cert))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.sandbox.api_url + path, data=data, method=method)  # noqa: S310
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:  # noqa: S310
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw and resp.headers.get_content_type() == "application/json" else raw.decode())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode()


@pytest.fixture(scope="package")
def sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    # A short path: unix socket paths (kubelet and plugin sockets) must stay under 108 bytes.
    state = Path(tempfile.mkdtemp(prefix="gpucaas-e2e-", dir="/tmp"))
    sb = runner.start(state, api_port=runner.free_port(), run_seconds=4.0)
    try:
        yield sb
    finally:
        sb.stop()
        if request.session.testsfailed:
            print(f"\nsandbox state and service logs kept in {state}/logs")
        else:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="package")
def admin(sandbox: runner.Sandbox) -> Caller:
    return Caller(sandbox, sandbox.admin_token)


@pytest.fixture(scope="package")
def k8s(sandbox: runner.Sandbox) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(str(sandbox.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="package")
def tenant_factory(admin: Caller, sandbox: runner.Sandbox) -> Callable[[str], Caller]:
    def make(name: str) -> Caller:
        status, body = admin.call("POST", "/v1/admin/tenancies", {"name": name, "gpu_quota": 16})
        assert status in (201, 409), body
        status, body = admin.call("POST", f"/v1/admin/tenancies/{name}/tokens", {})
        assert status == 201, body
        return Caller(sandbox, body["token"])

    return make




def container_status(caller: Caller, cid: str) -> dict[str, Any]:
    status, body = caller.call("GET", f"/v1/containers/{cid}")
    assert status == 200, body
    return body


def wait_status(caller: Caller, cid: str, *wanted: str, timeout: float = 120.0) -> dict[str, Any]:
    return wait_for(lambda: (c := container_status(caller, cid))["status"] in wanted and c,
                    timeout, what=f"container {cid} in {wanted}")


def activations(sandbox: runner.Sandbox) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for node in sandbox.nodes:
        with FabricClient(node.fabric_socket, timeout=10) as fc:
            out[node.name] = fc.activations()
    return out


def leases(k8s: client.ApiClient) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(k8s).list_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL)["items"]


def allocated_devices(k8s: client.ApiClient, namespace: str, pod: str) -> list[str]:
    for ev in client.CoreV1Api(k8s).list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items:
        if ev.reason == "DevicesAllocated":
            ids = ev.message.split(": ", 1)[1].split(";")[0].split(" (preferred")[0]
            return [d.strip() for d in ids.split(",")]
    return []


def settled(sandbox: runner.Sandbox, k8s: client.ApiClient) -> bool:
    """Nothing held: no active activation on any node, every lease Free, and every node's
    kubelet (the node agent) sees all 8 GPUs healthy again."""
    acts = activations(sandbox)
    nodes = client.CoreV1Api(k8s).list_node(label_selector="gpucaas.dev/gpu-node=true").items
    return (all(not a for a in acts.values())
            and all((lz.get("status") or {}).get("state") == "Free" for lz in leases(k8s))
            and all((n.status.allocatable or {}).get("nvidia.com/gpu") == "8" for n in nodes))


def sandbox_dir(sandbox: runner.Sandbox) -> Path:
    return sandbox.state_dir
