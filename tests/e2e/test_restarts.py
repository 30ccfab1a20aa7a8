"""Killing a kubelet, a device plugin (the DRA driver in dra mode) or a fabric service mid-flight
converges with nothing leaked: the running containers finish, new work placed after the restart
runs, and every partition and lease is released. And restarts under a running
container: containerd, the device plugin (the DRA driver) and the kubelets restart, the
container keeps running and keeps its GPUs, and the plugin registers again with the restarted
kubelet, so new work gets GPUs too."""

from __future__ import annotations

import pytest
from kubernetes import client

from devtools.sandbox import runner

from .conftest import (
    TIMEOUT,
    UNTIL_CANCELLED,
    Tenant,
    activations,
    crash_node_daemon,
    settled,
    wait_for,
    wait_status,
)

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


@pytest.mark.parametrize("service", ["kubelet", "device-plugin", "fabric"])
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
        # SIGKILL (a crash), then started again (a kubelet in the node's mount namespace)
        if service == "kubelet":
            sandbox.real_nodes[node].restart("kubelet")
        else:
            crash_node_daemon(sandbox, service, node)
    # Work submitted after the restart is placed and run too.
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": ["sleep", "2"]})
    assert status == 202, body
    ids.append(body["id"])
    for cid in ids:
        final = wait_status(tenant, cid, "Succeeded", "Failed", timeout=180)
        assert final["status"] == "Succeeded", f"{cid}: {final['status']}: {final.get('message')}"
    wait_for(lambda: settled(sandbox, k8s), timeout=180, what="no partition active and every lease Free")
    assert all(not acts for acts in activations(sandbox).values())


def _held(admin: Tenant, pod: str) -> list[tuple[str, str, str]]:
    status, gpus = admin.call("GET", "/v1/admin/gpus")
    assert status == 200, gpus
    return sorted((g["node"], g["pci_address"], g["state"]) for g in gpus["data"] if g.get("pod") == pod)


def test_restarts_lose_no_running_container_and_no_gpu(sandbox: runner.Sandbox, tenant: Tenant, admin: Tenant) -> None:
    status, made = tenant.call(
        "POST", "/v1/containers", {"image": "busybox:1.36", "gpus": 2, "command": UNTIL_CANCELLED}
    )
    assert status == 202, made
    running = tenant.wait(made["id"], "Running")
    node, pod = running["node_name"], f"gpucaas-{made['id']}"
    held = wait_for(
        lambda: (h := _held(admin, pod)) and len(h) == 2 and h,
        TIMEOUT,
        interval=0.3,
        what="the container's two GPUs leased",
    )

    sandbox.real_nodes[node].restart("containerd")
    crash_node_daemon(sandbox, "device-plugin", node)  # SIGKILL, as every restart here
    for real in sandbox.real_nodes.values():
        real.restart("kubelet")

    # New work gets GPUs: the plugin registered again with the restarted kubelet.
    ran = tenant.caasctl("run", "busybox:1.36", "--gpus", "2", "--", "ls", "/dev/vfio")
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert len(ran.stdout.split()) == 3  # two IOMMU groups and the vfio container node

    # The first container never stopped and still holds its GPUs.
    status, now = tenant.call("GET", f"/v1/containers/{made['id']}")
    assert status == 200 and now["status"] == "Running", now
    assert _held(admin, pod) == held
    assert tenant.call("DELETE", f"/v1/containers/{made['id']}")[0] == 200
    wait_for(lambda: not _held(admin, pod), TIMEOUT, interval=0.3, what="the GPUs given back")
