"""Tenancy controller: Tenancy create -> Ready latency and tenancies per second.

Run: ``python -m benchmarks.tenancy [--quick] [--count N]``. The last line of
stdout is one JSON object (keys ``ready_p50_ms``, ``ready_p99_ms``,
``tenancies_per_s``, ``ready_p99_ms_at_20_per_s``, ``single_ready_p50_ms``,
``single_ready_p99_ms``, ...).

Set-up, as in a deployment: a Kubernetes control plane from the pinned upstream
binaries (:class:`devtools.local_cluster.LocalCluster`: etcd,
kube-apiserver, kube-controller-manager; no scheduler, no pods here) with the
chart's CRDs, Cilium's policy CRD and the RuntimeClass installed; the controller
as its own process (``gpucaas controller --standalone``, Tenancy handlers only);
and this driver, which talks to kube-apiserver over HTTPS. The controller uses
the cluster-admin kubeconfig (not the chart's ServiceAccount and ClusterRole):
RBAC still evaluates each request, and the figures are the controller's and the
API server's, not those of the controller's rights. etcd fsyncs as a real
cluster's does.

* ``ready_*`` / ``tenancies_per_s``: a burst of ``count`` tenancies (200, also
  with --quick) created at once, by ``--creators`` concurrent clients; each
  tenancy's latency runs from the moment its create request is sent (so the API
  server's own queueing in the burst counts) to the moment a watch sees the
  controller's ``Ready`` condition ``True`` on it. Throughput = count / (last
  Ready - first create). ``create_p99_ms`` is the create requests' own latency,
  for scale. Every other tenancy asks for NFS storage (PV + PVC) and internet
  egress.
* ``apiserver_cpu_ms_per_tenancy`` / ``controller_cpu_ms_per_tenancy``: CPU time
  spent during the burst, per tenancy (from /proc), by kube-apiserver and etcd
  together, and by the controller (``controller_manager_cpu_ms_per_tenancy``:
  kube-controller-manager's, whose namespace, quota and garbage-collection
  controllers follow the tenancies' objects): the cost that stays comparable
  when other work shares the machine (``load_average_1m`` says how much did).
* ``ready_*_at_20_per_s``: after the burst has settled, new tenancies offered
  at a fixed 20 per second for 30 s (10 s with --quick: 200 samples) on their
  own schedule (open loop: a slow answer does not hold back the next create),
  create sent -> Ready seen. ``paced_send_lag_p99_ms`` says how late the sends
  left against that schedule.
* ``single_*``: tenancies created one at a time after that, each waited for
  (uncontended latency: watch delivery, one reconcile, status write).

The watch runs in this process, on its own thread, and stamps an event when it
is parsed: the figures include the watch's delivery, never less than the truth.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.kit import processes
from benchmarks.kit.procstat import cpu_ms_per, cpu_seconds_of
from benchmarks.kit.report import emit, percentile
from benchmarks.kit.watch import Watch

if TYPE_CHECKING:
    from devtools.local_cluster import LocalCluster
    from services.tenancy_controller.kube import KubeClient

#: The paced phase's offered rate (tenancies per second).
PACED_RATE = 20


class ReadyWatch:
    """When each Tenancy was first seen, and first seen Ready (its ``Ready`` condition ``True``)."""

    def __init__(self, kubeconfig: Path) -> None:
        from core import crds

        self.ready: dict[str, float] = {}
        self.first_seen: dict[str, float] = {}
        self._watch = Watch(
            kubeconfig, f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.TENANCY_PLURAL}", seen=self._seen, name="tenancies"
        ).start()

    def _seen(self, obj: dict, _deleted: bool) -> None:
        name = obj["metadata"]["name"]
        self.first_seen.setdefault(name, time.perf_counter())
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            self.ready.setdefault(name, time.perf_counter())

    def wait(self, names: list[str], timeout: float) -> None:
        self._watch.wait(lambda: all(n in self.ready for n in names), timeout, f"{len(names)} tenancies Ready")

    def stop(self) -> None:
        self._watch.stop()


def _body(name: str, index: int) -> dict:
    spec: dict = {"gpuQuota": 8, "podQuota": 20}
    if index % 2:
        spec["network"] = {"allowInternet": True}
        spec["nfs"] = {"server": "10.20.0.5", "path": f"/exports/{name}"}
    return {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": name}, "spec": spec}


def _start_cluster(folder: Path) -> LocalCluster:
    """The control plane with what a cluster holds before the chart's templates."""
    from devtools.local_cluster import ClusterOptions, LocalCluster
    from devtools.local_cluster.objects import RUNTIME_CLASS, create_all
    from devtools.sandbox.cluster import cluster_objects

    cluster = LocalCluster(folder, ClusterOptions(run_scheduler=False, audit_policy=None)).start()
    try:
        create_all(cluster.admin_kubeconfig, [*cluster_objects(), RUNTIME_CLASS])
    except BaseException:
        cluster.stop()
        shutil.rmtree(folder / "etcd", ignore_errors=True)  # the logs stay for a look
        raise
    return cluster


