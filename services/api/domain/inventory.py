"""Pure summaries of the cluster's GPU inventory for the admin read endpoints.

Inputs are wire dicts (Node, GPULease, FabricState); outputs are plain JSON-able
dicts. No I/O here: the routes fetch, these functions shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.dra import DRIVER


def fabric_summary(fs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if fs is None:
        return None
    st = fs.get("status") or {}
    parts = st.get("partitions") or []
    return {
        "service_vm": (st.get("serviceVM") or {}).get("state"),
        "fabric_manager_reachable": (st.get("fabricManager") or {}).get("reachable"),
        "active_partitions": [p.get("id") for p in parts if p.get("active")],
        "failed_devices": len(st.get("failedDevices") or []),
        "updated_at": st.get("updatedAt"),
        # physical id (module id) -> PCI address, as the fabric service maps them (docs/fabric-manager.md)
        "gpu_map": {str(g["physicalId"]): g.get("pciBusId") for g in st.get("gpus") or [] if "physicalId" in g},
        # NVLinkFabricIntact: False after a fabric reset until the holders that lost NVLink are gone
        "nvlink_fabric": next(
            (
                ("intact" if c.get("status") == "True" else "lost")
                for c in st.get("conditions") or []
                if c.get("type") == "NVLinkFabricIntact"
            ),
            None,
        ),
        "lost_pods": [x.get("pod") or x.get("holder") for x in st.get("lostPartitions") or []],
    }


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def node_summaries(
    nodes: Iterable[Mapping[str, Any]],
    fabric_states: Iterable[Mapping[str, Any]],
    gpu_resource: str,
    resource_slices: Iterable[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per node. GPU capacity and allocatable come from the node's extended resource
    (device-plugin mode), or, when ``resource_slices`` is given (dra mode), from the DRA
    driver's ResourceSlices: see :func:`dra_gpu_counts`."""
    by_node = {fs["metadata"]["name"]: fs for fs in fabric_states}
    dra_counts = dra_gpu_counts(resource_slices) if resource_slices is not None else None
    out = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        st = node.get("status") or {}
        if dra_counts is not None:
            capacity, allocatable = dra_counts.get(name, (0, 0))
        else:
            capacity = _int((st.get("capacity") or {}).get(gpu_resource))
            allocatable = _int((st.get("allocatable") or {}).get(gpu_resource))
        out.append(
            {
                "name": name,
                "ready": _ready(node),
                "unschedulable": bool((node.get("spec") or {}).get("unschedulable", False)),
                "gpu_capacity": capacity,
                "gpu_allocatable": allocatable,
                "fabric": fabric_summary(by_node.get(name)),
            }
        )
    return out


def gpu_node_names(nodes: Iterable[Mapping[str, Any]], fabric_states: Iterable[Mapping[str, Any]]) -> list[str]:
    """The GPU nodes: those with a FabricState (every GPU node's fabric service writes one)."""
    with_fabric = {fs["metadata"]["name"] for fs in fabric_states}
    return sorted(n["metadata"]["name"] for n in nodes if n["metadata"]["name"] in with_fabric)


