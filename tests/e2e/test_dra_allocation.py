"""In the DRA allocation mode the API's containers get their partitions from kube-scheduler's
structured allocator: the claim's allocation is written by kube-scheduler itself and names a
partition device of the DRA driver's slices on the pod's node."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from core import dra
from core.topology import partition_for
from devtools.sandbox import runner
from services.dra_driver.slices import gpus_of_devices

from .conftest import Tenant, allocation_mode, wait_for, wait_status

pytestmark = pytest.mark.skipif(
    allocation_mode() != "dra", reason="the DRA allocation mode's claims (make test-e2e-dra)"
)

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def _gpus_of(claim: dict[str, Any]) -> set[str]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return {r["device"] for r in results}


def _slice_devices(custom: client.CustomObjectsApi, node: str) -> set[str]:
    slices = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]
    return {
        d["name"]
        for s in slices
        if s["spec"].get("nodeName") == node and s["spec"]["driver"] == dra.DRIVER
        for d in s["spec"].get("devices") or []
    }


def test_kube_scheduler_writes_the_allocation_of_a_driver_device(
    sandbox: runner.Sandbox, tenant_factory: Any, k8s: client.ApiClient
) -> None:
    tenant: Tenant = tenant_factory("dra-owner")
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
    assert wait_status(tenant, body["id"], "Running", "Succeeded", "Failed")["status"] == "Running"
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
    got = claim["status"]["allocation"]["devices"]["results"]
    assert len(got) == 2 and {r["driver"] for r in got} == {dra.DRIVER}
    node = client.CoreV1Api(k8s).read_namespaced_pod(f"gpucaas-{body['id']}", namespace).spec.node_name
    assert all(r["pool"] == node and r["device"] in _slice_devices(custom, node) for r in got)
    pair = partition_for(gpus_of_devices(r["device"] for r in got))  # the two GPUs of one NVLink pair
    assert pair is not None and pair.size == 2
    tenant.call("DELETE", f"/v1/containers/{body['id']}")
    assert wait_status(tenant, body["id"], "Cancelled", "Succeeded", "Failed")["status"] == "Cancelled"
