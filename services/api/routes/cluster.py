"""Admin read endpoints over the cluster's GPU inventory (nodes, GPUs, leases, partitions),
read from Kubernetes (Nodes, GPULease and FabricState custom resources)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query

from core import crds, dra
from core.kube import KubeError
from services.api import errors
from services.api.domain import inventory, warm_images
from services.api.routes.deps import AdminUser, KubeDep, SettingsDep

router = APIRouter(prefix="/v1/admin", tags=["admin"])
NodeFilter = Annotated[
    str | None,
    Query(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Only this node (a node name)."),
]
T = TypeVar("T")


def _read(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except KubeError as exc:
        raise errors.Unavailable(f"Kubernetes API unavailable: {exc.summary()}") from exc


@router.get("/nodes")
def list_nodes(kube: KubeDep, settings: SettingsDep, _admin: AdminUser) -> dict[str, Any]:
    """Nodes with their GPU capacity and a summary of their FabricState (in the DRA
    allocation mode the GPU counts come from the DRA driver's ResourceSlices), and on each
    GPU node whether it holds each warm image (the kubelet's ``status.images``)."""
    nodes = _read(kube.list_nodes)
    states = _read(lambda: kube.list_cluster_objects(crds.FABRICSTATE_PLURAL))
    slices = _read(lambda: kube.list_resource_slices(dra.DRIVER)) if settings.allocation_mode == dra.DRA_MODE else None
    data = inventory.node_summaries(nodes, states, settings.gpu_resource, slices)
    warm = _read(kube.list_warm_images)
    gpu_nodes = set(inventory.gpu_node_names(nodes, states))
    held_by = warm_images.node_images(nodes)
    for row in data:
        row["warm_images"] = warm_images.node_status(warm, held_by[row["name"]]) if row["name"] in gpu_nodes else []
    return {"data": data, "count": len(data)}


@router.get("/gpus")
def list_gpus(kube: KubeDep, _admin: AdminUser, node: NodeFilter = None) -> dict[str, Any]:
    """One row per GPU (from GPULeases), with the fabric's health view."""
    leases = _read(lambda: kube.list_cluster_objects(crds.GPULEASE_PLURAL))
    states = _read(lambda: kube.list_cluster_objects(crds.FABRICSTATE_PLURAL))
    data = inventory.gpu_summaries(leases, states, node)
    return {"data": data, "count": len(data)}


@router.get("/leases")
def list_leases(kube: KubeDep, _admin: AdminUser, node: NodeFilter = None) -> dict[str, Any]:
    """GPULease resources: state, holder, last firmware check."""
    leases = _read(lambda: kube.list_cluster_objects(crds.GPULEASE_PLURAL))
    data = sorted(
        (s for s in map(inventory.lease_summary, leases) if node is None or s["node"] == node),
        key=lambda s: s["name"],
    )
    return {"data": data, "count": len(data)}


@router.get("/partitions")
def list_partitions(kube: KubeDep, _admin: AdminUser, node: NodeFilter = None) -> dict[str, Any]:
    """NVLink partitions per node (from FabricState resources)."""
    states = _read(lambda: kube.list_cluster_objects(crds.FABRICSTATE_PLURAL))
    data = inventory.partition_rows(states, node)
    return {"data": data, "count": len(data)}
