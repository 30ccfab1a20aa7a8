"""The admin read endpoints over the cluster inventory (Nodes, GPULeases, FabricStates),
read from the local cluster's kube-apiserver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as kc

from tests.api.harness import ApiServer


def _lease(node: str, pci: str, phys: int, state: str, holder: dict | None = None) -> tuple[dict, dict]:
    name = f"{node}-{pci.replace(':', '-').replace('.', '-')}"
    body = {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "GPULease",
        "metadata": {"name": name},
        "spec": {"node": node, "pciAddress": pci, "deviceId": "0x2330", "physicalId": phys, "model": "H100 80GB HBM3"},
    }
    status = {"state": state, **({"holder": holder} if holder else {})}
    return body, status


@pytest.fixture
def inventory(k8s: Any) -> None:
    core, custom = kc.CoreV1Api(k8s), kc.CustomObjectsApi(k8s)
    for name, ready in (("gpu-a", "True"), ("gpu-b", "False")):
        core.create_node({"metadata": {"name": name}})
        core.patch_node_status(
            name,
            {
                "status": {
                    "capacity": {"nvidia.com/gpu": "8"},
                    "allocatable": {"nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": ""}],
                }
            },
        )
    leases = [
        _lease(
            "gpu-a",
            "0000:18:00.0",
            1,
            "Leased",
            {"pod": "gpucaas-x", "namespace": "tenant-landon", "tenancy": "landon"},
        ),
        _lease("gpu-a", "0000:2a:00.0", 2, "Free"),
        _lease("gpu-b", "0000:18:00.0", 1, "Quarantined"),
    ]
    for body, status in leases:
        custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", body)
        custom.patch_cluster_custom_object_status(
            "gpucaas.dev", "v1alpha1", "gpuleases", body["metadata"]["name"], {"status": status}
        )
    custom.create_cluster_custom_object(
        "gpucaas.dev",
        "v1alpha1",
        "fabricstates",
        {
            "apiVersion": "gpucaas.dev/v1alpha1",
            "kind": "FabricState",
            "metadata": {"name": "gpu-a"},
            "spec": {"node": "gpu-a"},
        },
    )
    custom.patch_cluster_custom_object_status(
        "gpucaas.dev",
        "v1alpha1",
        "fabricstates",
        "gpu-a",
        {
            "status": {
                "serviceVM": {"state": "running", "restarts": 0},
                "fabricManager": {"reachable": True, "backend": "simulator"},
                "gpus": [
                    {"physicalId": 1, "pciBusId": "0000:18:00.0", "healthy": True},
                    {"physicalId": 2, "pciBusId": "0000:2a:00.0", "healthy": False, "reason": "XID 79"},
                ],
                "partitions": [
                    {"id": 0, "gpus": [1, 2, 3, 4, 5, 6, 7, 8], "nvlinks": 144, "active": False, "supported": True},
                    {
                        "id": 9,
                        "gpus": [1],
                        "nvlinks": 0,
                        "active": True,
                        "supported": True,
                        "holder": "gpus:0000:18:00.0",
                    },
                ],
                "failedDevices": [{"physicalId": 2, "pciBusId": "0000:2a:00.0", "kind": "gpu", "reason": "XID 79"}],
            }
        },
    )


@pytest.fixture
def admin(kubeconfig: Path, serve: Callable[..., ApiServer], sqlite_url: str, inventory: None) -> httpx.Client:
    api = serve(sqlite_url, kubeconfig)
    with api.client() as client:
        yield client


def test_nodes_with_fabric_summary(admin: httpx.Client) -> None:
    body = admin.get("/v1/admin/nodes").json()
    assert body["count"] == 2
    a, b = body["data"]
    assert a == {
        "name": "gpu-a",
        "ready": True,
        "unschedulable": False,
        "gpu_capacity": 8,
        "gpu_allocatable": 8,
        "fabric": {
            "service_vm": "running",
            "fabric_manager_reachable": True,
            "active_partitions": [9],
            "failed_devices": 1,
            "updated_at": None,
            "gpu_map": {"1": "0000:18:00.0", "2": "0000:2a:00.0"},
            "nvlink_fabric": None,
            "lost_pods": [],
        },
        "warm_images": [],
    }
    assert b["name"] == "gpu-b" and b["ready"] is False and b["fabric"] is None


def test_gpus_join_leases_and_fabric_health(admin: httpx.Client) -> None:
    rows = admin.get("/v1/admin/gpus", params={"node": "gpu-a"}).json()["data"]
    assert [(r["pci_address"], r["state"], r["tenancy"], r["healthy"]) for r in rows] == [
        ("0000:18:00.0", "Leased", "landon", True),
        ("0000:2a:00.0", "Free", None, False),
    ]
    assert rows[1]["reason"] == "XID 79"
    assert admin.get("/v1/admin/gpus").json()["count"] == 3


def test_leases(admin: httpx.Client) -> None:
    data = admin.get("/v1/admin/leases").json()["data"]
    assert [(d["name"], d["state"]) for d in data] == [
        ("gpu-a-0000-18-00-0", "Leased"),
        ("gpu-a-0000-2a-00-0", "Free"),
        ("gpu-b-0000-18-00-0", "Quarantined"),
    ]
    assert data[0]["holder"] == {"pod": "gpucaas-x", "namespace": "tenant-landon", "tenancy": "landon"}
    assert admin.get("/v1/admin/leases", params={"node": "gpu-b"}).json()["count"] == 1


def test_partitions(admin: httpx.Client) -> None:
    data = admin.get("/v1/admin/partitions", params={"node": "gpu-a"}).json()["data"]
    assert [(p["id"], p["active"], p["holder"]) for p in data] == [(0, False, None), (9, True, "gpus:0000:18:00.0")]
    assert admin.get("/v1/admin/partitions", params={"node": "gpu-b"}).json() == {"data": [], "count": 0}
