"""Time to Running: POST /v1/containers -> the pod Running, on the real sandbox.

Run: ``python -m benchmarks.time_to_running [--quick] [--containers N] [--tenancies T]``.
The last line of stdout is one JSON object:

* ``running_p50_ms`` / ``running_p99_ms``: the control plane's part of POST -> Running:
  from just before the POST to the watch event that shows the pod Running (or already
  finished), less the time the pod waited because no node had the GPUs free (from the
  scheduler's first ``PodScheduled=False, Unschedulable`` mark to the bind). Nothing boots
  here: the sandbox's node agent marks the pod Running once the device plugin's Allocate
  (NVLink partition activated through the fabric service) has answered.
* ``queued_running_p50_ms`` / ``queued_running_p99_ms``: POST -> Running as a tenant sees
  it, waits for free GPUs included (a burst of ``containers`` on 16 GPUs queues).
* ``started_per_s``: containers / (last Running - first POST).
* ``post_to_pod_p50_ms`` / ``..._p99_ms``: the API's part (POST -> the pod created);
  ``bound_to_running_p50_ms`` / ``..._p99_ms``: the node's part (bind -> Running).
* ``containers``, ``tenancies``, ``gpus``, ``quick``.

Set-up: ``gpucaas sandbox`` (the real control plane with kube-scheduler calling the
scheduler extender, the API, the controller, two simulated HGX H100 nodes with their fabric service, node agent and
device plugin, every part as its own process over its real protocol); ``tenancies``
tenancies are created through the admin API; one thread per tenancy then submits its
share of ``containers`` (sizes 1, 2, 4, 8 GPUs in turn) back to back through the API,
each ``sleep 1`` so GPUs free up. Pods are observed through one watch on the Kubernetes
API (kube-apiserver), which gives millisecond times without polling the API under test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIZES = (1, 2, 4, 8)
IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"
STALL_S = 180.0  # give up when no pod reached Running for this long (a stall, not slowness)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


@dataclass
class Seen:
    """What the watch saw of one container's pod (monotonic seconds)."""

    created: float | None = None
    unschedulable: float | None = None
    bound: float | None = None
    running: float | None = None
    finished: float | None = None


