"""Fairness benchmark: who gets the GPUs of a shared kwok fleet, with Kueue admitting (the
tenancies' ClusterQueues, docs/queues.md) and with kube-scheduler's queue alone.

Run: ``python -m benchmarks.fairness [--quick]`` (``--quick``: 40 nodes, a shorter trace). The
last line of stdout is one JSON object: ``share_error_p95``, ``guaranteed_wait_p99_s``,
``gpu_hours_ratio_vs_bound``, ``preemptions``, ``gpu_hours_lost_to_preemption``,
``invalid_partitions``, each also with ``_baseline`` for the run without Kueue, ``targets_met``,
and each run's details under ``runs``.

**The trace.** ``benchmarks.fleet``'s seeded trace (Poisson arrivals offering ``--load`` of the
fleet's GPUs, lognormal durations of mean 1 h, 1/2/4/8 GPUs) with each job given to one of 20
tenancies of unequal demand, guarantees and weights, standard or interruptible
(``benchmarks.kwok_fleet.tenancy_trace``; half of the fleet's GPUs guaranteed in all; no cap
binds: each tenancy's ``gpu_quota`` is the whole fleet). The default load, 1.5, is more than
the fleet holds, so that the queue has something to decide.

**The two runs**, each on a fresh cluster of ``benchmarks.kwok_fleet`` in its ``extender`` mode
(the real kube-scheduler with the chart's configuration and the gpucaas extender, device-plugin
GPUs, kwok nodes and the node side played by this process; ``benchmarks/fleet.py`` says how):

* ``kueue``: Kueue v0.17 (``devtools.kueue``) admits. Its objects are the tenancy controller's
  own builders' (``services.tenancy_controller.queues``: a ClusterQueue per tenancy in the
  cohort ``gpucaas``, its LocalQueue ``default``, the GPU ResourceFlavor, the two
  WorkloadPriorityClasses, the Cohort holding the pool of unguaranteed GPUs, and the partition
  AdmissionCheck every ClusterQueue lists, answered by the extender, as the chart has it with
  Kueue: docs/queues.md), applied directly
  without their ownerReferences (no controller runs, no Tenancy object exists). The pods are the
  API's own (``build_pod`` with the queue and the class). A pod Kueue preempts is marked
  (``TerminationTarget``) and deleted, as on a cluster; it is not resubmitted (as a container
  without ``restart_on_preemption``: it ends ``Failed``; the API's restart is not played here).
* ``baseline``: the same trace, the same pods without a queue label, no Kueue and no
  ResourceQuota: kube-scheduler's queue alone, no caps (the tenancies' caps are the whole fleet
  in the Kueue run too, so neither run is capped).

**Fair share.** At each instant, a tenancy's *demand* is the GPUs of its pods created and not yet
ended in that run (waiting or running). Its fair GPUs are its guarantee first, capped by its
demand; what is left of the fleet's GPUs is then shared by weight among the tenancies whose
demand is not met, none above its demand (water-filling: ``min(demand, guaranteed + weight x)``
for the one level ``x`` that gives out all of it, or every demand met): Kueue's own arithmetic
(nominal quota, then borrowing weighted by fair-sharing weight), with the fleet as one pool.
Served and fair GPU-seconds are summed over windows of ``--window-h`` trace hours of the
measurement window (60 instants each).

Figures (over the measurement window, after the warm-up; each also for the baseline):

* ``share_error_p95``: for every (tenancy, window) where the tenancy had demand,
  |served - fair| GPU-hours over the fleet's GPU-hours in the window; the 95th percentile. Served
  counts only placements on whole NVLink partitions, as ``benchmarks.fleet``'s served GPU-hours.
* ``guaranteed_wait_p99_s``: create -> bind of the pods whose tenancy was under its guarantee
  when they were created (its demand then, this pod and its earlier pods not ended, waiting or
  running, at most its guarantee: its fair share is then its whole demand), in
  *trace* seconds (real seconds x 3600 / ``--hour-s``; ``_real_s`` gives the real ones): the
  control plane's own latency weighs 3600 / hour_s times more than on a real fleet.
* ``gpu_hours_ratio_vs_bound``: served GPU-hours over ``benchmarks.fleet``'s pooled bound of the
  same trace (perfect defragmentation, no latency, no preemption, nothing lost).
* ``preemptions``: pods Kueue deleted with its ``TerminationTarget`` condition saying preempted;
  ``gpu_hours_lost_to_preemption``: the GPU-hours they had run (trace hours), all lost.
* ``invalid_partitions``: 2/4/8-GPU placements not on one NVLink partition of their size.

Targets (``targets_met``): share_error_p95 <= 0.05 and below the baseline's;
guaranteed_wait_p99_s < 60 trace seconds; gpu_hours_ratio_vs_bound >= 0.97; invalid_partitions 0.
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

from benchmarks.kit.report import emit, percentile
from benchmarks.kwok_fleet import phases
from benchmarks.kwok_fleet.context import RunContext
from benchmarks.kwok_fleet.control_plane import ControlPlane, wait
from benchmarks.kwok_fleet.fair_share import guaranteed_waits, preemption_figures, share_figures
from benchmarks.kwok_fleet.figures import trace_figures
from benchmarks.kwok_fleet.node_objects import INSTANCE_TYPE
from benchmarks.kwok_fleet.node_side import NodeSide
from benchmarks.kwok_fleet.tenancy_trace import TenancyPlan, owners_of, plan_tenancies
from benchmarks.kwok_fleet.tenants import Tenants
from benchmarks.kwok_fleet.timers import Timers
from benchmarks.kwok_fleet.trace import Trace, make_trace, pooled_bound
from core import kueue
from core.topology import GPU_COUNT

VARIANTS = ("kueue", "baseline")
TENANCIES = 20
GUARANTEED_FRACTION = 0.5
#: Kueue's API client rate (its Configuration's ``clientConnection``; upstream's default is 20
#: queries a second, burst 30): the compressed trace asks for admissions, status updates and
#: preemptions 3600 / hour_s times faster than a real fleet, so the limit is raised alike.
KUEUE_QPS, KUEUE_BURST = 500, 1000


def _kueue_manager(cluster: Any, folder: Path) -> Any:
    """``devtools.kueue``'s Kueue with its client rate raised for compressed time."""
    from devtools.kueue import Kueue

    class CompressedTimeKueue(Kueue):
        def configuration(self, cert_dir: Path) -> dict[str, Any]:
            return super().configuration(cert_dir) | {"clientConnection": {"qps": KUEUE_QPS, "burst": KUEUE_BURST}}

    return CompressedTimeKueue(cluster, folder)


