"""What the fleet run knows of one pod: when it was created, bound, Running and ended, where,
and whether the GPUs it got are what its size needs."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.kwok_fleet.node_objects import TENANCY
from core import crds


@dataclass
class PodRecord:
    name: str
    size: int
    duration_s: float  # real seconds
    arrival_h: float
    phase: str  # "trace" or "burst"
    created: float = 0.0  # wall clock: create sent
    bound: float | None = None  # bind seen
    running: float | None = None  # Running seen
    ended: float | None = None  # delete sent
    node: str | None = None
    gpus: int = 0  # the GPUs' mask on the node
    valid: bool = True  # 2/4/8 GPUs form one partition of that size
    overlap: bool = False  # DRA: GPUs already held on the node
    unschedulable: bool = False  # the scheduler marked it Unschedulable at least once
    claim: str | None = None  # DRA: the ResourceClaim made for it
    tenancy: str = TENANCY  # whose pod it is: it lives in the tenancy's namespace
    interruptible: bool = False  # its container class (with a queue: its WorkloadPriorityClass)
    stopped: bool = False  # ended by another's deletion (Kueue's), not by the run's
    preempted: bool = False  # Kueue stopped it for other work (its TerminationTarget condition)
    stop_cause: str | None = None  # what Kueue's condition says of why (``stopped_by_queue``)

    @property
    def namespace(self) -> str:
        return crds.tenant_namespace(self.tenancy)
