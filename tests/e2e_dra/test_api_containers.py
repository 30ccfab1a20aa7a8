"""The seed scenario through the tenant API in the DRA allocation mode: the API's pods claim
from the tenancy's ResourceClaimTemplates (kept by the tenancy controller), kube-scheduler's
structured allocator allocates whole partitions, the DRA driver prepares them, and every container of
1, 2, 4 and 8 GPUs runs to the end with exactly its partition's GPUs."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from core import dra
from devtools.waiting import wait_for
from gpucaas.sandbox import runner
from tests.e2e.conftest import Caller, container_status

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"
SIZES = (1, 2, 4, 8)


def _tenant(sandbox: runner.Sandbox, name: str) -> Caller:
    admin = Caller(sandbox, sandbox.admin_token)
    status, body = admin.call("POST", "/v1/admin/tenancies", {"name": name, "gpu_quota": 16})
    assert status in (201, 409), body
    status, body = admin.call("POST", f"/v1/admin/tenancies/{name}/tokens", {})
    assert status == 201, body
    return Caller(sandbox, body["token"])


def _gpus_of(claim: dict[str, Any]) -> set[str]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return {r["device"] for r in results}


def test_containers_of_every_size_run_on_claimed_partitions(dra_sandbox: runner.Sandbox, k8s: client.ApiClient) -> None:
    tenant = _tenant(dra_sandbox, "dra-api")
    namespace = "tenant-dra-api"
    custom = client.CustomObjectsApi(k8s)

    def templates() -> set[str]:
        listed = custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaimtemplates")
        return {t["metadata"]["name"] for t in listed["items"]}

    wanted = {dra.claim_template_name(n) for n in SIZES}
    wait_for(lambda: wanted <= templates(), what="the tenancy's claim templates")

    ids: dict[int, str] = {}
    for gpus in SIZES:
        status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": gpus, "command": ["sleep", "3"]})
        assert status == 202, body
        ids[gpus] = body["id"]

    seen: dict[str, dict[str, Any]] = {}

    def allocations() -> dict[str, dict[str, Any]]:
        for claim in custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")[
            "items"
        ]:
            if _gpus_of(claim):
                seen[claim["metadata"]["name"]] = claim
        return seen

    def finished() -> bool:
        allocations()
        return all(
            container_status(tenant, cid)["status"] in ("Succeeded", "Failed", "Cancelled") for cid in ids.values()
        )

    wait_for(finished, 240, interval=0.5, what="every container to finish")
    for gpus, cid in ids.items():
        c = container_status(tenant, cid)
        assert c["status"] == "Succeeded", c
        assert c["gpus"] == gpus

    # Each container's pod claimed one allocation from its size's template: one partition of
    # N GPUs (or N single GPUs for sizes that are no partition), never a shared device.
    claims_by_template: dict[str, list[dict[str, Any]]] = {}
    for claim in seen.values():
        owner_pod = next(o["name"] for o in claim["metadata"]["ownerReferences"] if o["kind"] == "Pod")
        assert owner_pod, claim["metadata"]
        template = (claim["metadata"].get("annotations") or {}).get("resource.kubernetes.io/pod-claim-name", "gpus")
        assert template == "gpus"
        claims_by_template.setdefault(claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"], []).append(
            claim
        )
    assert sorted(len(v) for v in claims_by_template.values()) == [1, 1, 1, 1]
    for gpus in SIZES:
        cls = dra.device_class_name(gpus)
        (claim,) = claims_by_template[cls]
        assert len(_gpus_of(claim)) == 1, claim["status"]  # one partition device


def _slice_devices(custom: client.CustomObjectsApi, node: str) -> set[str]:
    slices = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]
    return {
        d["name"]
        for s in slices
        if s["spec"].get("nodeName") == node and s["spec"]["driver"] == dra.DRIVER
        for d in s["spec"].get("devices") or []
    }


def test_kube_scheduler_writes_the_allocation_of_a_driver_device(
    dra_sandbox: runner.Sandbox, k8s: client.ApiClient
) -> None:
    """A running container's claim was allocated by kube-scheduler itself (its field manager owns
    ``status.allocation``), naming a partition device of the driver's slices on the pod's node."""
    tenant = _tenant(dra_sandbox, "dra-owner")
    namespace = "tenant-dra-owner"
    custom = client.CustomObjectsApi(k8s)
    wait_for(
        lambda: custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaimtemplates")[
            "items"
        ],
        what="the tenancy's claim templates",
    )
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": ["sleep", "30"]})
    assert status == 202, body
    wait_for(lambda: container_status(tenant, body["id"])["status"] == "Running", 180, what="the container Running")
    (claim,) = [
        c
        for c in custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")["items"]
        if _gpus_of(c)
    ]
    managers = {
        m["manager"]
        for m in claim["metadata"]["managedFields"]
        if m.get("subresource") == "status" and "f:allocation" in (m.get("fieldsV1") or {}).get("f:status", {})
    }
    assert managers == {"kube-scheduler"}, claim["metadata"]["managedFields"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == dra.DRIVER
    node = client.CoreV1Api(k8s).read_namespaced_pod(f"gpucaas-{body['id']}", namespace).spec.node_name
    assert result["pool"] == node and result["device"] in _slice_devices(custom, node)
    assert result["device"].startswith("nvlink-2gpu-")
    tenant.call("DELETE", f"/v1/containers/{body['id']}")
