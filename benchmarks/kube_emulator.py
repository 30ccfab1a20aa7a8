"""Kubernetes API emulator benchmark: request latency and watch delivery through the official client.

Run: ``python -m benchmarks.kube_emulator [--quick]``. The last line of stdout is one JSON
object: ``create_per_s``, ``get_p50_ms``, ``patch_status_p50_ms``, ``list_selector_ms`` (a labelled
list of all pods picking one in ten), ``watch_delivery_p50_ms`` / ``_p99_ms`` (from a write's
response to its event arriving on an open watch) and ``objects``.

Method: the emulator runs in this process (its own thread and event loop, as in the tests)
on 127.0.0.1; the official ``kubernetes`` client drives it sequentially, one keep-alive
connection. The client shares the CPUs with the server, so the figures are a floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path


def _ms(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer objects (CI smoke run)")
    args = parser.parse_args()
    n = 100 if args.quick else 500

    from kubernetes import client, config, watch

    from gpucaas.devtools.kube_emulator import KubeEmulator

    with KubeEmulator(install_project_crds=True) as emu, tempfile.TemporaryDirectory() as tmp:
        api = config.new_client_from_config(config_file=str(emu.write_kubeconfig(Path(tmp) / "kc")))
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "bench"}})

        t0 = time.perf_counter()
        for i in range(n):
            core.create_namespaced_pod("bench", {
                "metadata": {"name": f"p{i}", "labels": {"slot": str(i % 10)}},
                "spec": {"containers": [{"name": "main", "image": "cuda"}]}})
        create_per_s = n / (time.perf_counter() - t0)

        gets = []
        for i in range(n):
            t = time.perf_counter()
            core.read_namespaced_pod(f"p{i}", "bench")
            gets.append(time.perf_counter() - t)

        t = time.perf_counter()
        picked = core.list_namespaced_pod("bench", label_selector="slot=3")
        list_ms = (time.perf_counter() - t) * 1000
        assert len(picked.items) == n // 10

        rv = core.list_namespaced_pod("bench", limit=1).metadata.resource_version
        arrivals: dict[str, float] = {}
        ready = threading.Event()
        w = watch.Watch()

        def consume() -> None:
            ready.set()
            for ev in w.stream(core.list_namespaced_pod, "bench", resource_version=rv, timeout_seconds=120):
                arrivals[ev["object"].metadata.resource_version] = time.perf_counter()
                if len(arrivals) >= n:
                    break

        watcher = threading.Thread(target=consume, daemon=True)
        watcher.start()
        ready.wait()
        time.sleep(0.2)
        patches, sent = [], {}
        for i in range(n):
            t = time.perf_counter()
            out = core.patch_namespaced_pod_status(f"p{i}", "bench", {"status": {"phase": "Running"}})
            done = time.perf_counter()
            patches.append(done - t)
            sent[out.metadata.resource_version] = done
        watcher.join(120)
        w.stop()
        delivery = [max(0.0, arrivals[k] - v) for k, v in sent.items() if k in arrivals]
        api.close()

    print(json.dumps({
        "objects": n,
        "create_per_s": round(create_per_s, 1),
        "get_p50_ms": _ms(gets, 0.5),
        "patch_status_p50_ms": _ms(patches, 0.5),
        "list_selector_ms": round(list_ms, 3),
        "watch_delivery_p50_ms": _ms(delivery, 0.5) if delivery else None,
        "watch_delivery_p99_ms": _ms(delivery, 0.99) if delivery else None,
        "watch_events_received": len(delivery),
        "get_mean_ms": round(statistics.mean(gets) * 1000, 3),
    }))


if __name__ == "__main__":
    main()
