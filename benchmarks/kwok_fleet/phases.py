"""The phases of one mode's run, in order: the trace offered in compressed time, the fleet
cleared, then the burst on the emptied fleet."""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from random import Random
from typing import Any

from benchmarks.kit.procstat import cpu_ms_per, cpu_seconds_of
from benchmarks.kit.workload import DEFAULT_MIX
from benchmarks.kwok_fleet.control_plane import ControlPlane, wait
from benchmarks.kwok_fleet.node_objects import NAMESPACE
from benchmarks.kwok_fleet.node_side import NodeSide
from benchmarks.kwok_fleet.pod_record import PodRecord
from benchmarks.kwok_fleet.tenants import Tenants
from benchmarks.kwok_fleet.timers import Timers
from benchmarks.kwok_fleet.trace import Trace
from core.topology import GPU_COUNT
from services.placement.fit import FULL_MASK


def run_each(
    names: Sequence[str], run_one: Callable[[str, Path], dict[str, Any]], *, prefix: str, keep: bool
) -> dict[str, dict[str, Any]]:
    """``run_one(name, folder)`` for each name in turn, each in a folder of its own under one
    temporary folder (removed at the end unless ``keep``); each one's figures by name."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return {name: run_one(name, tmp / name) for name in names}
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def run_trace(
    tenants: Tenants,
    timers: Timers,
    trace: Trace,
    *,
    hour_s: float,
    nodes: int,
    log: Callable[[str], None],
    owners: Sequence[tuple[str, bool]] | None = None,
) -> float:
    """Offer the trace in compressed time (``hour_s`` real seconds a trace hour); returns the
    wall time it started at. Once its horizon is reached nothing more arrives or departs.
    ``owners``: each job's tenancy and whether it is interruptible (default: the fleet's one
    tenancy, standard)."""
    t0 = time.time() + 1.0
    for i, job in enumerate(trace.jobs):
        rec = PodRecord(f"j{i:06d}-{job.size}g", job.size, job.duration * hour_s, job.arrival, "trace")
        if owners is not None:
            rec.tenancy, rec.interruptible = owners[i]
        tenants.arrive_at(rec, t0 + rec.arrival_h * hour_s)
    end = t0 + trace.horizon_h * hour_s
    last_report = time.time()
    while time.time() < end:
        time.sleep(min(1.0, max(0.0, end - time.time())))
        if time.time() - last_report >= 15:
            last_report = time.time()
            log(f"t={(time.time() - t0) / hour_s:.2f} h: {census(tenants, nodes)}")
    timers.keep_only("publish")
    return t0


def census(tenants: Tenants, nodes: int) -> str:
    with tenants.lock:
        recs = [r for r in tenants.pods.values() if r.phase == "trace" and r.created]
        running = [r for r in recs if r.bound and r.ended is None]
        pending = [r for r in recs if r.bound is None]
        used = sum(r.size for r in running)
    return (
        f"{len(recs)} created, {len(running)} placed ({used}/{nodes * GPU_COUNT} GPUs), "
        f"{len(pending)} pending, {len(tenants.errors)} errors"
    )


def clear(tenants: Tenants, node_side: NodeSide, plane: ControlPlane) -> None:
    """Delete every pod; wait until they, their claims and the node side are gone and shown free."""
    tenants.stop_arrivals(120)
    tenants.delete_all()
    tenants.wait(lambda: not tenants.live, 180, "every pod deleted")
    if plane.dra:
        wait(
            lambda: (
                not plane.kube.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims")[
                    "items"
                ]
            ),
            180,
            "every ResourceClaim deleted",
        )
    node_side.reset()
    if plane.extender_url:
        wait(
            lambda: all(m == FULL_MASK for m in plane.extender_nodes().values()),
            120,
            "the extender sees every GPU free",
        )


def run_burst(tenants: Tenants, plane: ControlPlane, *, seed: int, burst_fraction: float) -> dict[str, Any]:
    """Stop kube-scheduler, create a burst of pods worth ``burst_fraction`` of the fleet's GPUs,
    start it again: binds per second from the first bind to the last."""
    rng = Random(seed + 7)
    sizes, weights = list(DEFAULT_MIX), list(DEFAULT_MIX.values())
    budget = int(burst_fraction * plane.nodes * GPU_COUNT)
    burst: list[PodRecord] = []
    while True:
        size = rng.choices(sizes, weights)[0]
        if size > budget:
            break
        budget -= size
        burst.append(PodRecord(f"b{len(burst):06d}-{size}g", size, 0.0, 0.0, "burst"))
    plane.cluster.kill("kube-scheduler", signal.SIGTERM)
    with tenants.lock:
        for rec in burst:
            tenants.pods[rec.name] = rec
    list(tenants.pool.map(tenants.create, burst))
    names = {r.name for r in burst}
    tenants.wait(lambda: names <= tenants.live, 120, "the burst's pods created")
    if plane.dra:  # the claims are made by kube-controller-manager; wait for them too
        tenants.wait(lambda: all(r.claim for r in burst), 120, "the burst's ResourceClaims made")
    t_start = time.time()
    plane.cluster.restart("kube-scheduler")
    cpu_before = cpu_seconds_of(plane.cluster.pid("kube-scheduler")), cpu_seconds_of(plane.extender_pid())
    deadline = time.time() + max(120.0, 2.0 * len(burst))
    while time.time() < deadline:
        with tenants.lock:
            if all(r.bound for r in burst):
                break
            progress = sum(1 for r in burst if r.bound)
        time.sleep(0.5)
        with tenants.lock:
            if (
                progress == sum(1 for r in burst if r.bound)
                and progress
                and time.time() - max(r.bound or 0 for r in burst) > 15
            ):
                break  # nothing more is bound: the rest do not fit
    cpu_after = cpu_seconds_of(plane.cluster.pid("kube-scheduler")), cpu_seconds_of(plane.extender_pid())
    bound = sorted(r.bound for r in burst if r.bound)
    first, last = (bound[0], bound[-1]) if bound else (t_start, t_start)
    return {
        "burst_pods": len(burst),
        "burst_gpus": sum(r.size for r in burst),
        "burst_bound": len(bound),
        "scheduled_per_s": round((len(bound) - 1) / (last - first), 1) if len(bound) > 1 and last > first else 0.0,
        "burst_s": round(last - first, 2),
        "scheduler_start_to_first_bind_s": round(first - t_start, 2),
        "burst_invalid_partitions": sum(1 for r in burst if r.bound and not r.valid),
        # CPU per bound pod while the burst ran (from kube-scheduler's start: its cache sync too)
        "scheduler_cpu_ms_per_pod": cpu_ms_per(cpu_before[0], cpu_after[0], len(bound)),
        "extender_cpu_ms_per_pod": cpu_ms_per(cpu_before[1], cpu_after[1], len(bound)),
    }