def _cpu_of(plane: ControlPlane, queue_manager: Any) -> dict[str, float]:
    """CPU seconds used so far by Kueue, kube-scheduler, kube-apiserver and the extender."""
    from benchmarks.kit.procstat import cpu_seconds_of

    pids = {
        "kube-apiserver": plane.cluster.pid("kube-apiserver"),
        "kube-scheduler": plane.cluster.pid("kube-scheduler"),
        "extender": plane.extender_pid(),
        "kueue": queue_manager.pid("kueue") if queue_manager is not None else None,
    }
    return {name: cpu_seconds_of(pid) or 0.0 for name, pid in pids.items() if pid is not None}


def pods_at_end(plane: ControlPlane) -> dict[str, int]:
    """The pods left when the trace ends, by phase, gated or not, being deleted or not."""
    states: dict[str, int] = {}
    for pod in plane.kube.request("GET", "/api/v1/pods")["items"]:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        state = " ".join(
            [
                (pod.get("status") or {}).get("phase", "?"),
                "gated" if spec.get("schedulingGates") else ("bound" if spec.get("nodeName") else "unbound"),
                *(["deleting"] if meta.get("deletionTimestamp") else []),
            ]
        )
        states[state] = states.get(state, 0) + 1
    return states


def workloads_at_end(plane: ControlPlane) -> dict[str, int]:
    """Kueue's Workloads when the trace ends, by state: what still waits, and why."""
    items = plane.kube.request("GET", f"/apis/{kueue.API_VERSION}/workloads")["items"]
    states: dict[str, int] = {}
    for w in items:
        conds = {c["type"]: c for c in (w.get("status") or {}).get("conditions") or []}
        if conds.get("Finished", {}).get("status") == "True":
            state = "finished"
        elif conds.get("Admitted", {}).get("status") == "True":
            evicted = conds.get("Evicted", {}).get("status") == "True"
            state = "admitted, evicted" if evicted else "admitted"
        else:
            reserved = conds.get("QuotaReserved") or {}
            state = f"pending: {reserved.get('reason', 'no condition')}: {reserved.get('message', '')[:160]}"
        states[state] = states.get(state, 0) + 1
    return states


