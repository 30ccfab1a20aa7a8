"""Fleet benchmark: the real kube-scheduler places one GPU trace on kwok nodes, four ways.

Run: ``python -m benchmarks.fleet [--quick]`` (``--quick``: 100 nodes; full: 1,000 nodes x
8 GPUs). The last line of stdout is one JSON object (``nodes``, ``gpus``,
``gpu_hours_ratio_vs_most_allocated``, ``gpu_hours_ratio_vs_bound_extender``,
``invalid_partitions_*``, ``scheduled_per_s_*``, ``schedule_p99_ms_extender``,
``eight_gpu_wait_p99_s_*``, ...; the ``modes`` key holds each mode's details).

What runs, for each mode, on a fresh cluster (:class:`~devtools.local_cluster.LocalCluster`:
etcd, kube-apiserver, kube-controller-manager, then kube-scheduler, all the pinned upstream
binaries):

* **kwok** (``sigs.k8s.io/kwok``, the pinned build) as its own process against the API server
  manages every Node: it keeps them Ready (node leases) and "runs" the pods bound to them
  (Pending -> Running; the default Stages its own packages embed, printed by ``kwok-stages``,
  built beside it from ``upstream/kwok/stages``). No kubelet runs.
* Each node carries what its real counterpart publishes. Device-plugin modes: the Node's
  ``nvidia.com/gpu: 8`` capacity (the device plugin's) and its ``FabricState`` (the fabric
  service's: GPUs, Fabric Manager reachable, partitions active with their holder), built by
  the fabric service's own ``build_fabric_state_status``. DRA modes: the node's
  ResourceSlice built by the DRA driver's own ``build_slices`` (no extended resource), and
  the FabricState as well (the fabric service runs in that mode too; the extender reads it).
* This process plays the node side of each pod and the tenants: it creates the pods of a
  seeded trace at their arrival times (the tenant API's own pod, ``services.api.domain.pods.build_pod``,
  1/2/4/8 GPUs), and once kwok reports a pod Running deletes it when its trace duration has
  passed. When a pod is bound, the node's GPUs are what the node would give it: in the
  device-plugin modes ``choose_gpus`` over the node's free GPUs (the device plugin's
  GetPreferredAllocation), in the DRA modes the GPU devices the scheduler's structured
  allocator wrote into the pod's ResourceClaim. The node's FabricState then shows the
  partitions the fabric service would activate for that set (``partitions_for_gpus``: the
  partition, or one single-GPU partition per GPU when the set is none) with the pod as
  holder, published no earlier than the second after the bind (a real node's activation
  takes longer than that; the fabric service stamps ``updatedAt`` in whole seconds), and
  without them once the pod is deleted.

Modes (the same trace each):

* ``most_allocated``: kube-scheduler with the chart's ``kube-scheduler-config.yaml`` less its
  extender: NodeResourcesFit ``MostAllocated`` on ``nvidia.com/gpu`` (bin packing by count);
* ``extender``: the chart's file as is: the gpucaas extender (``gpucaas scheduler-extender``,
  its own process, watching FabricStates, GPULeases and pods) filters, scores and binds;
* ``dra``: the chart's ``kube-scheduler-config-dra.yaml`` less its extender: the
  DynamicResources plugin's structured allocator allocates whole partitions from the slices;
* ``dra_extender``: that file as is: the extender only scores (prioritize, no bind verb).

Figures:

* **served GPU-hours**: per pod, GPUs x the part of [Running, Running + duration) inside the
  measurement window (after the warm-up), counted only when a 2/4/8-GPU pod got its whole
  NVLink partition (placed but invalid GPU-hours are reported as ``gpu_hours_placed``).
  A pod the scheduler cannot place waits (Pending) as on a cluster.
  ``gpu_hours_ratio_vs_bound_extender`` divides the extender's by an upper bound from the
  trace and the fleet's capacity alone: the same trace replayed (no API, no latency) on
  perfect defragmentation, the fleet as one pool of 8 N GPUs, pending jobs started in arrival
  order whenever enough GPUs are free anywhere (a pending job never blocks a later one that
  fits, as kube-scheduler's queue). ``fluid_bound_gpu_hours`` = min(offered, capacity).
* **invalid partitions**: 2/4/8-GPU placements (trace and burst) whose GPUs are not one NVLink
  partition of that size (``core.topology.partition_for``); DRA placements are also
  checked for GPUs already held on the node (``overlapping_placements``).
* **scheduled_per_s**: a burst on the emptied fleet: kube-scheduler is stopped, pods worth
  ``--burst-fraction`` of the fleet's GPUs are created, kube-scheduler is started again;
  binds per second from the first bind to the last (the scheduler's own rate with a full queue).
* **schedule_p99_ms**: during the trace, create sent -> bind seen in this process's pod watch,
  over the pods placed at their first attempt (never marked ``Unschedulable``).
* **eight_gpu_wait_p99_s**: 8-GPU pods of the trace, create sent -> bind seen, in seconds of
  the compressed run (``trace_hour_s`` real seconds stand for one hour of the trace); a pod
  still pending at the end counts with its wait so far.

Time is compressed: a trace hour (the mean job duration) lasts ``--hour-s`` real seconds. The
control plane's own latencies (scheduling, binds, kwok, watches, the extender's view) stay
real, so they weigh more than in an uncompressed fleet; the same holds for every mode.

What the real scheduler cannot be asked at this machine's scale (decision cost over 10,000
nodes, many load levels) stays in the simulator, ``benchmarks.placement``.

The parts of one mode's run are the modules of ``benchmarks.kwok_fleet``; this module runs the
modes and reports.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.kit.report import emit
from benchmarks.kwok_fleet import phases
from benchmarks.kwok_fleet.context import RunContext
from benchmarks.kwok_fleet.control_plane import MODES, ControlPlane
from benchmarks.kwok_fleet.figures import trace_figures
from benchmarks.kwok_fleet.node_side import NodeSide
from benchmarks.kwok_fleet.tenants import Tenants
from benchmarks.kwok_fleet.timers import Timers
from benchmarks.kwok_fleet.trace import Trace, make_trace, pooled_bound
from core.topology import GPU_COUNT

__all__ = ["MODES", "Trace", "main", "make_trace", "pooled_bound", "run", "run_mode"]


def run_mode(
    mode: str,
    *,
    nodes: int,
    trace: Trace,
    hour_s: float,
    burst_fraction: float,
    seed: int,
    folder: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One mode on a fresh cluster: the trace, its figures, the clear-out, the burst."""

    def say(text: str) -> None:
        log(f"[{mode}] {text}")

    plane = ControlPlane(mode, nodes=nodes, folder=folder)
    lock = threading.RLock()
    timers = Timers(lock)
    tenants: Tenants | None = None
    t_mode = time.perf_counter()
    try:
        plane.start()
        assert plane.pool is not None
        context = RunContext(plane.kube, plane.pool, timers, lock)
        errors = context.errors
        node_side = NodeSide(context, nodes=nodes, dra=plane.dra)
        node_side.register()
        plane.start_scheduling()
        tenants = Tenants(context, node_side, hour_s=hour_s)
        tenants.start()
        timers.start()
        say(f"{nodes} nodes ready, kube-scheduler running ({time.perf_counter() - t_mode:.1f} s)")
        t0 = phases.run_trace(tenants, timers, trace, hour_s=hour_s, nodes=nodes, log=say)
        out = trace_figures(tenants.pods, errors, trace, hour_s=hour_s, t0=t0)
        load = os.getloadavg()[0]
        phases.clear(tenants, node_side, plane)
        out.update(phases.run_burst(tenants, plane, seed=seed, burst_fraction=burst_fraction))
        out["invalid_partitions"] = sum(1 for r in tenants.pods.values() if r.node and r.gpus and not r.valid)
        out["overlapping_placements"] = sum(1 for r in tenants.pods.values() if r.overlap)
        out["errors"] = len(errors)
        out["first_errors"] = errors[:5]
        out["load_average_1m_at_trace_end"] = round(load, 2)
        out["wall_s"] = round(time.perf_counter() - t_mode, 1)
        say(
            f"served {out['gpu_hours_served']} GPU-h, invalid {out['invalid_partitions']}, "
            f"never placed {out['pods_never_placed']}, {out['scheduled_per_s']} binds/s in the burst, "
            f"{out['errors']} errors ({out['wall_s']} s)"
        )
        return out
    finally:
        t_close = time.perf_counter()
        timers.stop()
        if tenants is not None:
            tenants.stop()
        plane.close()
        say(f"stopped ({time.perf_counter() - t_close:.1f} s)")


