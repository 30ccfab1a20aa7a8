"""Restarting a node agent, a device plugin (the DRA driver in dra mode) or a fabric service mid-flight
converges with nothing leaked."""

from __future__ import annotations

import pytest
from kubernetes import client

from gpucaas.programs.sandbox import runner

from .conftest import activations, node_service, settled, wait_for, wait_status

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


@pytest.mark.parametrize("service", ["node-agent", "device-plugin", "fabric"])
def test_restart_mid_flight_converges(
    sandbox: runner.Sandbox, tenant_factory, k8s: client.ApiClient, service: str
) -> None:
    tenant = tenant_factory(f"restart-{service}")
    ids = []
    for gpus in (2, 4):
        status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": gpus, "command": ["sleep", "8"]})
        assert status == 202, body
        ids.append(body["id"])
    running = [wait_status(tenant, cid, "Running") for cid in ids]
    nodes = {c["node_name"] for c in running}
    for node in nodes:
        sandbox.supervisor.restart(f"{node_service(service)}-{node}", kill=True)
    # Work submitted after the restart is placed and run too.
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": ["sleep", "2"]})
    assert status == 202, body
    ids.append(body["id"])
    for cid in ids:
        final = wait_status(tenant, cid, "Succeeded", "Failed", timeout=180)
        assert final["status"] == "Succeeded", f"{cid}: {final['status']}: {final.get('message')}"
    wait_for(lambda: settled(sandbox, k8s), timeout=180, what="no partition active and every lease Free")
    assert all(not acts for acts in activations(sandbox).values())