def dra_gpu_counts(resource_slices: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """node -> (GPUs, GPUs allocatable) from the gpucaas DRA driver's ResourceSlices.

    The GPUs are those the node's devices name (``physicalIDs``: one per GPU device, like a
    device plugin's devices); a GPU is allocatable while some device naming it is offered,
    i.e. carries no taint that blocks allocation: the driver taints a GPU that is unhealthy,
    leased out of band, held on the fabric by something other than a claim or being checked
    (as a device plugin reports such a device unhealthy). Slices of whole-partition devices
    (the driver's earlier shape, during an upgrade) read the same way. Only the newest
    generation of each pool counts (ResourceSlice ``spec.pool.generation``).
    """
    newest: dict[str, int] = {}
    mine = [s for s in resource_slices if (s.get("spec") or {}).get("driver") == DRIVER]
    for s in mine:
        pool = s["spec"].get("pool") or {}
        newest[pool.get("name", "")] = max(newest.get(pool.get("name", ""), 0), _int(pool.get("generation")))
    present: dict[str, set[str]] = {}
    offered: dict[str, set[str]] = {}
    for s in mine:
        spec = s["spec"]
        pool = spec.get("pool") or {}
        if _int(pool.get("generation")) != newest.get(pool.get("name", "")):
            continue
        node = spec.get("nodeName") or ""
        for device in spec.get("devices") or []:
            named = str(((device.get("attributes") or {}).get("physicalIDs") or {}).get("string") or "")
            gpus = {g for g in named.split(",") if g}
            present.setdefault(node, set()).update(gpus)
            if not any(t.get("effect") in _BLOCKING_TAINT_EFFECTS for t in device.get("taints") or []):
                offered.setdefault(node, set()).update(gpus)
    return {node: (len(g), len(g & offered.get(node, set()))) for node, g in present.items()}


#: Device taint effects under which kube-scheduler allocates no device (resource.k8s.io/v1).
_BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def lease_summary(lease: Mapping[str, Any]) -> dict[str, Any]:
    spec = lease.get("spec") or {}
    st = lease.get("status") or {}
    holder = st.get("holder") or None
    return {
        "name": lease["metadata"]["name"],
        "node": spec.get("node"),
        "pci_address": spec.get("pciAddress"),
        "physical_id": spec.get("physicalId"),
        "device_id": spec.get("deviceId"),
        "model": spec.get("model"),
        "state": st.get("state") or "Free",
        "reason": st.get("reason"),
        "message": st.get("message"),
        "holder": holder,
        "last_check": st.get("lastCheck"),
    }


def gpu_summaries(
    leases: Iterable[Mapping[str, Any]], fabric_states: Iterable[Mapping[str, Any]], node: str | None
) -> list[dict[str, Any]]:
    """One row per GPU: its lease state joined with the fabric's view of its health."""
    health: dict[tuple[str, str], Mapping[str, Any]] = {}
    for fs in fabric_states:
        for g in (fs.get("status") or {}).get("gpus") or []:
            if g.get("pciBusId"):
                health[(fs["metadata"]["name"], g["pciBusId"].lower())] = g
    rows = []
    for lease in leases:
        s = lease_summary(lease)
        if node is not None and s["node"] != node:
            continue
        fab = health.get((s["node"] or "", (s["pci_address"] or "").lower()), {})
        rows.append(
            {
                "node": s["node"],
                "pci_address": s["pci_address"],
                # the node's report maps the PCI address; a lease's own id is written once, and may
                # be the PCI-order guess of a node agent that had not yet learnt the fabric's map
                "physical_id": fab.get("physicalId") if fab.get("physicalId") is not None else s["physical_id"],
                "model": s["model"],
                "state": s["state"],
                "tenancy": (s["holder"] or {}).get("tenancy"),
                "pod": (s["holder"] or {}).get("pod"),
                "healthy": fab.get("healthy"),
                # An unhealthy GPU shows why it is unhealthy; otherwise the lease's last reason.
                "reason": (fab.get("reason") if fab.get("healthy") is False else None)
                or s["reason"]
                or fab.get("reason"),
                "lease": s["name"],
            }
        )
    return sorted(rows, key=lambda r: (r["node"] or "", r["pci_address"] or ""))


def partition_rows(fabric_states: Iterable[Mapping[str, Any]], node: str | None) -> list[dict[str, Any]]:
    rows = []
    for fs in fabric_states:
        name = fs["metadata"]["name"]
        if node is not None and name != node:
            continue
        for p in (fs.get("status") or {}).get("partitions") or []:
            rows.append(
                {
                    "node": name,
                    "id": p.get("id"),
                    "gpus": p.get("gpus") or [],
                    "nvlinks": p.get("nvlinks"),
                    "active": bool(p.get("active")),
                    "supported": p.get("supported", True),
                    "holder": p.get("holder"),
                }
            )
    return sorted(rows, key=lambda r: (r["node"], r["id"] if r["id"] is not None else -1))