def _paced(api: KubeClient, watch: ReadyWatch, seconds: float, creators: int) -> dict:
    """Tenancies offered at :data:`PACED_RATE` per second for ``seconds``, each create sent on
    its own schedule; create sent -> Ready seen."""
    total = round(PACED_RATE * seconds)
    names = [f"paced-{i:04d}" for i in range(total)]
    sent: dict[str, float] = {}
    lag_ms: list[float] = []

    def create(index: int, name: str, due: float) -> None:
        now = time.perf_counter()
        sent[name] = now
        lag_ms.append((now - due) * 1000)
        api.create(_body(name, index))

    with ThreadPoolExecutor(max_workers=creators) as pool:
        start = time.perf_counter() + 0.05
        futures = []
        for i, name in enumerate(names):
            due = start + i / PACED_RATE
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            futures.append(pool.submit(create, i, name, due))
        for f in futures:
            f.result()
    watch.wait(names, timeout=120)
    latencies = [(watch.ready[n] - sent[n]) * 1000 for n in names]
    return {
        "paced_rate_per_s": PACED_RATE,
        "paced_seconds": seconds,
        "paced_count": total,
        "ready_p50_ms_at_20_per_s": round(statistics.median(latencies), 1),
        "ready_p99_ms_at_20_per_s": round(percentile(latencies, 0.99), 1),
        "ready_max_ms_at_20_per_s": round(max(latencies), 1),
        "paced_send_lag_p99_ms": round(percentile(lag_ms, 0.99), 1),
    }


def run(count: int, single: int, workers: int, creators: int, paced_s: float) -> dict:
    from services.tenancy_controller import kube

    tmp = Path(tempfile.mkdtemp(prefix="bench-tenancy-"))
    cluster = _start_cluster(tmp / "cluster")
    kubeconfig = cluster.admin_kubeconfig
    procs: list[subprocess.Popen[bytes]] = []
    try:
        api = kube.KubeClient(kube.connection(kubeconfig, pool_size=max(32, creators)))
        controller = processes.start(
            processes.gpucaas_command(
                "controller",
                "--kubeconfig",
                str(kubeconfig),
                "--standalone",
                "--workers",
                str(workers),
                "--retry-delay-s",
                "0.5",
            ),
            tmp / "controller.log",
            env={"GPUCAAS_CONTROLLER_GPU_LEASES": "false"},
            unset=("KUBECONFIG",),
        )
        procs.append(controller)
        watch = ReadyWatch(kubeconfig)

        # warm-up: the controller is up once a first tenancy becomes Ready
        api.create(_body("warmup", 0))
        watch.wait(["warmup"], timeout=120)

        sent: dict[str, float] = {}
        answered: dict[str, float] = {}

        def create(item: tuple[int, str]) -> None:
            index, name = item
            sent[name] = time.perf_counter()
            api.create(_body(name, index))
            answered[name] = time.perf_counter()

        def cpu() -> tuple[float | None, float | None, float | None]:
            return (
                cpu_seconds_of(cluster.pid("kube-apiserver"), cluster.pid("etcd")),
                cpu_seconds_of(controller.pid),
                cpu_seconds_of(cluster.pid("kube-controller-manager")),
            )

        names = [f"bench-{i:04d}" for i in range(count)]
        cpu_before = cpu()
        with ThreadPoolExecutor(max_workers=creators) as pool:
            t_first = time.perf_counter()
            list(pool.map(create, enumerate(names)))
        t_created = time.perf_counter()
        watch.wait(names, timeout=max(120.0, count * 2.0))
        t_last = max(watch.ready[n] for n in names)
        cpu_after = cpu()
        latencies = [(watch.ready[n] - sent[n]) * 1000 for n in names]
        create_ms = [(answered[n] - sent[n]) * 1000 for n in names]
        watch_lag_ms = [(watch.first_seen[n] - answered[n]) * 1000 for n in names]

        paced = _paced(api, watch, paced_s, creators)

        single_ms = []
        for i in range(single):
            name = f"single-{i}"
            t0 = time.perf_counter()
            api.create(_body(name, i))
            watch.wait([name], timeout=60)
            single_ms.append((watch.ready[name] - t0) * 1000)
        watch.stop()
        api.close()
        return {
            "count": count,
            "creators": creators,
            "workers": workers,
            "ready_p50_ms": round(statistics.median(latencies), 1),
            "ready_p99_ms": round(percentile(latencies, 0.99), 1),
            "ready_max_ms": round(max(latencies), 1),
            "tenancies_per_s": round(count / (t_last - t_first), 1),
            "create_p99_ms": round(percentile(create_ms, 0.99), 1),
            "create_requests_per_s": round(count / (t_created - t_first), 1),
            "watch_lag_p99_ms": round(percentile(watch_lag_ms, 0.99), 1),
            "apiserver_cpu_ms_per_tenancy": cpu_ms_per(cpu_before[0], cpu_after[0], count),
            "controller_cpu_ms_per_tenancy": cpu_ms_per(cpu_before[1], cpu_after[1], count),
            "controller_manager_cpu_ms_per_tenancy": cpu_ms_per(cpu_before[2], cpu_after[2], count),
            **paced,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "single_count": single,
            "single_ready_p50_ms": round(statistics.median(single_ms), 1),
            "single_ready_p99_ms": round(percentile(single_ms, 0.99), 1),
        }
    finally:
        for proc in reversed(procs):
            processes.stop(proc)
        cluster.stop()
        shutil.rmtree(tmp / "cluster" / "etcd", ignore_errors=True)  # the logs stay for a look


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="the burst of 200, 10 s (not 30) at 20/s, then 5 single tenancies (not 20)"
    )
    parser.add_argument("--count", type=int, default=None, help="tenancies in the burst (default 200)")
    parser.add_argument("--workers", type=int, default=16, help="controller reconcile threads")
    parser.add_argument("--creators", type=int, default=20, help="concurrent clients sending the creates")
    args = parser.parse_args(argv)
    count = args.count or 200
    single = 5 if args.quick else 20
    paced_s = 10.0 if args.quick else 30.0
    emit(run(count, single, args.workers, args.creators, paced_s))


if __name__ == "__main__":
    main()
