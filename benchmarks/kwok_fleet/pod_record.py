"""What the fleet run knows of one pod: when it was created, bound, Running and ended, where,
and whether the GPUs it got are what its size needs."""

from __future__ import annotations

from dataclasses import dataclass


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
