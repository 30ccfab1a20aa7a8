"""What each kwok node's daemons would do for the pods bound to it (no kubelet runs).

The GPUs a bound pod gets are what the node would give it: in the device-plugin modes
``choose_gpus`` over the node's free GPUs (the device plugin's GetPreferredAllocation), in the
DRA modes the GPU devices the scheduler's structured allocator wrote into the pod's
ResourceClaim. The node's FabricState then shows the partitions the fabric service would
activate for that set (``partitions_for_gpus``: the partition, or one single-GPU partition per
GPU when the set is none) with the pod as holder, published no earlier than the second after
the bind (a real node's activation takes longer than that; the fabric service stamps
``updatedAt`` in whole seconds), and without them once the pod is deleted.
"""

from __future__ import annotations

import math
import threading
import time

from benchmarks.kwok_fleet.context import RunContext
from benchmarks.kwok_fleet.node_objects import (
    fabric_status,
    node_name,
    node_object,
    resource_slices,
)
from benchmarks.kwok_fleet.pod_record import PodRecord
from core import crds, dra
from core.topology import choose_gpus, partition_for, partitions_for_gpus
from services.dra_driver.slices import gpus_of_devices
from services.fabric.publisher import build_fabric_state
from services.placement.fit import FULL_MASK, gpus_of, mask_of


class NodeSide:
    """Every node's free GPUs and active partitions (guarded by the run's ``lock``), and the
    writes of its FabricState."""

    def __init__(self, run: RunContext, *, nodes: int, dra: bool) -> None:
        self.kube, self.pool, self.timers, self.lock, self.errors = run.kube, run.pool, run.timers, run.lock, run.errors
        self.nodes = nodes
        self.dra = dra
        self.free: dict[str, int] = {node_name(i): FULL_MASK for i in range(nodes)}
        self.holders: dict[str, dict[int, str]] = {node_name(i): {} for i in range(nodes)}
        self.publish_due: dict[str, float] = {}  # node -> earliest time its FabricState may be written
        #: one FabricState write per node at a time, each reading the holders it writes: a write
        #: that read them before a change can never land after the write that followed it
        self.publishing: dict[str, threading.Lock] = {node_name(i): threading.Lock() for i in range(nodes)}

    def register(self) -> None:
        """Each node as its kubelet, fabric service and (DRA) driver publish it."""

        def one(i: int) -> None:
            name = node_name(i)
            self.kube.request("POST", "/api/v1/nodes", body=node_object(i, gpus=not self.dra), idempotent=True)
            self.kube.request(
                "POST",
                f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.FABRICSTATE_PLURAL}",
                body=build_fabric_state(name),
                idempotent=True,
            )
            self._publish(name)
            if self.dra:
                for s in resource_slices(name):
                    self.kube.request("POST", "/apis/resource.k8s.io/v1/resourceslices", body=s, idempotent=True)

        list(self.pool.map(one, range(self.nodes)))

    def reset(self) -> None:
        """Every GPU free again and shown so (the fleet emptied)."""
        with self.lock:
            for node in self.free:
                self.free[node] = FULL_MASK
                self.holders[node] = {}
        list(self.pool.map(self._publish, list(self.free)))

    # -- binds and releases -------------------------------------------------------------------

    def bound(self, rec: PodRecord, node: str) -> None:
        """The scheduler bound ``rec`` to ``node``: the GPUs the node gives it."""
        if self.dra:
            self.pool.submit(self._claim_gpus, rec, node)
            return
        with self.lock:
            free = gpus_of(self.free[node])
        choice = choose_gpus(free, rec.size)  # the device plugin's preferred allocation
        if choice is None:
            self.errors.append(f"{rec.name}: {rec.size} GPUs bound to {node} with {sorted(free)} free")
            return
        self._placed(rec, node, frozenset(choice.gpus))

    def released(self, rec: PodRecord) -> None:
        """The pod ends: its GPUs are the node's again (before the delete is sent, so that a pod
        the scheduler binds there as soon as it sees the deletion finds them free); the
        FabricState drops its partitions once the delete has been answered (:meth:`deleted`)."""
        node = rec.node
        if node is None or not rec.gpus:
            return
        holder = f"pod:{rec.namespace}/{rec.name}"
        with self.lock:
            if not rec.overlap:  # GPUs it shared with another pod (an error, counted) stay held
                self.free[node] |= rec.gpus
            holders = self.holders[node]
            for pid in [pid for pid, h in holders.items() if h == holder]:
                del holders[pid]

    def deleted(self, node: str) -> None:
        self._schedule_publish(node, time.time())

    def _placed(self, rec: PodRecord, node: str, gpus: frozenset[int]) -> None:
        """The node gives ``rec`` these GPUs: check the shape, hold them, show the activation."""
        mask = mask_of(gpus)
        part = partition_for(gpus)
        with self.lock:
            rec.gpus = mask
            rec.valid = rec.size not in dra.NVLINK_SIZES or (part is not None and part.size == rec.size)
            free = self.free[node]
            if mask & ~free:
                rec.overlap = True
            self.free[node] = free & ~mask
            for p in partitions_for_gpus(gpus):
                self.holders[node][p.id] = f"pod:{rec.namespace}/{rec.name}"
        # the activation shows no earlier than the second after the bind (updatedAt is whole seconds)
        self._schedule_publish(node, math.floor(rec.bound or time.time()) + 1.05)

    def _claim_gpus(self, rec: PodRecord, node: str) -> None:
        """DRA: the GPUs of the devices allocated in the pod's ResourceClaim."""
        for _ in range(50):
            claim_name = rec.claim
            if claim_name:
                claim = self.kube.request(
                    "GET", f"/apis/resource.k8s.io/v1/namespaces/{rec.namespace}/resourceclaims/{claim_name}"
                )
                results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                    "results"
                ) or []
                if results:
                    self._placed(rec, node, gpus_of_devices(r["device"] for r in results))
                    return
            time.sleep(0.1)
            with self.lock:
                if rec.ended is not None:
                    return
        self.errors.append(f"{rec.name}: no allocated claim found after its bind")

    # -- the FabricState ------------------------------------------------------------------------

    def _publish(self, node: str) -> None:
        """Write the node's FabricState status as the fabric service would (now)."""
        with self.publishing[node]:
            with self.lock:
                holders = dict(self.holders[node])
            self.kube.request(
                "PATCH",
                f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.FABRICSTATE_PLURAL}/{node}/status",
                body={"status": fabric_status(holders)},
                content_type="application/merge-patch+json",
                idempotent=True,
            )

    def _schedule_publish(self, node: str, not_before: float) -> None:
        with self.lock:
            due = self.publish_due.get(node)
            if due is not None and not_before <= due:
                return  # one write pending already, no earlier than asked for now
            self.publish_due[node] = not_before
            self.timers.at(not_before, "publish", lambda: self.pool.submit(self._run_publish, node))

    def _run_publish(self, node: str) -> None:
        with self.lock:
            due = self.publish_due.get(node)
            if due is None or due > time.time() + 0.001:
                return  # written already, or postponed (its own timer comes later)
            del self.publish_due[node]
        try:
            self._publish(node)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"FabricState {node}: {exc}")