def queue_objects(plans: Sequence[TenancyPlan], *, nodes: int) -> list[dict[str, Any]]:
    """What the tenancy controller keeps for these tenancies on this fleet, by its own builders,
    less the ownerReferences (no Tenancy object exists here)."""
    from services.tenancy_controller.queues import (
        GpuFlavor,
        build_cluster_queue,
        build_cohort,
        build_local_queue,
        build_shared,
        pool_of,
    )

    flavor = GpuFlavor.of_instance_type(INSTANCE_TYPE)
    tenancies = [p.tenancy(nodes * GPU_COUNT) for p in plans]
    pool = pool_of([GPU_COUNT] * nodes, [t.spec.guaranteed_gpus for t in tenancies])
    objects = [*build_shared(flavor, partition_check=True), build_cohort(flavor, pool)]
    for t in tenancies:
        objects += [build_cluster_queue(t, flavor, partition_check=True), build_local_queue(t)]
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)
    return objects


def namespaces(plans: Sequence[TenancyPlan], *, nodes: int) -> list[dict[str, Any]]:
    from services.tenancy_controller.builders import build_namespace

    return [build_namespace(p.tenancy(nodes * GPU_COUNT), owned=False) for p in plans]


def _cluster_queues_active(plane: ControlPlane, count: int) -> bool:
    items = plane.kube.request("GET", f"/apis/{kueue.API_VERSION}/clusterqueues")["items"]
    active = [
        q
        for q in items
        if any(c["type"] == "Active" and c["status"] == "True" for c in (q.get("status") or {}).get("conditions") or [])
    ]
    return len(active) == count


def _service_accounts_made(plane: ControlPlane, names: list[str]) -> bool:
    listed = plane.kube.request("GET", "/api/v1/serviceaccounts")["items"]
    have = {s["metadata"]["namespace"] for s in listed if s["metadata"]["name"] == "default"}
    return set(names) <= have