# --------------------------------------------------------------------------- main


def run(
    *,
    nodes: int,
    load: float,
    hour_s: float,
    warmup_h: float,
    measure_h: float,
    seed: int,
    burst_fraction: float,
    modes: Sequence[str],
    keep: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    trace = make_trace(nodes=nodes, load=load, warmup_h=warmup_h, measure_h=measure_h, seed=seed)
    capacity = nodes * GPU_COUNT
    bound = pooled_bound(trace, capacity)
    log(
        f"trace: {len(trace.jobs)} jobs over {trace.horizon_h} h (1 h = {hour_s} s), offered load {load}, "
        f"pooled bound {bound['pooled_bound_gpu_hours']:.1f} GPU-h in the window"
    )
    t_start = time.perf_counter()
    results = phases.run_each(
        modes,
        lambda mode, folder: run_mode(
            mode,
            nodes=nodes,
            trace=trace,
            hour_s=hour_s,
            burst_fraction=burst_fraction,
            seed=seed,
            folder=folder,
            log=log,
        ),
        prefix="bench-fleet-",
        keep=keep,
    )

    def served(mode: str) -> float | None:
        return results[mode]["gpu_hours_served"] if mode in results else None

    def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
        return round(a / b, digits) if a is not None and b else None

    def get(mode: str, key: str) -> Any:
        return results[mode][key] if mode in results else None

    ma = served("most_allocated")
    figures: dict[str, Any] = {
        "nodes": nodes,
        "gpus": capacity,
        "gpu_hours_ratio_vs_most_allocated": ratio(served("extender"), ma),
        "dra_gpu_hours_ratio_vs_most_allocated": ratio(served("dra"), ma),
        "dra_extender_gpu_hours_ratio_vs_most_allocated": ratio(served("dra_extender"), ma),
        "gpu_hours_ratio_vs_bound_extender": ratio(served("extender"), bound["pooled_bound_gpu_hours"], 4),
        "gpu_hours_ratio_vs_bound_most_allocated": ratio(ma, bound["pooled_bound_gpu_hours"], 4),
        "gpu_hours_ratio_vs_bound_dra": ratio(served("dra"), bound["pooled_bound_gpu_hours"], 4),
        "gpu_hours_ratio_vs_bound_dra_extender": ratio(served("dra_extender"), bound["pooled_bound_gpu_hours"], 4),
        "invalid_partitions_most_allocated": get("most_allocated", "invalid_partitions"),
        "invalid_partitions_extender": get("extender", "invalid_partitions"),
        "invalid_partitions_dra": get("dra", "invalid_partitions"),
        "invalid_partitions_dra_extender": get("dra_extender", "invalid_partitions"),
        "scheduled_per_s_most_allocated": get("most_allocated", "scheduled_per_s"),
        "scheduled_per_s_extender": get("extender", "scheduled_per_s"),
        "scheduled_per_s_dra": get("dra", "scheduled_per_s"),
        "scheduled_per_s_dra_extender": get("dra_extender", "scheduled_per_s"),
        # kube-scheduler's CPU per bound pod: DRA's allocator is the cost to cut (issue's slice design)
        "dra_scheduler_cpu_ms_per_pod": get("dra", "scheduler_cpu_ms_per_pod"),
        "scheduler_cpu_ms_per_pod_most_allocated": get("most_allocated", "scheduler_cpu_ms_per_pod"),
        "scheduler_cpu_ms_per_pod_extender": get("extender", "scheduler_cpu_ms_per_pod"),
        "schedule_p99_ms_most_allocated": get("most_allocated", "schedule_p99_ms"),
        "schedule_p99_ms_extender": get("extender", "schedule_p99_ms"),
        "eight_gpu_wait_p99_s_most_allocated": get("most_allocated", "eight_gpu_wait_p99_s"),
        "eight_gpu_wait_p99_s_extender": get("extender", "eight_gpu_wait_p99_s"),
        "eight_gpu_wait_p99_s_dra": get("dra", "eight_gpu_wait_p99_s"),
        "eight_gpu_wait_p99_s_dra_extender": get("dra_extender", "eight_gpu_wait_p99_s"),
        "load": load,
        "jobs": len(trace.jobs),
        "trace_hour_s": hour_s,
        "warmup_h": warmup_h,
        "measure_h": measure_h,
        "seed": seed,
        **{k: round(v, 2) for k, v in bound.items()},
        "modes": results,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    ext = results.get("extender")
    figures["targets_met"] = {
        "ratio_vs_bound_extender>=0.99": _ge(figures["gpu_hours_ratio_vs_bound_extender"], 0.99),
        "ratio_vs_most_allocated>=1.0": _ge(figures["gpu_hours_ratio_vs_most_allocated"], 1.0),
        "invalid_partitions_extender_and_dra==0": all(
            results[m]["invalid_partitions"] == 0 for m in ("extender", "dra", "dra_extender") if m in results
        ),
        "scheduled_per_s_extender>=most_allocated": (
            None
            if ext is None or "most_allocated" not in results
            else ext["scheduled_per_s"] >= results["most_allocated"]["scheduled_per_s"]
        ),
        "dra_gpu_hours_ratio_vs_most_allocated>=0.9": _ge(figures["dra_gpu_hours_ratio_vs_most_allocated"], 0.9),
    }
    return figures


def _ge(value: float | None, floor: float) -> bool | None:
    return None if value is None else value >= floor


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes (default 1,000), a shorter trace")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--load", type=float, default=0.9, help="offered load (fraction of the fleet's GPUs)")
    parser.add_argument("--hour-s", type=float, default=None, help="real seconds per trace hour")
    parser.add_argument("--warmup-h", type=float, default=None, help="trace hours before the measurement window")
    parser.add_argument("--measure-h", type=float, default=None, help="trace hours measured")
    parser.add_argument(
        "--burst-fraction", type=float, default=0.5, help="the burst's GPUs as a fraction of the fleet's"
    )
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--seed", type=int, default=20261126)
    parser.add_argument("--keep", action="store_true", help="keep the clusters' folders and logs")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    nodes = args.nodes or (100 if args.quick else 1000)
    hour_s = args.hour_s or (20.0 if args.quick else 60.0)
    warmup_h = args.warmup_h if args.warmup_h is not None else 2.0
    measure_h = args.measure_h if args.measure_h is not None else (4.0 if args.quick else 6.0)
    figures = run(
        nodes=nodes,
        load=args.load,
        hour_s=hour_s,
        warmup_h=warmup_h,
        measure_h=measure_h,
        seed=args.seed,
        burst_fraction=args.burst_fraction,
        modes=modes,
        keep=args.keep,
    )
    figures["quick"] = args.quick
    emit(figures)
    return figures


if __name__ == "__main__":
    main()
