"""Which GPUs of a node are free, derived from what the node reports.

Functions over wire dicts, without I/O (``derive_node`` also writes where it assumed
pods into the mapping it is given). Three sources, all read from the Kubernetes API
by ``kube.py``:

* the node's **FabricState** (published by its fabric service): ``status.gpus``
  (physical id <-> PCI address, healthy), ``status.failedDevices``,
  ``status.fabricManager.reachable`` and ``status.partitions`` — a GPU inside an
  *active partition with a holder* is in use. An active partition without a
  holder (e.g. activated by an admin) does not pin its GPUs;
* the node's **GPULease**s: a GPU whose lease is not ``Free`` (Leased, Releasing,
  Checking — the firmware check between tenants — or Quarantined) is not free;
  a lease's ``status.holder`` names the pod that holds it; its GPU is found by its PCI
  address in the FabricState (its ``spec.physicalId`` only where the report lacks it);
* the **pods** bound to the node that request GPUs and have not ended. A pod
  the node does not show yet (bound a moment ago; its device plugin has not
  activated its partition) would otherwise look free: such pods are *assumed*
  onto the GPUs ``choose_gpus`` will give them, in the order they were bound, after
  the busy GPUs no lease explains have been credited to them, earliest bound first.
  A node admits pods in the order they are bound, so the pods its report lacks are the
  last bound ones (not the last created: a pod refused for a while is bound after
  younger ones). A node gives a pod its GPUs once, when it admits it, and never moves
  them: so a pod, once assumed onto GPUs, stays there (``positions``) while they are
  free in the report. An earlier pod that ends frees its own GPUs; it does not move the
  later pods onto them (it did, and the fleet benchmark caught a pair placed across two
  broken pairs).

The result is a ``NodeFree`` (free mask, healthy mask, usable) for the index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.topology import GPU_COUNT, HGX_H100_PARTITIONS, cover_size
from services.placement.errors import InvalidRequest
from services.placement.extender import pod_gpu_count
from services.placement.fit import FIT_TABLE, mask_of
from services.placement.fleet import Freeing, NodeFree

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A pod bound to a node that asks for GPUs."""

    namespace: str
    name: str
    node: str
    gpus: int
    created: str  # RFC 3339, sorts chronologically
    bound_at: str = ""  # when it was bound (PodScheduled), RFC 3339; "" = unknown
    #: the order in which the watcher first saw it bound (0 = unknown): the API's stamps have
    #: whole seconds, and pods bound in one second are told apart by it
    bound_seq: int = 0
    uid: str = ""  # tells the pod from a later one of the same name
    ending: bool = False  # being deleted: its GPUs free once it is gone

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def normalize_pci(address: str) -> str:
    """``00000000:18:00.0`` (Fabric Manager) and ``0000:18:00.0`` (sysfs) -> the latter."""
    address = address.strip().lower()
    parts = address.split(":")
    if len(parts) == 3:
        try:
            parts[0] = f"{int(parts[0], 16):04x}"
        except ValueError:
            return address
        return ":".join(parts)
    return address


def pod_claim(pod: Mapping[str, Any], resource: str = "nvidia.com/gpu") -> PodClaim | None:
    """The GPU claim of a pod bound to a node, or None (unbound, ended, no GPUs)."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node or phase in TERMINAL_PHASES:
        return None
    try:
        gpus = pod_gpu_count(dict(pod), resource)
    except InvalidRequest:
        return None
    if gpus <= 0:
        return None
    meta = pod.get("metadata") or {}
    created = str(meta.get("creationTimestamp") or "")
    bound_at = created
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            bound_at = str(cond["lastTransitionTime"])
    return PodClaim(
        meta.get("namespace", ""),
        meta.get("name", ""),
        node,
        gpus,
        created,
        bound_at,
        uid=str(meta.get("uid") or ""),
        ending=bool(meta.get("deletionTimestamp")),
    )


def _bind_order(claim: PodClaim) -> tuple[float, int, str, str]:
    bound = _seconds(claim.bound_at or claim.created)
    return (bound if bound is not None else 0.0, claim.bound_seq, claim.created, claim.key)


def _partition_mask_holding(gpus: set[int], size: int) -> int:
    """GPUs of the smallest partition of ``size``'s covering size that holds ``gpus`` (all if none)."""
    cover = cover_size(size)
    for part in HGX_H100_PARTITIONS:
        if part.size == cover and gpus <= part.gpus:
            return mask_of(part.gpus)
    return mask_of(list(range(1, GPU_COUNT + 1)))


