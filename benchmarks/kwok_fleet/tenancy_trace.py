"""Who submits each job of a fleet trace when the fleet is shared: tenancies of unequal demand,
guarantees and fair-sharing weights, each with its own mix of standard and interruptible work,
all drawn from one seed.

* demand: tenancy ``i`` (from 0) submits a share of the trace's jobs proportional to
  ``1 / (i + 1)`` (a few large tenancies, a long tail of small ones);
* guarantee: ``guaranteed_fraction`` of the fleet's GPUs split among the tenancies in unequal
  parts drawn independently of their demand (some get none), rounded down;
* weight: one of 0.5, 1, 2, 4;
* interruptible: the share of its jobs it submits as interruptible, one of 0, 0.2, 0.5, 0.8;
* cap (``gpu_quota``): the whole fleet, so no cap binds and only the queue decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from random import Random

from benchmarks.kit.workload import Job
from services.tenancy_controller.spec import Tenancy, TenancySpec

GUARANTEE_PARTS = (0.0, 0.0, 0.5, 1.0, 2.0, 4.0)
WEIGHTS = (0.5, 1.0, 1.0, 2.0, 4.0)
INTERRUPTIBLE_SHARES = (0.0, 0.2, 0.5, 0.8)


@dataclass(frozen=True)
class TenancyPlan:
    name: str
    guaranteed: int  # GPUs
    weight: float
    demand: float  # its share of the trace's jobs
    interruptible: float  # the share of its jobs that are interruptible

    def tenancy(self, cap: int) -> Tenancy:
        """The Tenancy the controller would read: capped at ``cap`` GPUs, with the plan's guarantee
        and weight (no object on the cluster: the benchmark applies its queues directly)."""
        spec = TenancySpec(gpu_quota=cap, pod_quota=cap, guaranteed_gpus=self.guaranteed, weight=self.weight)
        return Tenancy(name=self.name, uid="", generation=None, spec=spec)


def plan_tenancies(count: int, gpus: int, *, guaranteed_fraction: float, seed: int) -> list[TenancyPlan]:
    rng = Random(seed)
    harmonic = sum(1.0 / (i + 1) for i in range(count))
    parts = [rng.choice(GUARANTEE_PARTS) for _ in range(count)]
    total = sum(parts) or 1.0
    return [
        TenancyPlan(
            name=f"t{i + 1:02d}",
            guaranteed=int(parts[i] / total * guaranteed_fraction * gpus),
            weight=rng.choice(WEIGHTS),
            demand=1.0 / (i + 1) / harmonic,
            interruptible=rng.choice(INTERRUPTIBLE_SHARES),
        )
        for i in range(count)
    ]


def owners_of(jobs: Sequence[Job], plans: Sequence[TenancyPlan], *, seed: int) -> list[tuple[str, bool]]:
    """Each job's tenancy (drawn by demand) and whether it is interruptible (by that tenancy's share)."""
    rng = Random(seed)
    out = []
    for _ in jobs:
        plan = rng.choices(plans, [p.demand for p in plans])[0]
        out.append((plan.name, rng.random() < plan.interruptible))
    return out
