"""Cancelling releases GPUs and partitions; tenants never see each other."""

from __future__ import annotations

import pytest
from kubernetes import client

from devtools.sandbox import runner

from .conftest import activations, allocated_devices, holder_of, leases, settled, wait_for, wait_status

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def test_cancel_releases_gpus_and_partition(sandbox: runner.Sandbox, tenant_factory, k8s: client.ApiClient) -> None:
    tenant = tenant_factory("canceller")
    # a plain sleep ignores SIGTERM: the release waits for the kubelet's SIGKILL after the grace period
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": ["sleep", "600"]})
    assert status == 202, body
    cid = body["id"]
    running = wait_status(tenant, cid, "Running")
    devices = wait_for(lambda: allocated_devices(sandbox, "tenant-canceller", running["pod_name"]), what="devices")
    holder = holder_of(sandbox, "tenant-canceller", running["pod_name"])
    wait_for(
        lambda: any(a["holder"] == holder for acts in activations(sandbox).values() for a in acts),
        what="the partition to be active",
    )
    status, body = tenant.call("DELETE", f"/v1/containers/{cid}")
    assert status in (200, 202), body
    assert wait_status(tenant, cid, "Cancelled")["status"] == "Cancelled"
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
        what="the GPUs' leases to be checked and Free",
    )
    wait_for(lambda: settled(sandbox, k8s), what="nothing held")


@pytest.mark.any_allocation
def test_tenant_a_cannot_see_or_touch_b(sandbox: runner.Sandbox, tenant_factory) -> None:
    a, b = tenant_factory("alpha"), tenant_factory("bravo")
    status, body = a.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 1})
    assert status == 202, body
    cid = body["id"]
    for method, path in (
        ("GET", f"/v1/containers/{cid}"),
        ("GET", f"/v1/containers/{cid}/logs"),
        ("DELETE", f"/v1/containers/{cid}"),
    ):
        status, _ = b.call(method, path)
        assert status == 404, (method, path, status)
    status, listing = b.call("GET", "/v1/containers")
    assert status == 200 and cid not in {c["id"] for c in listing["data"]}
    status, _ = b.call("POST", "/v1/containers", {"image": IMAGE, "tenancy": "alpha"})
    assert status in (403, 404)
    for path in ("/v1/admin/tenancies", "/v1/admin/containers", "/v1/admin/gpus"):
        status, _ = b.call("GET", path)
        assert status in (401, 403, 404), path
    assert wait_status(a, cid, "Succeeded")["status"] == "Succeeded"