def _seconds(stamp: Any) -> float | None:
    """An RFC 3339 time as whole epoch seconds (the API's resolution), or None."""
    if not stamp:
        return None
    try:
        return float(int(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()))
    except ValueError:
        return None


def _phys(value: Any) -> int | None:
    return value if isinstance(value, int) and 1 <= value <= GPU_COUNT else None


def _pci_map(status: Mapping[str, Any]) -> dict[str, int]:
    """PCI address -> physical id, from the FabricState's ``status.gpus``."""
    return {
        normalize_pci(gpu["pciBusId"]): pid
        for gpu in status.get("gpus") or []
        if (pid := _phys(gpu.get("physicalId"))) is not None and gpu.get("pciBusId")
    }


def _lease_gpu(spec: Mapping[str, Any], pci_to_phys: Mapping[str, int]) -> int | None:
    """The physical id of a lease's GPU: the node's report maps the lease's PCI address; the
    lease's own physicalId (written once, when it was made) is the fallback: a node agent that
    made it before it learnt the fabric's map wrote PCI order there."""
    pid = pci_to_phys.get(normalize_pci(spec["pciAddress"])) if spec.get("pciAddress") else None
    return pid if pid is not None else _phys(spec.get("physicalId"))


def freeing(
    fabric_state: Mapping[str, Any],
    leases: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[PodClaim] = (),
    positions: Mapping[str, int] | None = None,
) -> Freeing:
    """What of the node frees by itself soon: the GPUs whose lease is ``Releasing`` or in the
    firmware check between tenants (``Checking``), those of its pods being deleted, found by
    their ``Leased`` leases or where they were assumed (``positions``), and those still
    ``Leased`` by a pod no longer running there (gone or ended: its node agent releases them
    next); a pod being deleted whose GPUs neither names counts by its number of GPUs
    (``unplaced``)."""
    pci_to_phys = _pci_map(fabric_state.get("status") or {})
    pods = list(pods)
    ending = {claim.key: claim.gpus for claim in pods if claim.ending}
    running = {claim.key for claim in pods if not claim.ending}
    gpus: set[int] = set()
    found: dict[str, int] = {}  # ending pod -> its GPUs found by a lease
    for lease in leases:
        lstatus = lease.get("status") or {}
        state = lstatus.get("state")
        holder = lstatus.get("holder") or {}
        key = f"{holder.get('namespace', '')}/{holder.get('pod', '')}"
        if state in ("Releasing", "Checking") or (state == "Leased" and holder.get("pod") and key not in running):
            pid = _lease_gpu(lease.get("spec") or {}, pci_to_phys)
            if pid is not None:
                gpus.add(pid)
                if state == "Leased":
                    found[key] = found.get(key, 0) + 1
    mask = mask_of(gpus)
    unplaced = 0
    for key, count in ending.items():
        where = (positions or {}).get(key, 0) if key not in found else 0
        mask |= where
        unplaced += max(0, count - found.get(key, 0) - where.bit_count())
    return Freeing(mask, unplaced)


