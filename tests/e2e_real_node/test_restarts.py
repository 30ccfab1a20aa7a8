"""Restarts under a running container, for real: containerd, the device plugin (the DRA driver in dra mode) and
the kubelet restart under a running container, which keeps running and keeps its GPUs; the
plugin registers again with the restarted kubelet, so new work gets GPUs too."""

from __future__ import annotations

from gpucaas.devtools import waiting
from gpucaas.programs.sandbox import runner

from .conftest import TIMEOUT, Tenant


def _held(admin: Tenant, pod: str) -> list[tuple[str, str, str]]:
    status, gpus = admin.call("GET", "/v1/admin/gpus")
    assert status == 200, gpus
    return sorted((g["node"], g["pci_address"], g["state"]) for g in gpus["data"] if g.get("pod") == pod)


def test_restarts_lose_no_running_container_and_no_gpu(sandbox: runner.Sandbox, tenant: Tenant, admin: Tenant) -> None:
    status, made = tenant.call(
        "POST", "/v1/containers", {"image": "busybox:1.36", "gpus": 2, "command": ["sleep", "600"]}
    )
    assert status == 202, made
    running = tenant.wait(made["id"], "Running")
    node, pod = running["node_name"], f"gpucaas-{made['id']}"
    held = waiting.wait_for(
        lambda: (h := _held(admin, pod)) and len(h) == 2 and h,
        TIMEOUT,
        interval=0.3,
        what="the container's two GPUs leased",
    )

    plugin = "dra-driver" if sandbox.allocation_mode == "dra" else "device-plugin"
    sandbox.real_nodes[node].restart("containerd")
    sandbox.supervisor.restart(f"{plugin}-{node}", kill=True)
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
    waiting.wait_for(lambda: not _held(admin, pod), TIMEOUT, interval=0.3, what="the GPUs given back")
