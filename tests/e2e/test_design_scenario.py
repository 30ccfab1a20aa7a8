"""The seed's scenario through the running sandbox, and GPU containers of every size."""

from __future__ import annotations

from kubernetes import client

from gpucaas.core import topology
from gpucaas.core.fabric_client import FabricClient
from gpucaas.programs.sandbox import runner

from .conftest import Caller, activations, allocated_devices, settled, wait_for, wait_status

SEED = {"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "tenancy": "landon"}


def physical_ids(sandbox: runner.Sandbox, node: str, devices: list[str]) -> list[int]:
    path = next(n.fabric_socket for n in sandbox.nodes if n.name == node)
    with FabricClient(path) as fc:
        topo = {g["pci_bus_id"]: g["physical_id"] for g in fc.topology()["gpus"]}
    return sorted(topo[d] for d in devices)


def test_seed_payload_runs_to_completion(sandbox: runner.Sandbox, admin: Caller, k8s: client.ApiClient) -> None:
    status, body = admin.call("POST", "/v1/containers", SEED)
    assert status == 202, body
    cid = body["id"]
    done = wait_status(admin, cid, "Succeeded", "Failed")
    assert done["status"] == "Succeeded", done
    pod = client.CoreV1Api(k8s).read_namespaced_pod(done["pod_name"], "tenant-landon")
    assert pod.spec.runtime_class_name == "kata-qemu-nvidia-gpu"
    assert pod.spec.containers[0].image == SEED["container-url"]
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert pod.spec.automount_service_account_token is False
    devices = allocated_devices(k8s, "tenant-landon", done["pod_name"])
    assert len(devices) == 1
    status, logs = admin.call("GET", f"/v1/containers/{cid}/logs")
    assert status == 200 and "Detected 1 CUDA Capable device(s)" in logs and "Result = PASS" in logs
    tn = client.CustomObjectsApi(k8s).get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "landon")
    assert tn["status"]["phase"] == "Ready"
    wait_for(lambda: settled(sandbox, k8s), what="partitions released and leases Free")


def test_every_size_lands_on_a_valid_partition(sandbox: runner.Sandbox, tenant_factory, k8s: client.ApiClient) -> None:
    tenant = tenant_factory("sizes")
    ids = {}
    for gpus in (8, 4, 2, 1):  # 15 GPUs over two 8-GPU boards: only a partition-aware placement fits them all
        status, body = tenant.call("POST", "/v1/containers", {
            "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "gpus": gpus,
            "command": ["sleep", "20"]})
        assert status == 202, body
        ids[gpus] = body["id"]
    placed = {}
    for gpus, cid in ids.items():
        c = wait_status(tenant, cid, "Running", "Succeeded", "Failed")
        assert c["status"] != "Failed", c
        devices = wait_for(lambda c=c: allocated_devices(k8s, "tenant-sizes", c["pod_name"]), what="devices")
        phys = physical_ids(sandbox, c["node_name"], devices)
        part = topology.partition_for(phys)
        assert part is not None and part.size == gpus, (gpus, c["node_name"], phys)
        placed[gpus] = (c["node_name"], set(devices))
    by_node: dict[str, set[str]] = {}
    for node, devices in placed.values():
        assert not (by_node.setdefault(node, set()) & devices), "two containers share a GPU"
        by_node[node] |= devices
    for cid in ids.values():
        assert wait_status(tenant, cid, "Succeeded", "Failed")["status"] == "Succeeded"
    wait_for(lambda: settled(sandbox, k8s), what="partitions released and leases Free")
    assert all(not a for a in activations(sandbox).values())
