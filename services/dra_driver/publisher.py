"""Publish this node's ResourceSlices and keep them current.

What is published comes from the fabric service's topology (physical id <-> PCI address,
GPU health as the fabric sees it), its partitions (a partition kept busy by a holder that
is not a claim makes every GPU in it unavailable) and the node's GPU leases (a GPU whose
lease is Releasing, Checking or Quarantined is unavailable); an unavailable GPU's device is
tainted NoSchedule, so the scheduler does not allocate it, nor any partition containing it
(slices.py). Nothing here depends on the claims: every device stays in the slice whatever is
allocated, so a claim the scheduler allocates while a round is being written keeps its GPUs.

The pool's slices are written under one new ``generation`` each time the content changes (the
scheduler uses the newest complete generation only). Slices of this driver and node that are no
longer wanted are deleted (the two slices of partition devices and GPU counters the driver
published before, on an upgrade).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from core import lease_states as states
from core.dra import DRIVER
from core.kube import Kube, NotFound
from services.dra_driver.driver import CLAIM_HOLDER_PREFIX
from services.dra_driver.slices import PublishedGpu, build_slices

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceslices"


class SlicePublisher:
    def __init__(
        self,
        kube: Kube,
        node_name: str,
        gpus: Callable[[], Iterable[PublishedGpu]],
        *,
        binding_conditions: bool = False,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.gpus = gpus
        self.binding_conditions = binding_conditions
        self._published: str | None = None  # the content last written (generation excluded)
        self.generation = 0

    def _current(self) -> dict[str, dict[str, Any]]:
        listing = self.kube.call(
            self.kube.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            field_selector=f"spec.nodeName={self.node_name},spec.driver={DRIVER}",
            idempotent=True,
            what="list this node's ResourceSlices",
        )
        items = cast("dict[str, Any]", listing)["items"]  # the custom-objects API answers plain JSON
        return {i["metadata"]["name"]: i for i in items}

    def publish(self) -> bool:
        """Write the slices if what they say changed; True when something was written."""
        gpus = sorted(self.gpus(), key=lambda g: g.physical_id)
        wanted = build_slices(self.node_name, gpus, generation=0, binding_conditions=self.binding_conditions)
        content = json.dumps([s["spec"] for s in wanted], sort_keys=True)
        current = self._current()
        if content == self._published and set(current) == {s["metadata"]["name"] for s in wanted}:
            return False
        if self.generation == 0:  # after a restart: continue above what the cluster holds
            self.generation = max((i["spec"]["pool"].get("generation", 0) for i in current.values()), default=0)
        self.generation += 1
        for s in wanted:
            s["spec"]["pool"]["generation"] = self.generation
            name = s["metadata"]["name"]
            if name in current:
                s["metadata"]["resourceVersion"] = current[name]["metadata"]["resourceVersion"]
                self.kube.call(
                    self.kube.custom.replace_cluster_custom_object,
                    GROUP,
                    VERSION,
                    PLURAL,
                    name,
                    s,
                    what=f"update ResourceSlice {name}",
                )
            else:
                self.kube.call(
                    self.kube.custom.create_cluster_custom_object,
                    GROUP,
                    VERSION,
                    PLURAL,
                    s,
                    what=f"create ResourceSlice {name}",
                )
        for name in set(current) - {s["metadata"]["name"] for s in wanted}:
            try:
                self.kube.call(
                    self.kube.custom.delete_cluster_custom_object,
                    GROUP,
                    VERSION,
                    PLURAL,
                    name,
                    what=f"delete ResourceSlice {name}",
                )
            except NotFound:
                pass
        self._published = content
        log.info(
            "published ResourceSlices of %s at generation %d (%d GPU devices, available: %s)",
            self.node_name,
            self.generation,
            sum(len(s["spec"]["devices"]) for s in wanted),
            ",".join(str(g.physical_id) for g in gpus if g.available) or "none",
        )
        return True

    def withdraw(self) -> None:
        """Delete this node's slices (the driver is being removed from the node)."""
        for name in self._current():
            try:
                self.kube.call(
                    self.kube.custom.delete_cluster_custom_object,
                    GROUP,
                    VERSION,
                    PLURAL,
                    name,
                    what=f"delete ResourceSlice {name}",
                )
            except NotFound:
                pass
        self._published = None


def foreign_holders(partitions: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """Physical GPU id -> the holder, other than a claim, of a busy partition containing it.

    ``partitions`` is the fabric service's ``GET /v1/partitions``. A partition is busy when it
    is active in Fabric Manager or a holder's record names it: what the fabric service
    refuses to overlap (``PartitionService._blockers``). A claim's own partition needs
    nothing here (kube-scheduler knows its GPUs are allocated, from the claim); any other
    holder (an admin's activation, another allocation path, an active partition nobody
    recorded) is invisible to kube-scheduler, so the partitions overlapping it must not be
    offered at all.
    """
    out: dict[int, str] = {}
    for p in partitions:
        holder = p.get("holder")
        if not (p.get("active") or holder) or (holder or "").startswith(CLAIM_HOLDER_PREFIX):
            continue
        for g in p.get("gpus") or []:
            out.setdefault(int(g["physical_id"]), holder or f"partition {p.get('id')} (active, no holder recorded)")
    return out


def gpus_from(
    topology: Mapping[str, Any], leases: Iterable[dict[str, Any]], partitions: Iterable[Mapping[str, Any]] = ()
) -> list[PublishedGpu]:
    """The node's GPUs as the fabric service sees them, held out while their lease is not usable
    (Releasing, Checking, Quarantined: not in ``lease_states.ALLOCATABLE_STATES``) or while a
    holder other than a claim keeps a partition containing them busy (:func:`foreign_holders`)."""
    state_by_bdf = {
        (lease.get("spec") or {}).get("pciAddress"): states.state_of(lease.get("status")) for lease in leases
    }
    held_by = foreign_holders(partitions)
    # the NUMA node comes with the platform layout (the topology's GPU rows do not carry it)
    layout_gpus = (topology.get("layout") or {}).get("gpus") or []
    numa_of = {int(g["physical_id"]): g.get("numa_node") for g in layout_gpus if "physical_id" in g}
    out = []
    for g in topology.get("gpus", []):
        bdf = g["pci_bus_id"]
        usable = (
            bool(g.get("healthy", True)) and state_by_bdf.get(bdf, states.LeaseState.FREE) in states.ALLOCATABLE_STATES
        )
        out.append(
            PublishedGpu(
                int(g["physical_id"]),
                bdf,
                numa_node=int(numa_of.get(int(g["physical_id"])) or 0),
                allocatable=usable,
                held_by=held_by.get(int(g["physical_id"])),
            )
        )
    return out
