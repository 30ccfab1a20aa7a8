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
  the fabric service's own ``build_fabric_state_status``. DRA modes: the node's two
  ResourceSlices built by the DRA driver's own ``build_slices`` (no extended resource), and
  the FabricState as well (the fabric service runs in that mode too; the extender reads it).
* This process plays the node side of each pod and the tenants: it creates the pods of a
  seeded trace at their arrival times (the tenant API's own pod, ``services.api.pods.build_pod``,
  1/2/4/8 GPUs), and once kwok reports a pod Running deletes it when its trace duration has
  passed. When a pod is bound, the node's GPUs are what the node would give it: in the
  device-plugin modes ``choose_gpus`` over the node's free GPUs (the device plugin's
  GetPreferredAllocation), in the DRA modes the partition device the scheduler's structured
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
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

import orjson
import urllib3

from benchmarks.loadgen import process_cpu_seconds
from benchmarks.placement import DEFAULT_MIX, Job, workload
from core import crds, dra
from core.backoff import Backoff
from core.kube import Informer, KubeConnection, KubeError, RestKube
from core.topology import (
    GPU_COUNT,
    HGX_H100_PARTITIONS,
    choose_gpus,
    partition_by_id,
    partition_for,
    partitions_for_gpus,
)
from services.dra_driver.slices import PublishedGpu, build_slices, partition_of_device
from services.fabric.publisher import build_fabric_state, build_fabric_state_status
from services.placement.fit import FULL_MASK, gpus_of, mask_of

