"""Tenancy controller: Tenancy create -> Ready latency and tenancies per second.

Run: ``python -m benchmarks.tenancy [--quick] [--count N]``. The last line of
stdout is one JSON object (keys ``ready_p50_ms``, ``ready_p99_ms``,
``tenancies_per_s``, ``single_ready_p50_ms``, ``single_ready_p99_ms``, ...).

Set-up, three processes as in a deployment: the Kubernetes API emulator
(``gpucaas kube-emulator``), the controller (``gpucaas controller --standalone``,
Tenancy handlers only) and this driver, which talks to the emulator over HTTP
through the official client.

* ``ready_*`` / ``tenancies_per_s`` (the issue's figure): a burst of ``count``
  tenancies (200, also with --quick) created at once, by ``--creators``
  concurrent clients; each tenancy's latency runs from the moment its create
  request is sent (so the API server's own queueing in the burst counts) to the
  moment a watch sees the controller's ``Ready`` condition ``True`` on it.
  Throughput = count / (last Ready - first create). ``create_p99_ms`` is the
  create requests' own latency, for scale. Every other tenancy asks for NFS
  storage (PV + PVC) and internet egress.
* ``emulator_cpu_ms_per_tenancy`` / ``controller_cpu_ms_per_tenancy``: CPU time
  the two processes spent during the burst, per tenancy (from /proc): the cost
  that stays comparable when other work shares the machine
  (``load_average_1m`` says how much did).
* ``single_*``: tenancies created one at a time after the burst, each waited
  for (uncontended latency: watch delivery, one reconcile, status write).

The watch runs in this process, on its own thread, and stamps an event when it
is parsed: the figures include the watch's delivery, never less than the truth.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "tests" / "tenancy_controller" / "manifests"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "from gpucaas.programs.cli import app; app()", *args],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def _cpu_s(proc: subprocess.Popen[bytes]) -> float | None:
    """CPU seconds (user + system) ``proc`` has used so far; None where /proc is absent."""
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_ms_per(before: float | None, after: float | None, count: int) -> float | None:
    return None if before is None or after is None else round((after - before) * 1000 / count, 2)


def _wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or path.stat().st_size == 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear (process exit {proc.poll()})")
        time.sleep(0.05)


class ReadyWatch:
    """Records when each Tenancy is first seen Ready, from a watch stream."""

    def __init__(self, api_client: object) -> None:
        import kubernetes

        self.ready: dict[str, float] = {}
        self.first_seen: dict[str, float] = {}
        self._cond = threading.Condition()
        self._api = kubernetes.client.CustomObjectsApi(api_client)
        self._watch = kubernetes.watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from gpucaas.core import crds

        try:
            for event in self._watch.stream(self._api.list_cluster_custom_object, crds.GROUP, crds.VERSION,
                                            crds.TENANCY_PLURAL, timeout_seconds=3600):
                self._seen(event["object"])
        except Exception:  # noqa: BLE001 - the emulator going away at the end ends the stream
            return

    def _seen(self, obj: dict) -> None:
        self.first_seen.setdefault(obj["metadata"]["name"], time.perf_counter())
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            name = obj["metadata"]["name"]
            with self._cond:
                self.ready.setdefault(name, time.perf_counter())
                self._cond.notify_all()

    def wait(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(n in self.ready for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in names if n not in self.ready]
                    raise TimeoutError(f"{len(missing)} tenancies not Ready, e.g. {missing[:3]}")
                self._cond.wait(left)

    def stop(self) -> None:
        self._watch.stop()


def _body(name: str, index: int) -> dict:
    spec: dict = {"gpuQuota": 8, "podQuota": 20}
    if index % 2:
        spec["network"] = {"allowInternet": True}
        spec["nfs"] = {"server": "10.20.0.5", "path": f"/exports/{name}"}
    return {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": name}, "spec": spec}


def run(count: int, single: int, workers: int, creators: int) -> dict:
    from kubernetes import config

    from services.tenancy_controller import kube

    tmp = Path(tempfile.mkdtemp(prefix="bench-tenancy-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "GPUCAAS_CONTROLLER_HANDLER_MODULES": json.dumps(["services.tenancy_controller.handlers"])}
    env.pop("KUBECONFIG", None)
    kubeconfig = tmp / "kubeconfig"
    emulator = _spawn(["kube-emulator", "--port", "0", "--kubeconfig", str(kubeconfig)], tmp / "emulator.log", env)
    procs = [emulator]
    try:
        _wait_file(kubeconfig, emulator)
        time.sleep(0.2)
        api = kube.KubeClient(kube.connection(kubeconfig, pool_size=max(32, creators)))
        for name in ("ciliumnetworkpolicies.cilium.io.yaml", "clusterkopfpeerings.kopf.dev.yaml"):
            api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                        body=yaml.safe_load((MANIFESTS / name).read_text()))
        controller = _spawn(["controller", "--kubeconfig", str(kubeconfig), "--standalone",
                             "--workers", str(workers), "--retry-delay-s", "0.5"], tmp / "controller.log", env)
        procs.append(controller)
        watch = ReadyWatch(config.new_client_from_config(config_file=str(kubeconfig)))

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

        names = [f"bench-{i:04d}" for i in range(count)]
        cpu_before = (_cpu_s(emulator), _cpu_s(controller))
        with ThreadPoolExecutor(max_workers=creators) as pool:
            t_first = time.perf_counter()
            list(pool.map(create, enumerate(names)))
        t_created = time.perf_counter()
        watch.wait(names, timeout=max(120.0, count * 2.0))
        t_last = max(watch.ready[n] for n in names)
        cpu_after = (_cpu_s(emulator), _cpu_s(controller))
        latencies = [(watch.ready[n] - sent[n]) * 1000 for n in names]
        create_ms = [(answered[n] - sent[n]) * 1000 for n in names]
        watch_lag_ms = [(watch.first_seen[n] - answered[n]) * 1000 for n in names]

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
            "ready_p99_ms": round(_percentile(latencies, 0.99), 1),
            "ready_max_ms": round(max(latencies), 1),
            "tenancies_per_s": round(count / (t_last - t_first), 1),
            "create_p99_ms": round(_percentile(create_ms, 0.99), 1),
            "create_requests_per_s": round(count / (t_created - t_first), 1),
            "watch_lag_p99_ms": round(_percentile(watch_lag_ms, 0.99), 1),
            "emulator_cpu_ms_per_tenancy": _cpu_ms_per(cpu_before[0], cpu_after[0], count),
            "controller_cpu_ms_per_tenancy": _cpu_ms_per(cpu_before[1], cpu_after[1], count),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "single_count": single,
            "single_ready_p50_ms": round(statistics.median(single_ms), 1),
            "single_ready_p99_ms": round(_percentile(single_ms, 0.99), 1),
        }
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the burst of 200, then 5 single tenancies (not 20)")
    parser.add_argument("--count", type=int, default=None, help="tenancies in the burst (default 200)")
    parser.add_argument("--workers", type=int, default=16, help="controller reconcile threads")
    parser.add_argument("--creators", type=int, default=20, help="concurrent clients creating the burst")
    args = parser.parse_args(argv)
    count = args.count or 200
    single = 5 if args.quick else 20
    print(json.dumps(run(count, single, args.workers, args.creators)))


if __name__ == "__main__":
    main()