class PodWatch:
    """One watch on the pods gpucaas creates, recording when each reached each step."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.seen: dict[str, Seen] = {}
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-watch")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from kubernetes import watch

        from gpucaas.core.crds import LABEL_CONTAINER

        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    listing = self.core.list_pod_for_all_namespaces(label_selector=LABEL_CONTAINER)
                    for pod in listing.items:
                        self._note(pod)
                    rv = listing.metadata.resource_version
                w = watch.Watch()
                for ev in w.stream(self.core.list_pod_for_all_namespaces, label_selector=LABEL_CONTAINER,
                                   resource_version=rv, timeout_seconds=60):
                    rv = ev["object"].metadata.resource_version
                    self._note(ev["object"])
                    if self._stop.is_set():
                        w.stop()
            except Exception as exc:  # noqa: BLE001 (relist on any watch failure)
                print(f"pod watch: {exc}; relisting", file=sys.stderr)
                rv = None

    def _note(self, pod: Any) -> None:
        from gpucaas.core.crds import LABEL_CONTAINER

        now = time.monotonic()
        cid = (pod.metadata.labels or {}).get(LABEL_CONTAINER)
        if not cid:
            return
        with self.cond:
            s = self.seen.setdefault(cid, Seen(created=now))
            phase = pod.status.phase if pod.status else None
            conds = (pod.status.conditions or []) if pod.status else []
            if s.unschedulable is None and not pod.spec.node_name and any(
                    c.type == "PodScheduled" and c.status == "False" for c in conds):
                s.unschedulable = now
            if s.bound is None and pod.spec.node_name:
                s.bound = now
            if s.running is None and phase in ("Running", "Succeeded", "Failed"):
                s.running = now
            if s.finished is None and phase in ("Succeeded", "Failed"):
                s.finished = now
            self.cond.notify_all()

    def wait_all(self, ids: list[str], attr: str) -> None:
        """Until every id has ``attr``; raises if none progressed for STALL_S."""
        with self.cond:
            last, done = time.monotonic(), 0
            while True:
                now_done = sum(getattr(self.seen.get(i), attr, None) is not None for i in ids)
                if now_done == len(ids):
                    return
                if now_done > done:
                    last, done = time.monotonic(), now_done
                if time.monotonic() - last > STALL_S:
                    raise RuntimeError(f"{done}/{len(ids)} containers reached {attr}; none more for {STALL_S:.0f}s")
                self.cond.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self.api.close()


def wait_ready(sb: Any, names: list[str]) -> None:
    """Until every Tenancy custom resource reports ``phase: Ready`` (its namespace, quota, policies)."""
    from kubernetes import client, config

    from gpucaas.core.crds import GROUP, TENANCY_PLURAL, VERSION

    with config.new_client_from_config(str(sb.kubeconfig)) as api:
        objects = client.CustomObjectsApi(api)
        deadline = time.monotonic() + STALL_S
        while True:
            items = objects.list_cluster_custom_object(GROUP, VERSION, TENANCY_PLURAL)["items"]
            ready = {o["metadata"]["name"] for o in items if (o.get("status") or {}).get("phase") == "Ready"}
            if ready >= set(names):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"tenancies not Ready: {sorted(set(names) - ready)}")
            time.sleep(0.5)


def submit_all(sb: Any, tokens: list[str], count: int) -> tuple[dict[str, float], dict[str, int]]:
    """One thread per tenancy submits its share back to back; returns id -> POST time, id -> GPUs."""
    posted: dict[str, float] = {}
    sizes: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def tenant(t: int, token: str) -> None:
        for k, _ in enumerate(range(t, count, len(tokens))):
            gpus = SIZES[(t + k) % len(SIZES)]  # every tenancy submits every size
            body = {"image": IMAGE, "gpus": gpus, "command": ["sleep", "1"]}
            t0 = time.monotonic()
            while True:
                try:
                    cid = sb.api("POST", "/v1/containers", body, token=token)["id"]
                    break
                except urllib.error.HTTPError as exc:
                    if exc.code != 429:  # a rate limit says when to come back; anything else is an error
                        with lock:
                            errors.append(f"POST /v1/containers: {exc.code} {exc.read()[:200]!r}")
                        return
                    time.sleep(float(exc.headers.get("Retry-After") or 1))
            with lock:
                posted[cid], sizes[cid] = t0, gpus

    threads = [threading.Thread(target=tenant, args=(t, tok)) for t, tok in enumerate(tokens)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"{len(errors)} submissions failed, first: {errors[0]}")
    return posted, sizes


def run(count: int, tenancies: int, quick: bool) -> dict[str, Any]:
    from gpucaas.programs.sandbox import runner

    with tempfile.TemporaryDirectory(prefix="gpucaas-ttr-", dir="/tmp") as tmp:
        sb = runner.start(Path(tmp), api_port=runner.free_port())
        watcher = PodWatch(sb.kubeconfig)
        try:
            tokens = []
            # Quotas above what a tenancy submits: the figure is placement, not quota refusals.
            pod_quota = max(20, -(-count // tenancies))
            for t in range(tenancies):
                name = f"ttr-{t:02d}"
                sb.api("POST", "/v1/admin/tenancies", {"name": name, "gpu_quota": 8 * pod_quota, "pod_quota": pod_quota})
                tokens.append(sb.api("POST", f"/v1/admin/tenancies/{name}/tokens", {})["token"])
            # Tenancy namespaces are made by the controller: a container submitted before its
            # tenancy is Ready would wait for that too, which is not what this measures.
            wait_ready(sb, [f"ttr-{t:02d}" for t in range(tenancies)])
            watcher.start()
            posted, sizes = submit_all(sb, tokens, count)
            ids = list(posted)
            watcher.wait_all(ids, "running")
            watcher.wait_all(ids, "finished")
            seen = {i: watcher.seen[i] for i in ids}
        finally:
            watcher.stop()
            sb.stop()
    queued = [(seen[i].running - posted[i]) * 1000 for i in ids]  # type: ignore[operator]
    waited = [((seen[i].bound - seen[i].unschedulable) * 1000  # type: ignore[operator]
               if seen[i].unschedulable is not None and seen[i].bound is not None else 0.0) for i in ids]
    control = [max(0.0, q - w) for q, w in zip(queued, waited, strict=True)]
    to_pod = [(seen[i].created - posted[i]) * 1000 for i in ids]  # type: ignore[operator]
    node_part = [(seen[i].running - seen[i].bound) * 1000 for i in ids if seen[i].bound is not None]  # type: ignore[operator]
    span = max(s.running for s in seen.values()) - min(posted.values())  # type: ignore[type-var]
    return {
        "running_p50_ms": round(percentile(control, 50), 1),
        "running_p99_ms": round(percentile(control, 99), 1),
        "queued_running_p50_ms": round(percentile(queued, 50), 1),
        "queued_running_p99_ms": round(percentile(queued, 99), 1),
        "post_to_pod_p50_ms": round(percentile(to_pod, 50), 1),
        "post_to_pod_p99_ms": round(percentile(to_pod, 99), 1),
        "bound_to_running_p50_ms": round(percentile(node_part, 50), 1),
        "bound_to_running_p99_ms": round(percentile(node_part, 99), 1),
        "waited_for_gpus": sum(w > 0 for w in waited),
        "started_per_s": round(len(ids) / span, 2),
        "containers": len(ids),
        "tenancies": tenancies,
        "gpus": sum(sizes.values()),
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 containers instead of 200")
    parser.add_argument("--containers", type=int, default=None)
    parser.add_argument("--tenancies", type=int, default=20)
    args = parser.parse_args(argv)
    count = args.containers or (40 if args.quick else 200)
    result = run(count, args.tenancies, args.quick)
    print(f"POST -> Running, control plane: p50 {result['running_p50_ms']} ms, p99 {result['running_p99_ms']} ms; "
          f"with GPU waits: p99 {result['queued_running_p99_ms']} ms; {result['started_per_s']} started/s",
          file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
