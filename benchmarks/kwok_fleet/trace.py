"""The trace a fleet run offers, and the most any scheduler could serve of it.

The trace is the shared seeded workload (``benchmarks.kit.workload``: Poisson arrivals offering
a load of the fleet's GPUs, lognormal durations of mean 1 h, the design's 1/2/4/8-GPU mix), a
warm-up and a measurement window. :func:`pooled_bound` replays it with no API and no latency
on perfect defragmentation, the fleet as one pool of 8 N GPUs: pending jobs start in arrival
order whenever enough GPUs are free anywhere (a pending job never blocks a later one that
fits, as kube-scheduler's queue).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from benchmarks.kit.workload import DEFAULT_MIX, Job, overlap, workload


@dataclass(frozen=True)
class Trace:
    jobs: list[Job]  # arrival and duration in trace hours
    warmup_h: float
    measure_h: float

    @property
    def horizon_h(self) -> float:
        return self.warmup_h + self.measure_h


def make_trace(
    *, nodes: int, load: float, warmup_h: float, measure_h: float, seed: int, mix: dict[int, float] | None = None
) -> Trace:
    """Poisson arrivals offering ``load`` of the fleet's GPUs over the warm-up and the window."""
    jobs = workload(nodes=nodes, load=load, horizon_h=warmup_h + measure_h, mix=mix or DEFAULT_MIX, seed=seed)
    return Trace(jobs, warmup_h, measure_h)


def pooled_bound(trace: Trace, capacity: int) -> dict[str, float]:
    """GPU-hours the trace's jobs get inside the window on one pool of ``capacity`` GPUs (perfect
    defragmentation, no latency): pending jobs start in arrival order whenever they fit."""
    lo, hi = trace.warmup_h, trace.horizon_h
    events: list[tuple[float, int, int]] = []  # (time, 0 = departure / 1 = arrival, job index)
    for i, job in enumerate(trace.jobs):
        heapq.heappush(events, (job.arrival, 1, i))
    free = capacity
    waiting: list[int] = []
    served = offered = 0.0
    for job in trace.jobs:
        offered += job.size * overlap(job.arrival, job.arrival + job.duration, lo, hi)
    while events:
        now, kind, i = heapq.heappop(events)
        if now >= hi:
            break
        if kind == 0:
            free += trace.jobs[i].size
        else:
            waiting.append(i)
        still = []
        for j in waiting:
            job = trace.jobs[j]
            if job.size <= free:
                free -= job.size
                served += job.size * overlap(now, now + job.duration, lo, hi)
                heapq.heappush(events, (now + job.duration, 0, j))
            else:
                still.append(j)
        waiting = still
    return {
        "pooled_bound_gpu_hours": served,
        "offered_gpu_hours": offered,
        "fluid_bound_gpu_hours": min(offered, capacity * (hi - lo)),
    }
