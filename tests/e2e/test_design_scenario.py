"""The design's scenario through the running sandbox, and GPU containers of every size.

The containers run on the sandbox's real nodes (no GPU is behind their device nodes), so
the tests check what the control plane did: the GPUs and CDI names the device plugin's
Allocate (the DRA driver's NodePrepareResources) handed the kubelet, the partition the
fabric service activated for them, the CDI spec behind those names, the device node the
container was given, and the GPU leases.
"""

from __future__ import annotations

import re

from kubernetes import client

from core import dra, topology
from core.fabric_client import FabricClient
from devtools.sandbox import runner

from .conftest import (
    UNTIL_CANCELLED,
    Caller,
    activations,
    allocated_devices,
    allocation_mode,
    cdi_device_nodes,
    handed_over,
    holder_of,
    lease_of,
    settled,
    wait_for,
    wait_status,
)


def assert_claims_gpus(pod: client.V1Pod, gpus: int) -> None:
    """The pod asks for its GPUs the way the mode's kubelet hands them out: the extended
    resource (device-plugin), or one claim from the tenancy's template of that size (dra)."""
    resources = pod.spec.containers[0].resources
    if allocation_mode() == "dra":
        [claim] = pod.spec.resource_claims
        assert claim.resource_claim_template_name == dra.claim_template_name(gpus)
        assert [c.name for c in resources.claims] == [claim.name]
        assert "nvidia.com/gpu" not in (resources.limits or {})
    else:
        assert resources.limits["nvidia.com/gpu"] == str(gpus)
        assert not pod.spec.resource_claims


#: The request the design itself submits, for a tenancy the cluster has never seen.
DESIGN_PAYLOAD = {"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "tenancy": "landon"}


def physical_ids(sandbox: runner.Sandbox, node: str, devices: list[str]) -> list[int]:
    path = next(n.fabric_socket for n in sandbox.nodes if n.name == node)
    with FabricClient(path) as fc:
        topo = {g["pci_bus_id"]: g["physical_id"] for g in fc.topology()["gpus"]}
    return sorted(topo[d] for d in devices)


def test_design_payload_runs_to_completion(sandbox: runner.Sandbox, admin: Caller, k8s: client.ApiClient) -> None:
    status, body = admin.call("POST", "/v1/containers", DESIGN_PAYLOAD)
    assert status == 202, body
    cid, pod_name = body["id"], body["pod_name"]

    # While the pod holds its GPU: what Allocate handed over, and the partition held for it.
    def held() -> tuple[str, dict, dict] | None:
        got = handed_over(sandbox, "tenant-landon", pod_name)
        if got is None:
            return None
        node, record = got
        holder = record["holder"]
        active = [a for a in activations(sandbox)[node] if a["holder"] == holder]
        return (node, record, active[0]) if active else None

    node, record, activation = wait_for(held, 120, interval=0.05, what="the GPU allocated and its partition active")
    [gpu] = record["devices"]
    assert record["cdi"] == [f"nvidia.com/gpu={gpu}"]
    [vfio_node] = cdi_device_nodes(sandbox, node)[record["cdi"][0]]
    assert re.fullmatch(r"/dev/vfio/\d+", vfio_node), vfio_node
    [physical] = physical_ids(sandbox, node, [gpu])
    assert activation["partition_ids"] == [topology.single_gpu_partition(physical).id]

    done = wait_status(admin, cid, "Succeeded", "Failed")
    assert done["status"] == "Succeeded", done
    assert done["node_name"] == node
    pod = client.CoreV1Api(k8s).read_namespaced_pod(pod_name, "tenant-landon")
    assert pod.spec.runtime_class_name == "kata-qemu-nvidia-gpu"
    assert pod.spec.containers[0].image == DESIGN_PAYLOAD["container-url"]
    assert_claims_gpus(pod, 1)
    assert pod.spec.automount_service_account_token is False
    tn = client.CustomObjectsApi(k8s).get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "landon")
    assert tn["status"]["phase"] == "Ready"
    status, logs = admin.call("GET", f"/v1/containers/{cid}/logs")
    assert status == 200, logs
    # the sample's stand-in claims no CUDA run, and lists the device nodes the container was given:
    # its GPU's IOMMU group (the CDI spec's /dev/vfio/<group>) and the vfio container node
    assert "no CUDA ran" in logs and "Result = PASS" not in logs, logs
    listed = logs.split("the /dev/vfio devices this container was given:", 1)[1].split()
    assert sorted(listed) == sorted([vfio_node.rsplit("/", 1)[1], "vfio"]), logs

    wait_for(lambda: settled(sandbox, k8s), what="partitions released and leases Free")
    lease = lease_of(k8s, node, gpu)["status"]
    assert lease["state"] == "Free"
    last = lease["history"][-1]
    assert (last["tenancy"], last["namespace"], last["pod"], last["check"]) == (
        "landon",
        "tenant-landon",
        pod_name,
        "Passed",
    )


