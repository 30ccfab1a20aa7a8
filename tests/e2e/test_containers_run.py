"""What a tenant is promised, on real nodes in both allocation modes: the container really
runs, sees exactly its GPUs' device nodes, and its exit code, pull errors and OOM kill are its own."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kubernetes import client

from devtools import waiting
from devtools.fake_sysfs import load_board
from devtools.sandbox import runner

from .conftest import TIMEOUT, Tenant


@pytest.mark.any_allocation
def test_every_node_is_a_real_kubelet_with_containerd_2(sandbox: runner.Sandbox, k8s: client.ApiClient) -> None:
    for node in sandbox.nodes:
        info = client.CoreV1Api(k8s).read_node(node.name).status.node_info
        assert info.kubelet_version.startswith("v1.36."), info
        assert info.container_runtime_version.startswith("containerd://2."), info


def test_a_two_gpu_container_sees_the_device_nodes_of_its_gpus(
    sandbox: runner.Sandbox, tenant: Tenant, admin: Tenant
) -> None:
    status, made = tenant.call(
        "POST",
        "/v1/containers",
        {
            "image": "busybox:1.36",
            "gpus": 2,
            "command": ["sh", "-c", "ls /dev/vfio; id -u; trap 'exit 0' TERM; sleep 600 & wait"],
        },
    )
    assert status == 202, made
    running = tenant.wait(made["id"], "Running")

    def listed() -> list[str] | None:
        status, text = tenant.call("GET", f"/v1/containers/{made['id']}/logs")
        lines = text.splitlines() if status == 200 and isinstance(text, str) else []
        return lines if len(lines) >= 4 else None  # two groups, the vfio container node, the uid

    lines = waiting.wait_for(listed, TIMEOUT, interval=0.3, what="the container's listing")

    status, gpus = admin.call("GET", f"/v1/admin/gpus?node={running['node_name']}")
    assert status == 200, gpus
    held = sorted(g["pci_address"] for g in gpus["data"] if g.get("pod") == f"gpucaas-{made['id']}")
    assert len(held) == 2, gpus
    node = next(n for n in sandbox.nodes if n.name == running["node_name"])
    groups = {d.bdf: d.iommu_group for d in load_board(node.board).devices}
    assert sorted(lines[:-1]) == sorted([*(str(groups[pci]) for pci in held), "vfio"])
    assert int(lines[-1]) != 0

    def told() -> bool:
        status, timeline = tenant.call("GET", f"/v1/containers/{made['id']}/events")
        assert status == 200, timeline
        return any(e["kind"] == "runtime" and "no Kata VM boots" in e["message"] for e in timeline["data"])

    waiting.wait_for(told, TIMEOUT, interval=0.3, what="the timeline saying no VM boots")
    assert tenant.call("DELETE", f"/v1/containers/{made['id']}")[0] == 200


@pytest.mark.any_allocation
def test_caasctl_run_exits_with_the_containers_exit_code(tenant: Tenant) -> None:
    ran = tenant.caasctl("run", "busybox:1.36", "--", "sh", "-c", "echo about to fail; exit 3")
    assert ran.returncode == 3, (ran.stdout, ran.stderr)
    assert "about to fail" in ran.stdout


@pytest.mark.any_allocation
@pytest.mark.parametrize("image", ["private_image", "private_lazy_image"])
def test_the_private_image_needs_the_registry_credentials(
    sandbox: runner.Sandbox, tenant_factory: Callable[[str], Tenant], image: str
) -> None:
    """Both the image and its eStargz copy, which the nodes pull lazily: the snapshotter fetches
    the copy's layers with the pull's own credentials, and nothing without them. A tenancy of
    its own each: the login below stays with the tenancy."""
    tenant = tenant_factory(image.replace("_", "-"))
    registry = json.loads((sandbox.state_dir / "registry.json").read_text())
    status, made = tenant.call("POST", "/v1/containers", {"image": registry[image], "gpus": 1})
    assert status == 202, made

    seen: list[str] = []

    def refused() -> dict | None:
        status, body = tenant.call("GET", f"/v1/containers/{made['id']}")
        if not seen or seen[-1] != f"{body.get('status')}: {body.get('message')}":
            seen.append(f"{body.get('status')}: {body.get('message')}")
        return body if "unauthorized" in (body.get("message") or "") else None

    try:
        said = waiting.wait_for(refused, TIMEOUT, interval=0.3, what="the pull refused without credentials")
    except waiting.WaitTimeout as timeout:
        raise AssertionError(f"the container said, in turn: {seen}") from timeout
    assert "POST /v1/registry-credentials" in said["message"] and registry["server"] in said["message"]
    assert registry["password"] not in json.dumps(said)
    assert tenant.call("DELETE", f"/v1/containers/{made['id']}")[0] == 200

    login = tenant.caasctl(
        "registry",
        "login",
        registry["server"],
        "--username",
        registry["username"],
        "--password-stdin",
        stdin=registry["password"],
    )
    assert login.returncode == 0, login.stderr
    ran = tenant.caasctl("run", registry[image])
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert "pulled with credentials" in ran.stdout


@pytest.mark.any_allocation
def test_memory_past_the_limit_is_an_oom_kill_said_to_the_tenant(tenant: Tenant) -> None:
    status, made = tenant.call(
        "POST",
        "/v1/containers",
        {
            "image": "busybox:1.36",
            "gpus": 1,
            "memory": "4Gi",  # the least a container may ask for (sizing.MIN_MEMORY)
            # a whole core: at the one-GPU share's 150m, the CFS quota made filling 4 GiB take minutes
            "cpu": "1",
            "command": ["awk", 'BEGIN { s = "x"; for (i = 0; i < 33; i++) s = s s; print length(s) }'],
        },
    )
    assert status == 202, made
    ended = tenant.wait(made["id"], "Failed", "Succeeded")
    assert ended["status"] == "Failed" and ended["message"].startswith("OOMKilled"), ended["message"]


@pytest.mark.any_allocation
def test_the_cuda_sample_is_a_stand_in_that_says_so(tenant: Tenant) -> None:
    ran = tenant.caasctl("run", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "--gpus", "2")
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    lines = ran.stdout.splitlines()
    assert "a stand-in for nvcr.io/nvidia/k8s/cuda-sample" in lines[0] and "no CUDA ran" in lines[0]
    assert len(lines[2:]) == 3 and "vfio" in lines[2:]  # its two IOMMU groups and the vfio container node
