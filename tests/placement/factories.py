"""Builders of the wire objects the placement tests send: pods as kube-scheduler sends them."""

from __future__ import annotations

from typing import Any


def pod(gpus: int | str | None, name: str = "job-7f3a", namespace: str = "tenant-acme") -> dict[str, Any]:
    """A v1.Pod as kube-scheduler serialises it into ExtenderArgs.Pod (camelCase fields)."""
    resources: dict[str, Any] = {}
    if gpus is not None:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "9f1c3a2e-5b7d-4e2a-8c1f-2d3e4f5a6b7c",
            "resourceVersion": "48213",
            "creationTimestamp": "2026-11-21T05:00:00Z",
            "labels": {"gpucaas.dev/tenancy": "acme", "gpucaas.dev/container-id": "c-7f3a"},
        },
        "spec": {
            "runtimeClassName": "kata-qemu-nvidia-gpu",
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": resources,
                }
            ],
            "restartPolicy": "Never",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def node(name: str) -> dict[str, Any]:
    """A v1.Node as sent in ExtenderArgs.Nodes when the extender is not nodeCacheCapable."""
    return {
        "metadata": {"name": name, "labels": {"gpucaas.dev/gpu-node": "true"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


PCI = {g: f"0000:{0x18 + 0x10 * (g - 1):02x}:00.0" for g in range(1, 9)}

#: The HGX H100 partition table as the fabric service publishes it (id, physical ids).
PARTITIONS = [
    (0, [1, 2, 3, 4, 5, 6, 7, 8]),
    (1, [1, 2, 3, 4]),
    (2, [5, 6, 7, 8]),
    (3, [1, 3]),
    (4, [2, 4]),
    (5, [5, 7]),
    (6, [6, 8]),
    *((6 + g, [g]) for g in range(1, 9)),
]


def fabric_status(
    active: dict[int, str | None] | None = None,
    unhealthy: tuple[int, ...] = (),
    failed: tuple[int, ...] = (),
    reachable: bool = True,
    updated_at: str = "2026-11-21T05:00:00Z",
) -> dict[str, Any]:
    """FabricState.status as the fabric service publishes it; ``active`` maps partition id -> holder."""
    active = active or {}
    return {
        "updatedAt": updated_at,
        "activePartitionIds": ",".join(str(i) for i in sorted(active)),
        "fabricManager": {"reachable": reachable, "backend": "simulator"},
        "serviceVM": {"state": "running", "domain": "gpucaas-fm", "restarts": 0},
        "gpus": [
            # Fabric Manager spells PCI domains with 8 digits.
            {"physicalId": g, "pciBusId": "0000" + PCI[g], "healthy": g not in unhealthy}
            for g in range(1, 9)
        ],
        "partitions": [
            {
                "id": pid,
                "gpus": gpus,
                "nvlinks": 0 if len(gpus) == 1 else 18 * len(gpus),
                "active": pid in active,
                "supported": True,
                **({"holder": active[pid]} if active.get(pid) else {}),
            }
            for pid, gpus in PARTITIONS
        ],
        "failedDevices": [{"physicalId": g, "pciBusId": PCI[g], "kind": "gpu", "reason": "Xid 79"} for g in failed],
    }


def fabric_state(node: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "FabricState",
        "metadata": {"name": node},
        "spec": {"node": node},
        "status": fabric_status(**status),
    }


def lease(node: str, gpu: int, state: str, pod: str | None = None, namespace: str = "tenant-acme") -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "GPULease",
        "metadata": {"name": f"{node}-{PCI[gpu].replace(':', '-').replace('.', '-')}"},
        "spec": {"node": node, "pciAddress": PCI[gpu], "deviceId": "0x2330", "model": "H100 SXM5"},
        "status": {"state": state},
    }
    if pod:
        body["status"]["holder"] = {"pod": pod, "namespace": namespace, "tenancy": "acme"}
    return body