def test_every_size_lands_on_a_valid_partition(sandbox: runner.Sandbox, tenant_factory, k8s: client.ApiClient) -> None:
    tenant = tenant_factory("sizes")
    ids: dict[int, str] = {}
    # Every GPU free first (the previous tests' GPUs are checked after their pods), so that the
    # placement sees both boards whole. In both allocation modes: 4, 2 and 1 GPUs, each Running
    # before the next, so that kube-scheduler and the extender place each knowing where the last
    # went (best fit puts all three on one board), then 8 on the other board. In the DRA mode
    # this is the sequence in which a 2-GPU claim was once allocated a pair inside the 4-GPU
    # claim's partition: a device the driver dropped from its slices while a claim was being
    # allocated it lost its counters (tests/dra_driver, the publisher race); availability is now
    # said by the counters and the devices always stay. They run until cancelled below: the
    # checks need all four holding their GPUs at once.
    # Each asks for 50m CPU: the sandbox's real nodes have this machine's 2 CPUs each, and every
    # pod carries the RuntimeClass's 500m Kata overhead; at the sandbox's default 150m per GPU
    # the three on one board (3 x 500m + 7 x 150m) would not fit its node's CPU, and the 8-GPU
    # container would find no node with a whole board and enough CPU.
    wait_for(lambda: settled(sandbox, k8s), what="every GPU free before the sizes are placed")
    try:
        for gpus in (4, 2, 1, 8):  # 15 GPUs over two 8-GPU boards
            status, body = tenant.call(
                "POST",
                "/v1/containers",
                {
                    "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8",
                    "gpus": gpus,
                    "cpu": "50m",
                    "command": UNTIL_CANCELLED,
                },
            )
            assert status == 202, body
            ids[gpus] = body["id"]
            assert wait_status(tenant, body["id"], "Running", "Succeeded", "Failed")["status"] == "Running"
            held = sum(ids)  # and the extender has seen it: its next score counts these GPUs
            wait_for(
                lambda held=held: _extender_free(sandbox) == 16 - held, what=f"the extender to see {held} GPUs held"
            )
        _check_placements(sandbox, tenant, ids)
    finally:  # never leave GPUs held for the tests after this one
        for cid in ids.values():
            tenant.call("DELETE", f"/v1/containers/{cid}")
    for cid in ids.values():
        assert wait_status(tenant, cid, "Cancelled", "Succeeded", "Failed")["status"] == "Cancelled"
    wait_for(lambda: settled(sandbox, k8s), what="partitions released and leases Free")
    assert all(not a for a in activations(sandbox).values())


def _extender_free(sandbox: runner.Sandbox) -> int:
    """How many GPUs the scheduler extender counts free, over both nodes (its GET /v1/nodes)."""
    import json
    import urllib.request

    assert sandbox.extender_url is not None
    with urllib.request.urlopen(f"{sandbox.extender_url}/v1/nodes", timeout=10) as resp:
        return sum(len(n["free"]) for n in json.load(resp)["nodes"])


def _check_placements(sandbox: runner.Sandbox, tenant: Caller, ids: dict[int, str]) -> None:
    placed = {}
    for gpus, cid in ids.items():
        c = wait_status(tenant, cid, "Running", "Succeeded", "Failed")
        assert c["status"] == "Running", c
        devices = wait_for(lambda c=c: allocated_devices(sandbox, "tenant-sizes", c["pod_name"]), what="devices")
        phys = physical_ids(sandbox, c["node_name"], devices)
        part = topology.partition_for(phys)
        assert part is not None and part.size == gpus, (gpus, c["node_name"], phys)
        # the fabric service holds exactly that partition for these GPUs, and Allocate named
        # them to the kubelet by their CDI names
        holder = holder_of(sandbox, "tenant-sizes", c["pod_name"])
        assert [a["partition_ids"] for a in activations(sandbox)[c["node_name"]] if a["holder"] == holder] == [
            [part.id]
        ]
        got = handed_over(sandbox, "tenant-sizes", c["pod_name"])
        assert got is not None and got[0] == c["node_name"]
        assert got[1]["cdi"] == [f"nvidia.com/gpu={d}" for d in sorted(devices)]
        placed[gpus] = (c["node_name"], set(devices))
    by_node: dict[str, set[str]] = {}
    for node, devices in placed.values():
        assert not (by_node.setdefault(node, set()) & devices), "two containers share a GPU"
        by_node[node] |= devices
