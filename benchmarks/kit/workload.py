"""The seeded job trace the placement benchmarks replay: Poisson arrivals at the rate that offers
a given load of the fleet's GPUs, durations of mean one hour, sizes from the design's
1/2/4/8-GPU mix (docs/readme/placement.md). The simulator (``benchmarks.placement``) and the
real kube-scheduler (``benchmarks.fleet``) replay the same traces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from random import Random

from core.topology import GPU_COUNT

DEFAULT_MIX: dict[int, float] = {1: 0.40, 2: 0.25, 4: 0.20, 8: 0.15}
MIX_WITH_ODD: dict[int, float] = {1: 0.35, 2: 0.2, 3: 0.05, 4: 0.2, 5: 0.02, 6: 0.02, 7: 0.01, 8: 0.15}
MEAN_DURATION_H = 1.0
DURATION_SIGMA = 1.0


@dataclass(frozen=True)
class Job:
    arrival: float  # hours from the trace's start
    duration: float  # hours
    size: int  # GPUs


def workload(
    *,
    nodes: int,
    load: float,
    horizon_h: float,
    mix: dict[int, float],
    seed: int,
    durations: str = "lognormal",
) -> list[Job]:
    """Poisson arrivals at the rate that offers ``load`` of the fleet's GPUs.

    Durations have mean ``MEAN_DURATION_H``: lognormal (sigma ``DURATION_SIGMA``) or exponential."""
    if durations not in ("lognormal", "exponential"):
        raise ValueError(f"durations must be 'lognormal' or 'exponential', got {durations!r}")
    rng = Random(seed)
    sizes = list(mix)
    weights = [mix[s] for s in sizes]
    mean_size = sum(s * w for s, w in zip(sizes, weights, strict=True)) / sum(weights)
    rate = load * nodes * GPU_COUNT / (mean_size * MEAN_DURATION_H)
    mu = math.log(MEAN_DURATION_H) - DURATION_SIGMA**2 / 2
    jobs: list[Job] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= horizon_h:
            return jobs
        size = rng.choices(sizes, weights)[0]
        duration = (
            rng.lognormvariate(mu, DURATION_SIGMA)
            if durations == "lognormal"
            else rng.expovariate(1.0 / MEAN_DURATION_H)
        )
        jobs.append(Job(t, duration, size))


def overlap(a: float, b: float, lo: float, hi: float) -> float:
    """How much of [a, b) lies inside the window [lo, hi)."""
    return max(0.0, min(b, hi) - max(a, lo))