def occupants(
    name: str,
    fabric_state: Mapping[str, Any],
    leases: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[PodClaim] = (),
    positions: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Where the node's running GPU pods are (pod key -> GPU mask; ``name``: the node), for the
    partition check to take a partition back: by their ``Leased`` leases (what the node itself
    says), else where they were assumed (``positions``, as ``derive_node`` keeps them). Pods
    being deleted, and pods neither places, are left out: nothing is taken back from GPUs the
    check cannot name."""
    pci_to_phys = _pci_map(fabric_state.get("status") or {})
    by_lease: dict[str, int] = {}
    for lease in leases:
        lstatus = lease.get("status") or {}
        holder = lstatus.get("holder") or {}
        if lstatus.get("state") != "Leased" or not holder.get("pod"):
            continue
        pid = _lease_gpu(lease.get("spec") or {}, pci_to_phys)
        if pid is not None:
            key = f"{holder.get('namespace', '')}/{holder['pod']}"
            by_lease[key] = by_lease.get(key, 0) | mask_of({pid})
    found: dict[str, int] = {}
    for claim in pods:
        if claim.ending or claim.node != name:
            continue
        where = by_lease.get(claim.key) or (positions or {}).get(claim.key, 0)
        if where:
            found[claim.key] = where
    return found


def derive_node(
    name: str,
    fabric_state: Mapping[str, Any],
    leases: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[PodClaim] = (),
    positions: MutableMapping[str, int] | None = None,
) -> NodeFree:
    """The node's free and healthy GPU masks from its reports (see module docstring).

    ``positions`` (pod key -> GPU mask): where pods the report lacks were assumed before.
    Such a pod is counted there again while those GPUs are free in the report (else
    where ``choose_gpus`` puts it now), and the mapping is updated with where it is
    counted this time."""
    status = fabric_state.get("status") or {}
    pci_to_phys = _pci_map(status)
    healthy = {
        pid for gpu in status.get("gpus") or [] if (pid := _phys(gpu.get("physicalId"))) and gpu.get("healthy", True)
    }
    for failed in status.get("failedDevices") or []:
        pid = _phys(failed.get("physicalId"))
        if pid is None and failed.get("pciBusId"):
            pid = pci_to_phys.get(normalize_pci(failed["pciBusId"]))
        healthy.discard(pid)

    busy: set[int] = set()
    for part in status.get("partitions") or []:
        if part.get("active") and part.get("holder"):
            busy.update(g for g in part.get("gpus") or [] if _phys(g))

    leased_pods: dict[str, set[int]] = {}  # pod -> its GPUs whose lease already says Leased
    leased_gpus = 0
    not_pod_held: set[int] = set()  # Releasing / Checking / Quarantined: no running pod has them
    for lease in leases:
        spec = lease.get("spec") or {}
        lstatus = lease.get("status") or {}
        state = lstatus.get("state") or "Free"
        if state == "Free":
            continue
        pid = _lease_gpu(spec, pci_to_phys)
        if pid is not None:
            busy.add(pid)
            if state != "Leased":
                not_pod_held.add(pid)
        holder = lstatus.get("holder") or {}
        if state == "Leased" and holder.get("pod"):
            leased_pods.setdefault(f"{holder.get('namespace', '')}/{holder['pod']}", set()).update(
                {pid} if pid is not None else set()
            )
            leased_gpus += 1

    free_mask = mask_of(healthy - busy)
    # A pod bound no earlier than the node's last report (same second included) cannot
    # be in it. Earlier unleased pods are credited with the busy GPUs no lease explains,
    # earliest bound first; what is left over (the node has not admitted them yet, though
    # its report is newer) is assumed on choose_gpus' choice, in bind order as the node will.
    reported = _seconds(status.get("updatedAt"))
    unexplained = max(0, len(busy - not_pod_held) - leased_gpus)
    for claim in sorted(pods, key=_bind_order):
        if claim.gpus > GPU_COUNT:
            continue
        if claim.key in leased_pods:
            # The node writes a pod's leases one GPU at a time: until all are Leased, the rest
            # of the pod's partition is still its own, not free.
            held = leased_pods[claim.key]
            if len(held) < claim.gpus:
                free_mask &= ~_partition_mask_holding(held, claim.gpus)
            continue
        bound = _seconds(claim.bound_at)
        too_new = reported is not None and bound is not None and bound >= reported
        if not too_new and claim.gpus <= unexplained:
            unexplained -= claim.gpus
            continue
        where = positions.get(claim.key, 0) if positions is not None else 0
        if not where or where & free_mask != where:
            choice = FIT_TABLE[claim.gpus][free_mask]
            where = choice.gpus_mask if choice.choice is not None else 0
        free_mask &= ~where
        if positions is not None and where:
            positions[claim.key] = where

    fm = status.get("fabricManager") or {}
    usable = fm.get("reachable", True) is not False
    reason = None
    if not usable:
        reason = "Fabric Manager unreachable on the node" + (f": {fm['message']}" if fm.get("message") else "")
    return NodeFree(name, free_mask, mask_of(healthy), usable, reason)
