"""Fairness figures of a shared fleet's run: each tenancy's fair share of the GPUs, how far what it
was served strays from it, how long work within a tenancy's guarantee waited, and what
preemption cost (the definitions are in ``benchmarks/fairness.py``'s docstring)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from benchmarks.kit.report import percentile
from benchmarks.kwok_fleet.pod_record import PodRecord
from benchmarks.kwok_fleet.tenancy_trace import TenancyPlan


def fair_allocation(
    capacity: float, demand: Mapping[str, float], guaranteed: Mapping[str, int], weight: Mapping[str, float]
) -> dict[str, float]:
    """Each tenancy's fair GPUs at one instant: its guarantee first (capped by its demand), then
    what is left of ``capacity`` by weight among those still wanting more, none above its demand
    (water-filling: ``min(demand, guaranteed + weight x)`` for the one ``x`` that shares all of
    it, or every demand met). Guarantees beyond the capacity are scaled down alike."""
    alloc = {t: min(d, guaranteed.get(t, 0)) for t, d in demand.items()}
    given = sum(alloc.values())
    if given >= capacity:
        return {t: a * capacity / given for t, a in alloc.items()} if given else alloc
    left = capacity - given
    wanting = {t for t, d in demand.items() if d > alloc[t]}
    while wanting and left > 1e-9:
        level = left / sum(weight[t] for t in wanting)
        full = {t for t in wanting if demand[t] - alloc[t] <= weight[t] * level}
        if not full:
            for t in wanting:
                alloc[t] += weight[t] * level
            break
        for t in full:
            left -= demand[t] - alloc[t]
            alloc[t] = demand[t]
        wanting -= full
    return alloc


def _end(rec: PodRecord, hi: float) -> float:
    """When the pod stopped running: its end, or its duration's end, or the window's."""
    end = rec.running + rec.duration_s if rec.running is not None else hi
    return min(end, rec.ended) if rec.ended is not None else end


def share_figures(
    pods: Iterable[PodRecord],
    plans: Sequence[TenancyPlan],
    *,
    capacity: int,
    lo: float,
    hi: float,
    window_s: float,
    samples: int = 60,
) -> dict[str, Any]:
    """Served against fair GPU-hours, per tenancy and window of ``window_s`` over [lo, hi): each
    a sum over ``samples`` instants of the window. ``share_error``: |served - fair| over the
    fleet's GPU-hours in the window, for each (tenancy, window) where the tenancy had demand."""
    recs = [r for r in pods if r.phase == "trace" and r.created]
    guaranteed = {p.name: p.guaranteed for p in plans}
    weight = {p.name: p.weight for p in plans}
    errors: list[float] = []
    served_total: dict[str, float] = defaultdict(float)
    fair_total: dict[str, float] = defaultdict(float)
    start = lo
    while start + window_s <= hi + 1e-6:
        step = window_s / samples
        served: dict[str, float] = defaultdict(float)
        fair: dict[str, float] = defaultdict(float)
        for k in range(samples):
            t = start + (k + 0.5) * step
            demand: dict[str, float] = defaultdict(float)
            for r in recs:
                if r.created <= t and (r.ended is None or t < r.ended):
                    demand[r.tenancy] += r.size
                if r.running is not None and r.valid and r.running <= t < _end(r, hi):
                    served[r.tenancy] += r.size * step
            for tenancy, gpus in fair_allocation(capacity, demand, guaranteed, weight).items():
                fair[tenancy] += gpus * step
        whole = capacity * window_s
        for tenancy in fair:
            if fair[tenancy] > 0 or served[tenancy] > 0:
                errors.append(abs(served[tenancy] - fair[tenancy]) / whole)
            served_total[tenancy] += served[tenancy]
            fair_total[tenancy] += fair[tenancy]
        start += window_s
    return {
        "share_error_p95": round(percentile(errors, 0.95), 4),
        "share_error_mean": round(sum(errors) / len(errors), 4) if errors else 0.0,
        "share_error_max": round(max(errors, default=0.0), 4),
        "share_samples": len(errors),
        "per_tenancy_served_vs_fair_gpu_s": {
            p.name: [round(served_total[p.name], 1), round(fair_total[p.name], 1)] for p in plans
        },
    }


def guaranteed_waits(
    pods: Iterable[PodRecord],
    plans: Sequence[TenancyPlan],
    *,
    lo: float,
    hi: float,
    count: Literal["demand", "held"] = "demand",
) -> list[float]:
    """Create -> bind (real seconds) of the pods created in [lo, hi) that their tenancy's guarantee
    covers at creation; a pod never bound counts until it was stopped or the window's end.

    ``count="demand"`` (the figure): the tenancy's demand then, this pod and its other pods created
    before it and not ended (waiting or running), is at most its guarantee: the tenancy is under its
    guarantee, and its fair share (:func:`fair_allocation`: the guarantee first, capped by the
    demand) is its whole demand. ``count="held"``: its bound, not ended pods plus this one, so a pod
    behind its own tenancy's earlier waiting pods counts too, though the guarantee cannot cover them
    all (kept to compare with figures measured so before)."""
    recs = [r for r in pods if r.phase == "trace" and r.created]
    guaranteed = {p.name: p.guaranteed for p in plans}
    by_tenancy: dict[str, list[PodRecord]] = defaultdict(list)
    for r in recs:
        by_tenancy[r.tenancy].append(r)
    waits = []
    for r in recs:
        if not lo <= r.created < hi or guaranteed.get(r.tenancy, 0) < r.size:
            continue
        at = r.created
        if count == "held":
            alive = [o for o in by_tenancy[r.tenancy] if o.bound is not None and o.bound <= at]
        else:
            alive = [o for o in by_tenancy[r.tenancy] if o.created <= at]
        before = sum(o.size for o in alive if o is not r and (o.ended is None or o.ended > at))
        if before + r.size <= guaranteed[r.tenancy]:
            waits.append((r.bound or r.ended or hi) - r.created)
    return waits


def preemption_figures(pods: Iterable[PodRecord], *, hour_s: float) -> dict[str, Any]:
    """Pods Kueue preempted (deleted with its ``TerminationTarget`` condition) and the GPU-hours
    they had run when stopped (lost: the run resubmits no preempted pod)."""
    preempted = [r for r in pods if r.phase == "trace" and r.preempted]
    lost_s = sum(r.size * (r.ended - r.running) for r in preempted if r.running is not None and r.ended is not None)
    return {
        "preemptions": len(preempted),
        "gpu_hours_lost_to_preemption": round(lost_s / hour_s, 2),
        "preempted_interruptible": sum(1 for r in preempted if r.interruptible),
        "preemption_causes": dict(Counter((r.stop_cause or "").split(": ", 1)[-1] for r in preempted)),
        "stopped_not_preempted": sum(1 for r in pods if r.phase == "trace" and r.stopped and not r.preempted),
    }