ROOT = Path(__file__).resolve().parent.parent
MODES: tuple[str, ...] = ("most_allocated", "extender", "dra", "dra_extender")
DRA_MODES = frozenset({"dra", "dra_extender"})
EXTENDER_MODES = frozenset({"extender", "dra_extender"})
TENANCY = "fleet"
NAMESPACE = crds.tenant_namespace(TENANCY)
SIZE_LABEL = "gpucaas.dev/fleet-gpus"
IMAGE = "registry.invalid/fleet/job:1"


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) a process has used so far; None where it is not running."""
    if pid is None:
        return None
    try:
        return process_cpu_seconds(pid)
    except OSError:
        return None


def _cpu_ms_per(before: float | None, after: float | None, count: int) -> float | None:
    return None if before is None or after is None or not count else round((after - before) * 1000 / count, 2)


# --------------------------------------------------------------------------- the trace and the bound


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
    """Poisson arrivals offering ``load`` of the fleet's GPUs, lognormal durations of mean 1 h
    (``benchmarks.placement.workload``: the design's 1/2/4/8-GPU mix)."""
    jobs = workload(nodes=nodes, load=load, horizon_h=warmup_h + measure_h, mix=mix or DEFAULT_MIX, seed=seed)
    return Trace(jobs, warmup_h, measure_h)


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


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
        offered += job.size * _overlap(job.arrival, job.arrival + job.duration, lo, hi)
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
                served += job.size * _overlap(now, now + job.duration, lo, hi)
                heapq.heappush(events, (now + job.duration, 0, j))
            else:
                still.append(j)
        waiting = still
    return {
        "pooled_bound_gpu_hours": served,
        "offered_gpu_hours": offered,
        "fluid_bound_gpu_hours": min(offered, capacity * (hi - lo)),
    }


# --------------------------------------------------------------------------- the API, raw


class Api:
    """kube-apiserver over HTTPS as the cluster admin: JSON in, JSON out, a pool of connections."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext, *, maxsize: int = 16) -> None:
        self.server = server
        self.pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=maxsize,
            block=True,
            ssl_context=ssl_context,
            retries=False,
            timeout=urllib3.Timeout(connect=5, read=60),
        )

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201, 202),
        tries: int = 5,
    ) -> Any:
        data = None if body is None else orjson.dumps(body)
        for attempt in range(tries):
            try:
                resp = self.pool.request(
                    method,
                    self.server + path,
                    body=data,
                    headers={"Content-Type": content_type, "Accept": "application/json"},
                )
            except urllib3.exceptions.HTTPError:
                if attempt == tries - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            if resp.status in ok:
                return orjson.loads(resp.data) if resp.data else None
            if resp.status in (429, 500, 503, 504) and attempt < tries - 1:  # the API server shedding load
                time.sleep(0.2 * (attempt + 1))
                continue
            raise ApiError(resp.status, f"{method} {path}: {resp.status} {resp.data[:300]!r}")
        raise AssertionError("unreachable")


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------- what a node publishes


def node_name(i: int) -> str:
    return f"gpu-{i:05d}"


def pci_of(physical_id: int) -> str:
    return f"0000:{0x18 + 0x10 * (physical_id - 1):02x}:00.0"


def node_object(i: int, *, gpus: bool) -> dict[str, Any]:
    """A Node as a kubelet registers it (kwok manages its status from then on)."""
    capacity = {"cpu": "192", "memory": "2Ti", "pods": "110", "ephemeral-storage": "30Ti"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(GPU_COUNT)  # the device plugin's extended resource
    name = node_name(i)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            },
        },
        "spec": {"podCIDR": f"10.{64 + i // 256}.{i % 256}.0/24"},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def fabric_status(holders: dict[int, str]) -> dict[str, Any]:
    """The fabric service's FabricState status for a board whose active partitions are ``holders``
    (partition id -> holder); every GPU healthy, Fabric Manager reachable."""
    partitions = [
        {
            "id": p.id,
            "gpus": [{"physical_id": g} for g in p.sorted_gpus()],
            "nvlinks": p.nvlinks,
            "active": p.id in holders,
            "supported": True,
            "holder": holders.get(p.id),
        }
        for p in HGX_H100_PARTITIONS
    ]
    gpus = [{"physical_id": g, "pci_bus_id": pci_of(g), "healthy": True} for g in range(1, GPU_COUNT + 1)]
    return build_fabric_state_status(
        partitions=partitions,
        gpus=gpus,
        service_vm={"state": "running", "domain": "fabric-vm"},
        fabric_manager={"reachable": True, "backend": "kwok-fleet"},
    )


def resource_slices(node: str) -> list[dict[str, Any]]:
    """The DRA driver's ResourceSlices for a healthy board (its own ``build_slices``)."""
    return build_slices(node, [PublishedGpu(g, pci_of(g)) for g in range(1, GPU_COUNT + 1)])


# --------------------------------------------------------------------------- one pod


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


# --------------------------------------------------------------------------- one mode


class ModeRun:
    """One mode: a cluster, kwok, optionally the extender, kube-scheduler; the trace; the burst."""

    def __init__(
        self,
        mode: str,
        *,
        nodes: int,
        trace: Trace,
        hour_s: float,
        burst_fraction: float,
        seed: int,
        folder: Path,
        log: Callable[[str], None],
        workers: int = 8,
    ) -> None:
        self.mode = mode
        self.dra = mode in DRA_MODES
        self.nodes = nodes
        self.trace = trace
        self.hour_s = hour_s
        self.burst_fraction = burst_fraction
        self.seed = seed
        self.folder = folder
        self.log = log
        self.workers = workers
        self.lock = threading.RLock()
        self.pods: dict[str, PodRecord] = {}
        self.node_free: dict[str, int] = {node_name(i): FULL_MASK for i in range(nodes)}
        self.node_holders: dict[str, dict[int, str]] = {node_name(i): {} for i in range(nodes)}
        self.publish_due: dict[str, float] = {}  # node -> earliest time its FabricState may be written
        self.timers: list[tuple[float, int, str, str]] = []  # (due, seq, action, pod or node name)
        self.timer_seq = 0
        self.timer_wake = threading.Condition(self.lock)
        self.stop = threading.Event()
        self.live: set[str] = set()  # pods the watch sees
        self.errors: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.cluster: Any = None
        self.api: Api | None = None
        self.watch: Informer | None = None  # the pods, for the figures
        self.pool: ThreadPoolExecutor | None = None
        self.extender_url: str | None = None
        self.t0 = 0.0

    # -- set-up ------------------------------------------------------------------------

    def start(self) -> None:
        from devtools.local_cluster import ClusterOptions, LocalCluster
        from devtools.local_cluster.objects import RUNTIME_CLASS, create_all
        from devtools.sandbox.runner import cluster_objects

        t = time.perf_counter()
        self.cluster = LocalCluster(
            self.folder / "cluster", ClusterOptions(run_scheduler=False, audit_policy=None)
        ).start()
        objects: list[dict[str, Any]] = [
            *cluster_objects(),
            RUNTIME_CLASS,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        ]
        if self.dra:
            objects += [dra.device_class(s) for s in (1, *dra.NVLINK_SIZES)]
            objects += [dra.claim_template(s, NAMESPACE) for s in sorted(DEFAULT_MIX)]
        create_all(self.cluster.admin_kubeconfig, objects)
        self.api = Api(self.cluster.server, self.cluster.admin_ssl_context(), maxsize=self.workers + 4)
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"fleet-{self.mode}")
        stages = self.folder / "kwok-stages.yaml"
        stages.write_text(
            subprocess.run(
                [str(self.cluster.bin_dir / "kwok-stages")], check=True, capture_output=True, text=True
            ).stdout
        )
        self._spawn(
            "kwok",
            [
                str(self.cluster.bin_dir / "kwok"),
                "--kubeconfig",
                str(self.cluster.admin_kubeconfig),
                "--config",
                str(stages),
                "--manage-all-nodes=true",
            ],
        )
        self._register_nodes()
        self._wait(lambda: self._ready_nodes() >= self.nodes, 120, "kwok reports every node Ready")
        self._wait(lambda: self._default_service_account(), 60, "the namespace's default ServiceAccount")
        if self.mode in EXTENDER_MODES:
            self._start_extender()
        self.cluster.start_scheduler(self._scheduler_config())
        self._watch_pods()
        threading.Thread(target=self._timer_loop, name="fleet-timers", daemon=True).start()
        self.log(f"[{self.mode}] {self.nodes} nodes ready, kube-scheduler running ({time.perf_counter() - t:.1f} s)")

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.folder / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2"), **(env or {})},
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def _register_nodes(self) -> None:
        assert self.api is not None and self.pool is not None
        api = self.api

        def one(i: int) -> None:
            name = node_name(i)
            api.call("POST", "/api/v1/nodes", node_object(i, gpus=not self.dra))
            api.call("POST", f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.FABRICSTATE_PLURAL}", build_fabric_state(name))
            self._publish(name)
            if self.dra:
                for s in resource_slices(name):
                    api.call("POST", "/apis/resource.k8s.io/v1/resourceslices", s)

        list(self.pool.map(one, range(self.nodes)))

    def _ready_nodes(self) -> int:
        assert self.api is not None
        items = self.api.call("GET", "/api/v1/nodes")["items"]
        return sum(
            1
            for n in items
            for c in (n.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready" and c.get("status") == "True"
        )

    def _default_service_account(self) -> bool:
        assert self.api is not None
        try:
            self.api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default", tries=1)
        except ApiError:
            return False
        return True

    def _start_extender(self) -> None:
        from devtools.local_cluster.cluster import free_port

        port = free_port()
        self.extender_url = f"http://127.0.0.1:{port}"
        env = {"PYTHONPATH": str(ROOT), "GPUCAAS_PLACEMENT_BIND": "false" if self.dra else "true"}
        env.pop("KUBECONFIG", None)
        self._spawn(
            "scheduler-extender",
            [
                sys.executable,
                "-c",
                "from gpucaas.cli import app; app()",
                "scheduler-extender",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--kubeconfig",
                str(self.cluster.admin_kubeconfig),
                "--log-level",
                "WARNING",
            ],
            env=env,
        )
        self._wait(lambda: self._extender_ready(), 120, "the extender ready (FabricStates, GPULeases, pods listed)")

    def _extender_ready(self) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a helper process exited: {proc.args!r}; see {self.folder}")
        try:
            resp = urllib3.request("GET", f"{self.extender_url}/readyz", timeout=2, retries=False)
        except urllib3.exceptions.HTTPError:
            return False
        return resp.status == 200 and orjson.loads(resp.data).get("nodes") == self.nodes

    def extender_nodes(self) -> dict[str, int]:
        """Free GPU mask per node as the extender sees it now."""
        resp = urllib3.request("GET", f"{self.extender_url}/v1/nodes", timeout=10, retries=False)
        return {n["node"]: mask_of(n["free"]) for n in orjson.loads(resp.data)["nodes"]}

    def _scheduler_config(self) -> dict[str, Any]:
        from devtools.sandbox.runner import scheduler_config

        config = scheduler_config("dra" if self.dra else "device-plugin", self.extender_url or "http://unused")
        if self.mode not in EXTENDER_MODES:
            config.pop("extenders", None)
        return config

    @staticmethod
    def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
        from devtools.waiting import wait_for

        wait_for(predicate, timeout, interval=0.25, what=what)

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            self.timer_wake.notify_all()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        if self.watch is not None:
            self.watch.stop()
            self.watch.kube.close()
        if self.cluster is not None:
            # a throw-away cluster: killed outright (kube-apiserver's graceful stop takes 20 s here)
            for name in reversed(list(self.cluster.components)):
                self.cluster.kill(name)
            shutil.rmtree(self.folder / "cluster" / "etcd", ignore_errors=True)

    # -- the node side -------------------------------------------------------------------

    def _publish(self, node: str) -> None:
        """Write the node's FabricState status as the fabric service would (now)."""
        assert self.api is not None
        with self.lock:
            holders = dict(self.node_holders[node])
        self.api.call(
            "PATCH",
            f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.FABRICSTATE_PLURAL}/{node}/status",
            {"status": fabric_status(holders)},
            content_type="application/merge-patch+json",
        )

    def _schedule_publish(self, node: str, not_before: float) -> None:
        with self.lock:
            due = self.publish_due.get(node)
            if due is not None:  # one write pending: it goes no earlier than asked for now
                if not_before > due:
                    self.publish_due[node] = not_before
                    self._timer(not_before, "publish", node)
                return
            self.publish_due[node] = not_before
            self._timer(not_before, "publish", node)

    def _run_publish(self, node: str) -> None:
        with self.lock:
            due = self.publish_due.get(node)
            if due is None or due > time.time() + 0.001:
                return  # written already, or postponed (its own timer comes later)
            del self.publish_due[node]
        try:
            self._publish(node)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"FabricState {node}: {exc}")

    def _placed(self, rec: PodRecord, node: str, gpus: frozenset[int]) -> None:
        """The node gives ``rec`` these GPUs: check the shape, hold them, show the activation."""
        mask = mask_of(gpus)
        part = partition_for(gpus)
        with self.lock:
            rec.gpus = mask
            rec.valid = rec.size not in dra.NVLINK_SIZES or (part is not None and part.size == rec.size)
            free = self.node_free[node]
            if mask & ~free:
                rec.overlap = True
            self.node_free[node] = free & ~mask
            for p in partitions_for_gpus(gpus):
                self.node_holders[node][p.id] = f"pod:{NAMESPACE}/{rec.name}"
        # the activation shows no earlier than the second after the bind (updatedAt is whole seconds)
        self._schedule_publish(node, math.floor(rec.bound or time.time()) + 1.05)

    def _released(self, rec: PodRecord) -> None:
        """The pod ends: its GPUs are the node's again (before the delete is sent, so that a pod
        the scheduler binds there as soon as it sees the deletion finds them free); the
        FabricState drops its partitions once the delete has been answered (``_delete``)."""
        node = rec.node
        if node is None or not rec.gpus:
            return
        holder = f"pod:{NAMESPACE}/{rec.name}"
        with self.lock:
            if not rec.overlap:  # GPUs it shared with another pod (an error, counted) stay held
                self.node_free[node] |= rec.gpus
            holders = self.node_holders[node]
            for pid in [pid for pid, h in holders.items() if h == holder]:
                del holders[pid]

    def _on_bound(self, rec: PodRecord, node: str) -> None:
        if self.dra:
            assert self.pool is not None
            self.pool.submit(self._claim_gpus, rec, node)
            return
        with self.lock:
            free = gpus_of(self.node_free[node])
        choice = choose_gpus(free, rec.size)  # the device plugin's preferred allocation
        if choice is None:
            self.errors.append(f"{rec.name}: {rec.size} GPUs bound to {node} with {sorted(free)} free")
            return
        self._placed(rec, node, frozenset(choice.gpus))

    def _claim_gpus(self, rec: PodRecord, node: str) -> None:
        """DRA: the GPUs of the partition devices allocated in the pod's ResourceClaim."""
        assert self.api is not None
        for _ in range(50):
            claim_name = rec.claim
            if claim_name:
                claim = self.api.call(
                    "GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{claim_name}"
                )
                results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                    "results"
                ) or []
                if results:
                    gpus: set[int] = set()
                    for r in results:
                        gpus |= partition_by_id(partition_of_device(r["device"])).gpus
                    self._placed(rec, node, frozenset(gpus))
                    return
            time.sleep(0.1)
            with self.lock:
                if rec.ended is not None:
                    return
        self.errors.append(f"{rec.name}: no allocated claim found after its bind")

    # -- the pod watch ---------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """The namespace's pods through the product's informer (a cut watch resumed from the last
        resourceVersion, a 410 listed again); a failed list or watch counts as an error."""
        self.watch = Informer(
            RestKube(KubeConnection(kubeconfig=self.cluster.admin_kubeconfig)),
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            name="fleet pod watch",
            on_list=self._listed,
            on_event=self._on_pod,
            on_error=self._watch_failed,
            backoff=Backoff(initial_s=0.5, max_s=0.5),  # the figures wait on it: come back soon
        ).start()

    def _listed(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self._on_pod("ADDED", pod)
        with self.lock:  # what was deleted while the watch was down
            self.live.intersection_update(pod["metadata"]["name"] for pod in pods)

    def _watch_failed(self, exc: KubeError) -> None:
        self.errors.append(f"pod watch: {exc.summary()}")

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        now = time.time()
        name = pod["metadata"]["name"]
        with self.lock:
            rec = self.pods.get(name)
            if etype == "DELETED":
                self.live.discard(name)
                return
            self.live.add(name)
            if rec is None:
                return
            status = pod.get("status") or {}
            for c in status.get("conditions") or []:
                if (
                    c.get("type") == "PodScheduled"
                    and c.get("status") == "False"
                    and c.get("reason") == "Unschedulable"
                ):
                    rec.unschedulable = True
            for s in status.get("resourceClaimStatuses") or []:
                if s.get("resourceClaimName"):
                    rec.claim = s["resourceClaimName"]
            node: str | None = (pod.get("spec") or {}).get("nodeName")
            newly_bound = node is not None and rec.bound is None
            if node is not None and newly_bound:
                rec.bound, rec.node = now, node
            newly_running = status.get("phase") == "Running" and rec.running is None
            if newly_running:
                rec.running = now
                if rec.phase == "trace":
                    self._timer(now + rec.duration_s, "depart", name)
        if node is not None and newly_bound:
            self._on_bound(rec, node)

    # -- timers: arrivals, departures, FabricState writes ------------------------------------

    def _timer(self, due: float, action: str, name: str) -> None:
        with self.lock:
            self.timer_seq += 1
            heapq.heappush(self.timers, (due, self.timer_seq, action, name))
            self.timer_wake.notify()

    def _timer_loop(self) -> None:
        assert self.pool is not None
        while not self.stop.is_set():
            with self.lock:
                while not self.stop.is_set() and (not self.timers or self.timers[0][0] > time.time()):
                    self.timer_wake.wait(None if not self.timers else max(0.0, self.timers[0][0] - time.time()))
                if self.stop.is_set():
                    return
                _, _, action, name = heapq.heappop(self.timers)
            try:
                if action == "arrive":
                    self.pool.submit(self._create, self.pods[name])
                elif action == "depart":
                    self._depart(self.pods[name])
                elif action == "publish":
                    self.pool.submit(self._run_publish, name)
            except RuntimeError:  # the pool is shut down: the run is over
                return

    def _pod_body(self, rec: PodRecord) -> dict[str, Any]:
        from services.api.pods import build_pod

        pod = build_pod(
            container_id=rec.name,
            tenancy=TENANCY,
            image=IMAGE,
            gpus=rec.size,
            command=["sleep", str(int(rec.duration_s * 3600 / self.hour_s))],
            allocation_mode=dra.DRA_MODE if self.dra else dra.DEVICE_PLUGIN_MODE,
        )
        pod["metadata"]["name"] = rec.name
        pod["metadata"].setdefault("labels", {})[SIZE_LABEL] = str(rec.size)
        return pod

    def _create(self, rec: PodRecord) -> None:
        assert self.api is not None
        body = self._pod_body(rec)
        rec.created = time.time()
        try:
            self.api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"create {rec.name}: {exc}")

    def _depart(self, rec: PodRecord) -> None:
        assert self.pool is not None
        with self.lock:
            if rec.ended is not None:
                return
            rec.ended = time.time()
        self.pool.submit(self._delete, rec)

    def _delete(self, rec: PodRecord) -> None:
        assert self.api is not None
        self._released(rec)
        try:
            self.api.call(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{rec.name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                ok=(200, 202, 404),
            )
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"delete {rec.name}: {exc}")
        if rec.node is not None:
            self._schedule_publish(rec.node, time.time())

    # -- phases ---------------------------------------------------------------------------------

    def run_trace(self) -> float:
        """Offer the trace in compressed time; returns the wall time it started at."""
        for i, job in enumerate(self.trace.jobs):
            rec = PodRecord(f"j{i:06d}-{job.size}g", job.size, job.duration * self.hour_s, job.arrival, "trace")
            self.pods[rec.name] = rec
        self.t0 = time.time() + 1.0
        for rec in list(self.pods.values()):
            self._timer(self.t0 + rec.arrival_h * self.hour_s, "arrive", rec.name)
        end = self.t0 + self.trace.horizon_h * self.hour_s
        last_report = time.time()
        while time.time() < end:
            time.sleep(min(1.0, max(0.0, end - time.time())))
            if time.time() - last_report >= 15:
                last_report = time.time()
                self.log(f"[{self.mode}] t={(time.time() - self.t0) / self.hour_s:.2f} h: {self._census()}")
        with self.lock:  # nothing more arrives or departs: the window is over
            self.timers = [t for t in self.timers if t[2] == "publish"]
            heapq.heapify(self.timers)
        return self.t0

    def _census(self) -> str:
        with self.lock:
            recs = [r for r in self.pods.values() if r.phase == "trace" and r.created]
            running = [r for r in recs if r.bound and r.ended is None]
            pending = [r for r in recs if r.bound is None]
            used = sum(r.size for r in running)
        return (
            f"{len(recs)} created, {len(running)} placed ({used}/{self.nodes * GPU_COUNT} GPUs), "
            f"{len(pending)} pending, {len(self.errors)} errors"
        )

    def clear(self) -> None:
        """Delete every pod; wait until they, their claims and the node side are gone and shown free."""
        assert self.api is not None
        self.api.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods?gracePeriodSeconds=0", ok=(200, 202))
        with self.lock:
            for rec in self.pods.values():
                if rec.ended is None:
                    rec.ended = time.time()
        self._wait(lambda: not self.live, 180, "every pod deleted")
        if self.dra:
            self._wait(
                lambda: (
                    not self.api.call(  # type: ignore[union-attr]
                        "GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
                    )["items"]
                ),
                180,
                "every ResourceClaim deleted",
            )
        with self.lock:
            for node in self.node_free:
                self.node_free[node] = FULL_MASK
                self.node_holders[node] = {}
        list(self.pool.map(self._publish, list(self.node_free)))  # type: ignore[union-attr]
        if self.extender_url:
            self._wait(
                lambda: all(m == FULL_MASK for m in self.extender_nodes().values()),
                120,
                "the extender sees every GPU free",
            )

    def run_burst(self) -> dict[str, Any]:
        """Stop kube-scheduler, create a burst of pods, start it: binds per second."""
        rng = Random(self.seed + 7)
        sizes, weights = list(DEFAULT_MIX), list(DEFAULT_MIX.values())
        budget = int(self.burst_fraction * self.nodes * GPU_COUNT)
        burst: list[PodRecord] = []
        while True:
            size = rng.choices(sizes, weights)[0]
            if size > budget:
                break
            budget -= size
            burst.append(PodRecord(f"b{len(burst):06d}-{size}g", size, 0.0, 0.0, "burst"))
        self.cluster.kill("kube-scheduler", signal.SIGTERM)
        with self.lock:
            for rec in burst:
                self.pods[rec.name] = rec
        list(self.pool.map(self._create, burst))  # type: ignore[union-attr]
        names = {r.name for r in burst}
        self._wait(lambda: names <= self.live, 120, "the burst's pods created")
        if self.dra:  # the claims are made by kube-controller-manager; wait for them too
            self._wait(lambda: all(r.claim for r in burst), 120, "the burst's ResourceClaims made")
        t_start = time.time()
        self.cluster.restart("kube-scheduler")
        cpu_before = _cpu_s(self.cluster.pid("kube-scheduler")), _cpu_s(self._extender_pid())
        deadline = time.time() + max(120.0, 2.0 * len(burst))
        while time.time() < deadline:
            with self.lock:
                if all(r.bound for r in burst):
                    break
                progress = sum(1 for r in burst if r.bound)
            time.sleep(0.5)
            with self.lock:
                if (
                    progress == sum(1 for r in burst if r.bound)
                    and progress
                    and time.time() - max(r.bound or 0 for r in burst) > 15
                ):
                    break  # nothing more is bound: the rest do not fit
        cpu_after = _cpu_s(self.cluster.pid("kube-scheduler")), _cpu_s(self._extender_pid())
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
            "scheduler_cpu_ms_per_pod": _cpu_ms_per(cpu_before[0], cpu_after[0], len(bound)),
            "extender_cpu_ms_per_pod": _cpu_ms_per(cpu_before[1], cpu_after[1], len(bound)),
        }

    def _extender_pid(self) -> int | None:
        return next(
            (
                p.pid
                for p in self.procs
                if isinstance(p.args, list) and "scheduler-extender" in p.args and p.poll() is None
            ),
            None,
        )

    # -- figures -----------------------------------------------------------------------------------

    def figures(self, t0: float) -> dict[str, Any]:
        lo = t0 + self.trace.warmup_h * self.hour_s
        hi = t0 + self.trace.horizon_h * self.hour_s
        served = placed = 0.0
        first_try_ms: list[float] = []
        waits8: list[float] = []
        waits: list[float] = []
        trace = [r for r in self.pods.values() if r.phase == "trace" and r.created]
        for r in trace:
            if r.running is not None:
                end = min(r.running + r.duration_s, r.ended or hi, hi)
                gpu_s = r.size * _overlap(r.running, end, lo, hi)
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
        placements = [r for r in self.pods.values() if r.node and r.gpus]
        to_h = 1.0 / self.hour_s
        return {
            "gpu_hours_served": round(served * to_h, 2),
            "gpu_hours_placed": round(placed * to_h, 2),
            "pods_created": len(trace),
            "pods_placed": sum(1 for r in trace if r.bound),
            "pods_never_placed": sum(1 for r in trace if r.bound is None),
            "pods_marked_unschedulable": sum(1 for r in trace if r.unschedulable),
            "invalid_partitions": sum(1 for r in placements if not r.valid),
            "invalid_partitions_trace": sum(1 for r in placements if not r.valid and r.phase == "trace"),
            "overlapping_placements": sum(1 for r in placements if r.overlap),
            "schedule_p50_ms": round(_percentile(first_try_ms, 0.5), 1),
            "schedule_p99_ms": round(_percentile(first_try_ms, 0.99), 1),
            "wait_p99_s": round(_percentile(waits, 0.99), 2),
            "eight_gpu_wait_p50_s": round(_percentile(waits8, 0.5), 2),
            "eight_gpu_wait_p99_s": round(_percentile(waits8, 0.99), 2),
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
        }


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
    run = ModeRun(
        mode, nodes=nodes, trace=trace, hour_s=hour_s, burst_fraction=burst_fraction, seed=seed, folder=folder, log=log
    )
    t_mode = time.perf_counter()
    try:
        run.start()
        t0 = run.run_trace()
        out = run.figures(t0)
        load = os.getloadavg()[0]
        run.clear()
        out.update(run.run_burst())
        out["invalid_partitions"] = sum(1 for r in run.pods.values() if r.node and r.gpus and not r.valid)
        out["overlapping_placements"] = sum(1 for r in run.pods.values() if r.overlap)
        out["errors"] = len(run.errors)
        out["first_errors"] = run.errors[:5]
        out["load_average_1m_at_trace_end"] = round(load, 2)
        out["wall_s"] = round(time.perf_counter() - t_mode, 1)
        log(
            f"[{mode}] served {out['gpu_hours_served']} GPU-h, invalid {out['invalid_partitions']}, "
            f"never placed {out['pods_never_placed']}, {out['scheduled_per_s']} binds/s in the burst, "
            f"{out['errors']} errors ({out['wall_s']} s)"
        )
        return out
    finally:
        t_close = time.perf_counter()
        run.close()
        log(f"[{mode}] stopped ({time.perf_counter() - t_close:.1f} s)")


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
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    results: dict[str, dict[str, Any]] = {}
    t_start = time.perf_counter()
    try:
        for mode in modes:
            results[mode] = run_mode(
                mode,
                nodes=nodes,
                trace=trace,
                hour_s=hour_s,
                burst_fraction=burst_fraction,
                seed=seed,
                folder=tmp / mode,
                log=log,
            )
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)

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
        "scheduled_per_s_extender>=0.5x_most_allocated": (
            None
            if ext is None or "most_allocated" not in results
            else ext["scheduled_per_s"] >= 0.5 * results["most_allocated"]["scheduled_per_s"]
        ),
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
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
