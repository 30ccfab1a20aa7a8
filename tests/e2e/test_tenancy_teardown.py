"""Deleting a tenancy tears its namespace down: every process's delete path runs under the chart's RBAC."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from core.crds import GROUP, TENANCY_PLURAL, VERSION
from devtools.sandbox import runner

from .conftest import UNTIL_CANCELLED, leases, wait_for, wait_status

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def _gone(read, *args: str) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_a_tenancy_removes_its_namespace_and_pods(
    sandbox: runner.Sandbox, admin, tenant_factory, k8s: client.ApiClient
) -> None:
    tenant = tenant_factory("farewell")
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 1, "command": UNTIL_CANCELLED})
    assert status == 202, body
    cid = body["id"]
    running = wait_status(tenant, cid, "Running")
    status, body = admin.call("PATCH", "/v1/admin/tenancies/farewell", {"gpu_quota": 8})
    assert status == 200, body
    custom = client.CustomObjectsApi(k8s)
    wait_for(
        lambda: custom.get_cluster_custom_object(GROUP, VERSION, TENANCY_PLURAL, "farewell")["spec"]["gpuQuota"] == 8,
        what="the Tenancy to follow the new quota",
    )
    core = client.CoreV1Api(k8s)
    assert core.read_namespaced_pod(running["pod_name"], "tenant-farewell").metadata.name == running["pod_name"]
    # The controller waits for the tenancy's pods to be gone before removing its namespace.
    status, body = tenant.call("DELETE", f"/v1/containers/{cid}")
    assert status in (200, 202), body
    wait_status(tenant, cid, "Cancelled")
    wait_for(lambda: not core.list_namespaced_pod("tenant-farewell").items, what="the tenancy's pods to be gone")
    status, body = admin.call("DELETE", "/v1/admin/tenancies/farewell")
    assert status == 204, body
    wait_for(
        lambda: _gone(custom.get_cluster_custom_object, GROUP, VERSION, TENANCY_PLURAL, "farewell"),
        what="the Tenancy to be gone",
    )
    wait_for(lambda: _gone(core.read_namespace, "tenant-farewell"), what="the tenant namespace to be gone")


@pytest.mark.any_allocation
def test_api_readiness_reaches_the_kubernetes_api(admin) -> None:
    status, body = admin.call("GET", "/readyz")
    assert status == 200, body


def test_admin_quarantines_and_releases_a_gpu(sandbox: runner.Sandbox, admin, k8s: client.ApiClient) -> None:
    lease = next(lz for lz in leases(k8s) if (lz.get("status") or {}).get("state") == "Free")
    gpu = f"/v1/admin/gpus/{lease['spec']['node']}/{lease['spec']['pciAddress']}"
    status, body = admin.call("POST", f"{gpu}/quarantine", {"reason": "e2e: RBAC of the admin lease actions"})
    assert status == 200, body
    status, body = admin.call("POST", f"{gpu}/release", {"skip_check": True})
    assert status == 200, body
    wait_for(
        lambda: (
            next(lz for lz in leases(k8s) if lz["metadata"]["name"] == lease["metadata"]["name"])["status"]["state"]
            == "Free"
        ),
        what="the GPU to be Free again",
    )
