"""What a GPU node and its daemons publish, as the fleet's kwok nodes carry it: the Node as a
kubelet registers it (with the device plugin's ``nvidia.com/gpu: 8`` in the device-plugin
modes), the fabric service's FabricState status (built by its own
``build_fabric_state_status``), and the DRA driver's ResourceSlices (its own ``build_slices``)."""

from __future__ import annotations

from typing import Any

from core import crds, kueue
from core.topology import GPU_COUNT, HGX_H100_PARTITIONS
from services.dra_driver.slices import PublishedGpu, build_slices
from services.fabric.publisher import build_fabric_state_status
from services.tenancy_controller.queues import INSTANCE_TYPE_LABEL

TENANCY = "fleet"
NAMESPACE = crds.tenant_namespace(TENANCY)
#: The nodes' instance type (the tenancy controller's default GPU flavor: Kueue gives the pods it
#: admits its node selector).
INSTANCE_TYPE = "hgx-h100-8"


def node_name(i: int) -> str:
    return f"gpu-{i:05d}"


def pci_of(physical_id: int) -> str:
    return f"0000:{0x18 + 0x10 * (physical_id - 1):02x}:00.0"


def node_object(i: int, *, gpus: bool) -> dict[str, Any]:
    """A Node as a kubelet registers it (kwok manages its status from then on)."""
    capacity = {"cpu": "192", "memory": "2Ti", "pods": "110", "ephemeral-storage": "30Ti"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(GPU_COUNT)  # the device plugin's extended resource
    name = node_name(i)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                kueue.GPU_COUNT_LABEL: str(GPU_COUNT),  # GPU Feature Discovery's
                INSTANCE_TYPE_LABEL: INSTANCE_TYPE,
            },
        },
        "spec": {"podCIDR": f"10.{64 + i // 256}.{i % 256}.0/24"},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def fabric_status(holders: dict[int, str]) -> dict[str, Any]:
    """The fabric service's FabricState status for a board whose active partitions are ``holders``
    (partition id -> holder); every GPU healthy, Fabric Manager reachable."""
    partitions = [
        {
            "id": p.id,
            "gpus": [{"physical_id": g} for g in p.sorted_gpus()],
            "nvlinks": p.nvlinks,
            "active": p.id in holders,
            "supported": True,
            "holder": holders.get(p.id),
        }
        for p in HGX_H100_PARTITIONS
    ]
    gpus = [{"physical_id": g, "pci_bus_id": pci_of(g), "healthy": True} for g in range(1, GPU_COUNT + 1)]
    return build_fabric_state_status(
        partitions=partitions,
        gpus=gpus,
        service_vm={"state": "running", "domain": "fabric-vm"},
        fabric_manager={"reachable": True, "backend": "kwok-fleet"},
    )


def resource_slices(node: str) -> list[dict[str, Any]]:
    """The DRA driver's ResourceSlices for a healthy board (its own ``build_slices``)."""
    return build_slices(node, [PublishedGpu(g, pci_of(g)) for g in range(1, GPU_COUNT + 1)])
