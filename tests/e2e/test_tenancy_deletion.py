"""Deleting a tenancy takes its workloads with it, and its name can start again clean."""

from __future__ import annotations

from kubernetes import client

from core.crds import GROUP, TENANCY_PLURAL, VERSION
from devtools.sandbox import runner

from .conftest import (
    UNTIL_CANCELLED,
    Caller,
    activations,
    allocated_devices,
    holder_of,
    leases,
    settled,
    wait_for,
    wait_status,
)

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def _tenancy_cr(k8s: client.ApiClient, name: str) -> dict | None:
    try:
        return client.CustomObjectsApi(k8s).get_cluster_custom_object(GROUP, VERSION, TENANCY_PLURAL, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _pod_exists(k8s: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        client.CoreV1Api(k8s).read_namespaced_pod(name, namespace)
        return True
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_deleting_a_tenancy_frees_its_running_container(
    sandbox: runner.Sandbox, admin: Caller, tenant_factory, k8s: client.ApiClient
) -> None:
    tenant = tenant_factory("doomed")
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": UNTIL_CANCELLED})
    assert status == 202, body
    cid = body["id"]
    running = wait_status(tenant, cid, "Running")
    devices = wait_for(lambda: allocated_devices(sandbox, "tenant-doomed", running["pod_name"]), what="devices")
    holder = holder_of(sandbox, "tenant-doomed", running["pod_name"])
    wait_for(
        lambda: any(a["holder"] == holder for acts in activations(sandbox).values() for a in acts),
        what="the partition to be active",
    )

    status, body = admin.call("DELETE", "/v1/admin/tenancies/doomed")
    assert status == 204, body

    wait_for(lambda: not _pod_exists(k8s, "tenant-doomed", running["pod_name"]), what="the pod to be gone")
    wait_for(
        lambda: not any(a["holder"] == holder for acts in activations(sandbox).values() for a in acts),
        what="the partition to be released",
    )
    wait_for(
        lambda: all(
            (lz.get("status") or {}).get("state") == "Free"
            for lz in leases(k8s)
            if lz["spec"]["pciAddress"] in devices and lz["spec"]["node"] == running["node_name"]
        ),
        what="the GPUs' leases to be Free",
    )
    wait_for(lambda: _tenancy_cr(k8s, "doomed") is None, what="the Tenancy object to be gone")
    # the old token is gone with its tenancy; the record stays as history for the admin
    assert tenant.call("GET", f"/v1/containers/{cid}")[0] == 401
    status, history = admin.call("GET", "/v1/admin/containers?tenancy=doomed")
    assert status == 200
    assert [(c["id"], c["status"]) for c in history["data"]] == [(cid, "Cancelled")]
    wait_for(lambda: settled(sandbox, k8s), what="nothing held")

    # the name starts clean: nothing of the old tenancy shows, and a new container runs
    again = tenant_factory("doomed")
    status, listing = again.call("GET", "/v1/containers")
    assert status == 200 and listing["count"] == 0, listing
    status, public = admin.call("GET", "/v1/admin/tenancies/doomed")
    assert status == 200 and public["active_gpus"] == 0, public
    status, body = again.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": ["sleep", "1"]})
    assert status == 202, body
    assert wait_status(again, body["id"], "Succeeded", timeout=180)["status"] == "Succeeded"


def test_kubectl_delete_tenancy_deletes_its_pods(
    sandbox: runner.Sandbox, tenant_factory, k8s: client.ApiClient
) -> None:
    tenant = tenant_factory("kubedel")
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 1, "command": UNTIL_CANCELLED})
    assert status == 202, body
    running = wait_status(tenant, body["id"], "Running")
    client.CustomObjectsApi(k8s).delete_cluster_custom_object(GROUP, VERSION, TENANCY_PLURAL, "kubedel")
    wait_for(lambda: not _pod_exists(k8s, "tenant-kubedel", running["pod_name"]), what="the pod to be gone")
    # the API notices the pod went; the container does not stay Running with no pod
    assert wait_status(tenant, body["id"], "Failed", "Cancelled", "Succeeded")["status"] != "Running"
    wait_for(lambda: settled(sandbox, k8s), what="nothing held")
