"""Tenancy controller: Tenancy create -> Ready latency and tenancies per second.

Run: ``python -m benchmarks.tenancy [--quick] [--count N]``. The last line of
stdout is one JSON object (keys ``ready_p50_ms``, ``ready_p99_ms``,
``tenancies_per_s``, ``single_ready_p50_ms``, ``single_ready_p99_ms``, ...).

Set-up, three processes as in a deployment: the Kubernetes API emulator
(``gpucaas kube-emulator``), the controller (``gpucaas controller --standalone``,
Tenancy handlers only) and this driver, which talks to the emulator over HTTP
through the official client.

* ``single_*``: tenancies created one at a time, each waited for (uncontended
  latency: watch delivery, one reconcile of 8-10 API requests, status write).
* ``ready_*`` / ``tenancies_per_s``: ``count`` tenancies (200; 40 with --quick)
  created back to back; latency from each create request to the watch event
  showing ``phase: Ready``; throughput = count / (last Ready - first create).
  Every other tenancy asks for NFS storage (PV + PVC) and internet egress.
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
        if (obj.get("status") or {}).get("phase") == "Ready":
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


def run(count: int, single: int, workers: int) -> dict:
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
        api = kube.KubeClient(kube.load_configuration(kubeconfig))
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

        single_ms = []
        for i in range(single):
            name = f"single-{i}"
            t0 = time.perf_counter()
            api.create(_body(name, i))
            watch.wait([name], timeout=60)
            single_ms.append((watch.ready[name] - t0) * 1000)

        created: dict[str, float] = {}
        names = [f"bench-{i:04d}" for i in range(count)]
        t_first = time.perf_counter()
        for i, name in enumerate(names):
            created[name] = time.perf_counter()
            api.create(_body(name, i))
        t_created = time.perf_counter()
        watch.wait(names, timeout=max(120.0, count * 2.0))
        t_last = max(watch.ready[n] for n in names)
        latencies = [(watch.ready[n] - created[n]) * 1000 for n in names]
        watch.stop()
        api.close()
        return {
            "count": count,
            "workers": workers,
            "ready_p50_ms": round(statistics.median(latencies), 1),
            "ready_p99_ms": round(_percentile(latencies, 0.99), 1),
            "ready_max_ms": round(max(latencies), 1),
            "tenancies_per_s": round(count / (t_last - t_first), 1),
            "create_requests_per_s": round(count / (t_created - t_first), 1),
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
    parser.add_argument("--quick", action="store_true", help="40 tenancies, 5 single (CI smoke)")
    parser.add_argument("--count", type=int, default=None, help="tenancies in the burst (default 200)")
    parser.add_argument("--workers", type=int, default=16, help="controller reconcile threads")
    args = parser.parse_args(argv)
    count = args.count or (40 if args.quick else 200)
    single = 5 if args.quick else 20
    print(json.dumps(run(count, single, args.workers)))


if __name__ == "__main__":
    main()
