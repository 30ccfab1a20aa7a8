"""One mode's control plane: a fresh cluster (:class:`~devtools.local_cluster.LocalCluster`:
etcd, kube-apiserver, kube-controller-manager, later kube-scheduler, all the pinned upstream
binaries), kwok managing every Node, the gpucaas extender where the mode has it, and
kube-scheduler with the mode's configuration; the API server reached as the cluster admin
through ``core.kube``, and the run's worker threads."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import urllib3

from benchmarks.kit import processes
from benchmarks.kit.workload import DEFAULT_MIX
from benchmarks.kwok_fleet.node_objects import NAMESPACE
from core import dra
from services.placement.fit import mask_of

MODES: tuple[str, ...] = ("most_allocated", "extender", "dra", "dra_extender")
DRA_MODES = frozenset({"dra", "dra_extender"})
EXTENDER_MODES = frozenset({"extender", "dra_extender"})


#: kube-controller-manager's API client rate (upstream's default is 20 queries a second, burst
#: 30). Its resourceclaim controller makes each DRA pod's ResourceClaim from its template and
#: records it in the pod's status, and takes the pod's reservation off the claim when it ends: at
#: the default rate a compressed trace's DRA pods queued for their claims (client-side throttling,
#: seconds per request) while kube-scheduler idled. The compressed trace asks 3600 / hour_s
#: times faster than a real fleet, so the limit is raised alike, in every mode
#: (``benchmarks.fairness`` raises Kueue's the same way); docs/dra.md says what a cluster sets.
CONTROLLER_MANAGER_QPS, CONTROLLER_MANAGER_BURST = 500, 1000


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    from devtools.waiting import wait_for

    wait_for(predicate, timeout, interval=0.25, what=what)


class ControlPlane:
    """The cluster of one mode, started in two steps: :meth:`start` (the cluster, its objects,
    kwok: nodes may then be registered) and :meth:`start_scheduling` (once they are Ready: the
    extender, kube-scheduler)."""

    def __init__(self, mode: str, *, nodes: int, folder: Path, workers: int = 8, partition_check: bool = False) -> None:
        self.mode = mode
        #: the extender answers Kueue's partition AdmissionCheck (as the chart runs it with Kueue)
        self.partition_check = partition_check
        self.dra = mode in DRA_MODES
        self.nodes = nodes
        self.folder = folder
        self.workers = workers
        self.procs: list[subprocess.Popen[bytes]] = []
        self.cluster: Any = None
        self.kube: Any = None
        self.pool: ThreadPoolExecutor | None = None
        self.extender_url: str | None = None

    def start(self) -> None:
        from core.kube import Kube, KubeConnection, RetryPolicy
        from devtools.local_cluster import ClusterOptions, LocalCluster
        from devtools.local_cluster.objects import RUNTIME_CLASS, create_all
        from devtools.sandbox.cluster import cluster_objects

        self.folder.mkdir(parents=True, exist_ok=True)
        options = ClusterOptions(
            run_scheduler=False,
            audit_policy=None,
            controller_manager_args=[
                f"--kube-api-qps={CONTROLLER_MANAGER_QPS}",
                f"--kube-api-burst={CONTROLLER_MANAGER_BURST}",
            ],
        )
        self.cluster = LocalCluster(self.folder / "cluster", options).start()
        objects: list[dict[str, Any]] = [
            *cluster_objects(),
            RUNTIME_CLASS,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        ]
        if self.dra:
            objects.append(dra.device_class())
            objects += [dra.claim_template(s, NAMESPACE) for s in sorted(DEFAULT_MIX)]
        create_all(self.cluster.admin_kubeconfig, objects)
        # retried when the API server sheds load (429, 5xx) or a connection breaks, creates too:
        # a create retried after it went through meets 409 and is counted as an error
        self.kube = Kube(
            KubeConnection(kubeconfig=self.cluster.admin_kubeconfig, read_timeout_s=60, pool_size=self.workers + 4),
            retry=RetryPolicy(attempts=5, initial_s=0.2, max_s=1.0),
        )
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

    def start_scheduling(self) -> None:
        """Once kwok reports every node Ready: the extender (its modes), then kube-scheduler."""
        wait(lambda: self._ready_nodes() >= self.nodes, 120, "kwok reports every node Ready")
        wait(self._default_service_account, 60, "the namespace's default ServiceAccount")
        if self.mode in EXTENDER_MODES:
            self._start_extender()
        self.cluster.start_scheduler(self._scheduler_config())

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """A helper process, its output in ``<folder>/<name>.log``; Go programs get two OS threads."""
        go = {"GOMAXPROCS": os.environ.get("GOMAXPROCS", "2")}
        log = self.folder / f"{name}.log"
        proc = processes.start(args, log, env={**go, **(env or {})}, unset=("KUBECONFIG",), new_session=True)
        self.procs.append(proc)

    def _ready_nodes(self) -> int:
        items = self.kube.request("GET", "/api/v1/nodes")["items"]
        return sum(
            1
            for n in items
            for c in (n.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready" and c.get("status") == "True"
        )

    def _default_service_account(self) -> bool:
        from core.kube import NotFound

        try:
            self.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
        except NotFound:
            return False
        return True

    def _start_extender(self) -> None:
        from devtools.ports import free_port
        from devtools.sandbox.product import extender_args

        port = free_port()
        self.extender_url = f"http://127.0.0.1:{port}"
        if self.partition_check:  # the namespace of the Lease whose holder answers the check
            from core.kube import Conflict

            try:
                self.kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "gpucaas-system"}})
            except Conflict:
                pass
        self._spawn(
            "scheduler-extender",
            processes.gpucaas_command(
                *extender_args(port, self.cluster.admin_kubeconfig),
                "--log-level",
                "WARNING",
            ),
            env={
                "GPUCAAS_PLACEMENT_BIND": "false" if self.dra else "true",
                "GPUCAAS_PLACEMENT_PARTITION_CHECK": "true" if self.partition_check else "false",
            },
        )
        wait(self._extender_ready, 120, "the extender ready (FabricStates, GPULeases, pods listed)")

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

    def extender_pid(self) -> int | None:
        return next(
            (
                p.pid
                for p in self.procs
                if isinstance(p.args, list) and "scheduler-extender" in p.args and p.poll() is None
            ),
            None,
        )

    def _scheduler_config(self) -> dict[str, Any]:
        from devtools.sandbox.product import scheduler_config

        config = scheduler_config("dra" if self.dra else "device-plugin", self.extender_url or "http://unused")
        if self.mode not in EXTENDER_MODES:
            config.pop("extenders", None)
        return config

    def close(self) -> None:
        """The worker threads, the helper processes, then the cluster (killed outright: it is
        thrown away, and kube-apiserver's graceful stop takes 20 s here)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        for proc in reversed(self.procs):
            processes.stop(proc, 5)
        if self.kube is not None:
            self.kube.close()
        if self.cluster is not None:
            for name in reversed(list(self.cluster.children)):
                self.cluster.kill(name)
            shutil.rmtree(self.folder / "cluster" / "etcd", ignore_errors=True)
