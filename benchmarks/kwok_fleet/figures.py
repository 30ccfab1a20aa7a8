"""The figures of one mode's trace, over its measurement window (after the warm-up).

* served GPU-hours: per pod, GPUs x the part of [Running, Running + duration) inside the
  window, counted only when a 2/4/8-GPU pod got its whole NVLink partition (placed but invalid
  GPU-hours are ``gpu_hours_placed``);
* ``schedule_p*_ms``: create sent -> bind seen, over the pods placed at their first attempt
  (never marked ``Unschedulable``);
* ``wait_p99_s``, ``eight_gpu_wait_p*_s``: create sent -> bind seen, in seconds of the
  compressed run; a pod still pending at the end counts with its wait so far.
"""

from __future__ import annotations

from typing import Any

from benchmarks.kit.report import percentile
from benchmarks.kit.workload import overlap
from benchmarks.kwok_fleet.pod_record import PodRecord
from benchmarks.kwok_fleet.trace import Trace
from core.topology import GPU_COUNT


def trace_figures(
    pods: dict[str, PodRecord], errors: list[str], trace: Trace, *, hour_s: float, t0: float
) -> dict[str, Any]:
    lo = t0 + trace.warmup_h * hour_s
    hi = t0 + trace.horizon_h * hour_s
    served = placed = 0.0
    first_try_ms: list[float] = []
    waits8: list[float] = []
    waits: list[float] = []
    in_trace = [r for r in pods.values() if r.phase == "trace" and r.created]
    for r in in_trace:
        if r.running is not None:
            end = min(r.running + r.duration_s, r.ended or hi, hi)
            gpu_s = r.size * overlap(r.running, end, lo, hi)
            placed += gpu_s
            if r.valid:
                served += gpu_s
        if r.created >= hi:
            continue
        wait = (r.bound if r.bound is not None else hi) - r.created
        waits.append(wait)
        if r.size == GPU_COUNT:
            waits8.append(wait)
        if r.bound is not None and not r.unschedulable:
            first_try_ms.append((r.bound - r.created) * 1000)
    placements = [r for r in pods.values() if r.node and r.gpus]
    to_h = 1.0 / hour_s
    return {
        "gpu_hours_served": round(served * to_h, 2),
        "gpu_hours_placed": round(placed * to_h, 2),
        "pods_created": len(in_trace),
        "pods_placed": sum(1 for r in in_trace if r.bound),
        "pods_never_placed": sum(1 for r in in_trace if r.bound is None),
        "pods_marked_unschedulable": sum(1 for r in in_trace if r.unschedulable),
        "invalid_partitions": sum(1 for r in placements if not r.valid),
        "invalid_partitions_trace": sum(1 for r in placements if not r.valid and r.phase == "trace"),
        "overlapping_placements": sum(1 for r in placements if r.overlap),
        "schedule_p50_ms": round(percentile(first_try_ms, 0.5), 1),
        "schedule_p99_ms": round(percentile(first_try_ms, 0.99), 1),
        "wait_p99_s": round(percentile(waits, 0.99), 2),
        "eight_gpu_wait_p50_s": round(percentile(waits8, 0.5), 2),
        "eight_gpu_wait_p99_s": round(percentile(waits8, 0.99), 2),
        "errors": len(errors),
        "first_errors": errors[:5],
    }