def run_variant(
    variant: str,
    *,
    nodes: int,
    trace: Trace,
    plans: Sequence[TenancyPlan],
    owners: Sequence[tuple[str, bool]],
    hour_s: float,
    window_h: float,
    folder: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One run of the trace on a fresh cluster, with Kueue admitting (``kueue``) or without."""
    from devtools.kueue import apply_all

    def say(text: str) -> None:
        log(f"[{variant}] {text}")

    plane = ControlPlane("extender", nodes=nodes, folder=folder, partition_check=variant == "kueue")
    lock = threading.RLock()
    timers = Timers(lock)
    tenants: Tenants | None = None
    queue_manager: Any = None
    t_run = time.perf_counter()
    try:
        plane.start()
        admin = plane.cluster.admin_kubeconfig
        apply_all(admin, namespaces(plans, nodes=nodes))
        if variant == "kueue":
            queue_manager = _kueue_manager(plane.cluster, folder / "kueue").start()
            apply_all(admin, queue_objects(plans, nodes=nodes))
            # its garbage collector learns of Kueue's kinds now, not at its next discovery: a
            # Workload whose pod is gone is deleted (its quota given back) as on a cluster where
            # Kueue was installed first
            plane.cluster.restart("kube-controller-manager")
        assert plane.pool is not None
        context = RunContext(plane.kube, plane.pool, timers, lock)
        node_side = NodeSide(context, nodes=nodes, dra=False)
        node_side.register()
        names = [ns["metadata"]["name"] for ns in namespaces(plans, nodes=nodes)]
        wait(lambda: _service_accounts_made(plane, names), 60, "each tenancy namespace's default ServiceAccount")
        plane.start_scheduling()
        if queue_manager is not None:  # active once the extender marks the partition check Active
            wait(lambda: _cluster_queues_active(plane, len(plans)), 120, "every ClusterQueue active")
        queue = kueue.LOCAL_QUEUE if variant == "kueue" else None
        tenants = Tenants(context, node_side, hour_s=hour_s, namespace=None, queue=queue)
        tenants.start()
        timers.start()
        say(f"{nodes} nodes ready, {len(plans)} tenancies ({time.perf_counter() - t_run:.1f} s)")
        cpu_before = _cpu_of(plane, queue_manager)
        t0 = phases.run_trace(tenants, timers, trace, hour_s=hour_s, nodes=nodes, log=say, owners=owners)
        lo, hi = t0 + trace.warmup_h * hour_s, t0 + trace.horizon_h * hour_s
        at_end = workloads_at_end(plane) if queue_manager is not None else {}
        cpu = {k: round(v - cpu_before.get(k, 0.0), 1) for k, v in _cpu_of(plane, queue_manager).items()}
        out_pods = pods_at_end(plane)
        with lock:
            pods = list(tenants.pods.values())
            out = trace_figures(tenants.pods, context.errors, trace, hour_s=hour_s, t0=t0)
            out.update(share_figures(pods, plans, capacity=nodes * GPU_COUNT, lo=lo, hi=hi, window_s=window_h * hour_s))
            waits = guaranteed_waits(pods, plans, lo=lo, hi=hi)
            waits_held = guaranteed_waits(pods, plans, lo=lo, hi=hi, count="held")
            out.update(preemption_figures(pods, hour_s=hour_s))
        p99 = percentile(waits, 0.99)
        out["workloads_at_end"] = at_end
        out["pods_at_end"] = out_pods
        out["cpu_s_during_trace"] = cpu
        out["load_average_1m_at_trace_end"] = round(os.getloadavg()[0], 2)
        out["guaranteed_pods"] = len(waits)
        out["guaranteed_wait_p99_real_s"] = round(p99, 2)
        out["guaranteed_wait_p99_s"] = round(p99 * 3600 / hour_s, 1)
        out["guaranteed_wait_p50_s"] = round(percentile(waits, 0.5) * 3600 / hour_s, 1)
        # the definition before: the tenancy's bound pods only (see guaranteed_waits)
        out["guaranteed_pods_by_held"] = len(waits_held)
        out["guaranteed_wait_p99_s_by_held"] = round(percentile(waits_held, 0.99) * 3600 / hour_s, 1)
        out["wall_s"] = round(time.perf_counter() - t_run, 1)
        say(
            f"served {out['gpu_hours_served']} GPU-h, share error p95 {out['share_error_p95']}, "
            f"guaranteed wait p99 {out['guaranteed_wait_p99_s']} trace s, {out['preemptions']} preempted, "
            f"invalid {out['invalid_partitions']}, {out['errors']} errors ({out['wall_s']} s)"
        )
        return out
    finally:
        timers.stop()
        if tenants is not None:
            tenants.stop()
        if queue_manager is not None:
            queue_manager.stop()
        plane.close()


def run(
    *,
    nodes: int,
    load: float,
    hour_s: float,
    warmup_h: float,
    measure_h: float,
    window_h: float,
    seed: int,
    variants: Sequence[str] = VARIANTS,
    keep: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    capacity = nodes * GPU_COUNT
    trace = make_trace(nodes=nodes, load=load, warmup_h=warmup_h, measure_h=measure_h, seed=seed)
    plans = plan_tenancies(TENANCIES, capacity, guaranteed_fraction=GUARANTEED_FRACTION, seed=seed + 1)
    owners = owners_of(trace.jobs, plans, seed=seed + 2)
    bound = pooled_bound(trace, capacity)
    log(
        f"trace: {len(trace.jobs)} jobs of {len(plans)} tenancies over {trace.horizon_h} h (1 h = {hour_s} s), "
        f"offered load {load}, pooled bound {bound['pooled_bound_gpu_hours']:.1f} GPU-h in the window"
    )
    t_start = time.perf_counter()
    results = phases.run_each(
        variants,
        lambda variant, folder: run_variant(
            variant,
            nodes=nodes,
            trace=trace,
            plans=plans,
            owners=owners,
            hour_s=hour_s,
            window_h=window_h,
            folder=folder,
            log=log,
        ),
        prefix="bench-fairness-",
        keep=keep,
    )

    def figure(variant: str, key: str) -> Any:
        return results[variant][key] if variant in results else None

    def ratio(variant: str) -> float | None:
        served = figure(variant, "gpu_hours_served")
        return round(served / bound["pooled_bound_gpu_hours"], 4) if served is not None else None

    figures: dict[str, Any] = {"nodes": nodes, "gpus": capacity, "tenancies": len(plans), "jobs": len(trace.jobs)}
    for suffix, variant in (("", "kueue"), ("_baseline", "baseline")):
        figures[f"share_error_p95{suffix}"] = figure(variant, "share_error_p95")
        figures[f"guaranteed_wait_p99_s{suffix}"] = figure(variant, "guaranteed_wait_p99_s")
        figures[f"gpu_hours_ratio_vs_bound{suffix}"] = ratio(variant)
        figures[f"preemptions{suffix}"] = figure(variant, "preemptions")
        figures[f"gpu_hours_lost_to_preemption{suffix}"] = figure(variant, "gpu_hours_lost_to_preemption")
        figures[f"invalid_partitions{suffix}"] = figure(variant, "invalid_partitions")
    share, share_base = figures["share_error_p95"], figures["share_error_p95_baseline"]
    wait_s, served_ratio = figures["guaranteed_wait_p99_s"], figures["gpu_hours_ratio_vs_bound"]
    figures["targets_met"] = {
        "share_error_p95<=0.05_and_below_baseline": None
        if share is None or share_base is None
        else share <= 0.05 and share < share_base,
        "guaranteed_wait_p99_s<60": None if wait_s is None else wait_s < 60,
        "gpu_hours_ratio_vs_bound>=0.97": None if served_ratio is None else served_ratio >= 0.97,
        "invalid_partitions==0": None if "kueue" not in results else figures["invalid_partitions"] == 0,
    }
    figures.update(
        {
            "load": load,
            "trace_hour_s": hour_s,
            "warmup_h": warmup_h,
            "measure_h": measure_h,
            "window_h": window_h,
            "seed": seed,
            **{k: round(v, 2) for k, v in bound.items()},
            "plans": [[p.name, p.guaranteed, p.weight, round(p.demand, 3), p.interruptible] for p in plans],
            "runs": results,
            "wall_s": round(time.perf_counter() - t_start, 1),
        }
    )
    return figures


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 nodes (default 100), a shorter trace")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--load", type=float, default=1.5, help="offered load (fraction of the fleet's GPUs)")
    parser.add_argument("--hour-s", type=float, default=None, help="real seconds per trace hour")
    parser.add_argument("--warmup-h", type=float, default=1.5, help="trace hours before the measurement window")
    parser.add_argument("--measure-h", type=float, default=None, help="trace hours measured")
    parser.add_argument("--window-h", type=float, default=0.5, help="trace hours of each share window")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--keep", action="store_true", help="keep the clusters' folders and logs")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if set(variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(set(variants) - set(VARIANTS))}")
    figures = run(
        nodes=args.nodes or (40 if args.quick else 100),
        load=args.load,
        hour_s=args.hour_s or (30.0 if args.quick else 60.0),
        warmup_h=args.warmup_h,
        measure_h=args.measure_h or (2.0 if args.quick else 6.0),
        window_h=args.window_h,
        seed=args.seed,
        variants=variants,
        keep=args.keep,
    )
    figures["quick"] = args.quick
    emit(figures)
    return figures


if __name__ == "__main__":
    main()
