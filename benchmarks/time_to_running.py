"""Time to Running on real nodes: POST /v1/containers -> the API reports the container Running.

Run: ``python -m benchmarks.time_to_running [--quick] [--containers N] [--tenancies T]``.

Set-up: ``gpucaas sandbox`` with its two real nodes (``runner.start()``: the
upstream control plane, kube-scheduler calling the scheduler extender, the API, the
controller, and per node containerd + runc + the pinned kubelet with the device plugin and the
fabric service, 8 simulated H100s each). ``tenancies`` tenancies are created through the
admin API, each with a webhook to a receiver in this process. The image is cached first: one
8-GPU ``busybox:1.36`` container per node (each takes a whole board, so the two land on
different nodes), then every node's containerd is checked to hold the image and every GPU's lease to be Free
again. Then one thread
per tenancy submits its share of ``containers`` one-GPU ``busybox:1.36`` containers running
``sleep 1``, back to back. The pods still use the API's ``imagePullPolicy: Always``: the
kubelet asks the local registry for the manifest each time, the layers are not fetched again.

Where each mark comes from (every wall-clock time is turned into this process's monotonic
clock with one offset taken at the start; all run on one machine):

1. POST sent and the 202 answered: this process's monotonic clock;
2. pod created, bound (``spec.nodeName`` set), Running: one watch on the pods through
   kube-apiserver, the time each change arrived (the objects' own times are whole seconds);
3. the app container's record created (``/containers/create``), its task created (the shim
   and ``runc create``: ``/tasks/create``) and started (``runc start``: ``/tasks/start``):
   containerd's event stream on each node (``ctr events``, nanosecond times), matched to the
   pod by the container ID in its status;
4. the API reports Running: the ``created_at`` (microseconds) of the ``container.running``
   webhook event, which the API writes in the same transaction that turns the container's
   status to Running, so from then on ``GET /v1/containers/{id}`` says Running. (A container
   the API only saw finished gets that event when it records the end: still the first moment
   the API said it had run.) Nothing polls the API under test.

The last line of stdout is one JSON object:

* ``running_p50_ms`` / ``running_p99_ms``: POST -> the API reports Running, less the time the
  pod waited because no node had room for it (from the scheduler's first
  ``PodScheduled=False`` mark to the bind): the control plane's and the node's part. Room runs
  out before the 16 GPUs do here: each pod asks for 150m CPU per GPU plus the RuntimeClass's
  500m overhead, and a real node offers this machine's 2 cores, so about 3 one-GPU pods fit a node at once;
* ``queued_running_p50_ms`` / ``queued_running_p99_ms``: the same with those waits, as a
  tenant sees it (a burst of ``containers`` queues); ``waited_for_room``: how many
  containers waited (the scheduler's messages are printed to stderr);
* per phase ``<phase>_p50_ms`` / ``<phase>_p99_ms``, the phases splitting POST -> API Running
  (each mark taken as at least the one before, so the phases are never negative and add up):
  ``admission`` (POST -> 202), ``pod_creation`` (202 -> pod seen), ``scheduling`` (pod seen ->
  bound, less ``room_wait``), ``kubelet`` (bound -> the container's record in containerd: pod
  admission, the device plugin's Allocate, the pod sandbox with its pause container and
  network, the image check), ``runc_create`` (record -> task created), ``runc_start`` (task
  created -> started), ``status_report`` (started -> the pod Running seen: the kubelet's
  PLEG and status update), ``api_report`` (pod Running seen -> the API reports Running);
* ``post_to_pod_*`` (POST -> pod seen) and ``bound_to_running_*`` (bind -> pod Running seen);
* ``kube_only_running_p50_ms`` / ``kube_only_running_p99_ms`` (with ``kube_only_pods``,
  ``kube_only_failed``): the upstream floor in the same run, once the API's containers are
  done: as many pods again created directly on kube-apiserver (``kube_only``), each one of
  the API's pods without its GPU, tenancy or labels (it keeps its ``/dev/shm`` ``emptyDir``,
  which the kubelet mounts as it does the API's), timed create sent -> pod Running, less
  the wait for room. Nothing of gpucaas is in their path, so ``running_*`` cannot be lower;
* ``running_p50_ratio_vs_kube`` / ``running_p99_ratio_vs_kube``: ``running_*`` over
  ``kube_only_running_*``, the two measured in this run;
* per phase, the floor's own ``kube_only_<phase>_p50_ms`` / ``_p99_ms`` (its pods' marks taken
  as the API's are: create sent -> pod seen is its ``pod_creation``, and its ``admission`` and
  ``api_report`` are 0, as nothing stands between the client and the pod) and
  ``<phase>_beyond_kube_p50_ms`` / ``_p99_ms``: the API's percentile less the floor's, where a
  container's time goes beyond the floor's pod (``kube_only_phases_measured`` pods had every
  mark);
* ``started_per_s``: containers / (last API Running - first POST);
* ``containers`` (those that ran: the figures are theirs), ``did_not_start`` (pods the kubelet
  refused, e.g. ``UnexpectedAdmissionError``; the reasons go to stderr), ``tenancies``,
  ``gpus`` (submitted), ``real_nodes``, ``quick``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.kit.gpucaas_api import GpucaasApi
from benchmarks.kit.report import emit, p50_p99, say
from benchmarks.kit.sandbox import sandbox
from benchmarks.kit.tenancies import open_tenancies, wait_ready
from benchmarks.kit.watch import Watch, pods_path

IMAGE = "busybox:1.36"
IMAGE_REF = "docker.io/library/busybox:1.36"  # what containerd calls it
COMMAND = ["sleep", "1"]
STALL_S = 180.0  # give up when no container progressed for this long (a stall, not slowness)
PHASES = (
    "admission",
    "pod_creation",
    "scheduling",
    "room_wait",
    "kubelet",
    "runc_create",
    "runc_start",
    "status_report",
    "api_report",
)


#: wall clock -> monotonic clock (one offset for the run)
_WALL_TO_MONO = time.time() - time.monotonic()


def mono_of_wall(wall: float) -> float:
    return wall - _WALL_TO_MONO


@dataclass
class Seen:
    """What the watch saw of one container's pod (monotonic seconds)."""

    created: float | None = None
    unschedulable: float | None = None
    bound: float | None = None
    running: float | None = None
    finished: float | None = None
    node: str | None = None
    container_id: str | None = None  # containerd's ID of the app container
    wait_reason: str | None = None  # the scheduler's message when it first found no place
    last: str | None = None  # the pod's phase and its container's state, as last seen

    def room_wait(self) -> float:
        """How long the pod waited for room on a node: the scheduler's first Unschedulable mark -> bound."""
        if self.unschedulable is None or self.bound is None:
            return 0.0
        return self.bound - self.unschedulable


class PodWatch:
    """When each pod of ``label`` (its value names it) reached each step, as the pods' watch
    delivered the changes (``benchmarks.kit.watch``: the product's informer); the first bound
    pod is kept as ``template``."""

    def __init__(self, kubeconfig: Path, label: str | None = None) -> None:
        from core.crds import LABEL_CONTAINER

        self.label = label or LABEL_CONTAINER  # the pods watched carry it; its value names them
        self.template: dict[str, Any] | None = None  # the first bound pod, as JSON
        self.seen: dict[str, Seen] = {}
        self.watch = Watch(kubeconfig, pods_path(), query=[("labelSelector", self.label)], seen=self._note)
        self.cond = self.watch.cond

    def start(self) -> None:
        self.watch.start()

    def _note(self, pod: dict[str, Any], _deleted: bool) -> None:
        from services.api.domain.pods import CONTAINER_NAME

        now = time.monotonic()
        meta = pod.get("metadata") or {}
        cid = (meta.get("labels") or {}).get(self.label)
        if not cid:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        status = pod.get("status") or {}
        if self.template is None and node:
            self.template = pod
        s = self.seen.setdefault(cid, Seen(created=now))
        phase = status.get("phase")
        conds = status.get("conditions") or []
        unplaced = [c for c in conds if c.get("type") == "PodScheduled" and c.get("status") == "False"]
        if s.unschedulable is None and not node and unplaced:
            s.unschedulable, s.wait_reason = now, unplaced[0].get("message")
        if s.bound is None and node:
            s.bound, s.node = now, node
        if s.running is None and phase in ("Running", "Succeeded", "Failed"):
            s.running = now
        if s.finished is None and phase in ("Succeeded", "Failed"):
            s.finished = now
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == CONTAINER_NAME and cs.get("containerID"):
                s.container_id = cs["containerID"].split("://", 1)[-1]
        if phase == "Failed" and status.get("reason"):
            s.last = f"{status['reason']}: {status.get('message')}"

    def stop(self) -> None:
        self.watch.stop()


class ContainerdEvents:
    """``ctr events`` on every real node: when each container's record, task and start happened
    (containerd's own nanosecond times, as monotonic seconds here)."""

    TOPICS = {"/containers/create": "record", "/tasks/create": "task", "/tasks/start": "started"}

    def __init__(self, ctr: Path, sockets: list[Path]) -> None:
        self.marks: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._procs = [
            subprocess.Popen(
                [str(ctr), "--address", str(s), "events"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            for s in sockets
        ]
        for p in self._procs:
            threading.Thread(target=self._read, args=(p,), daemon=True, name="ctr-events").start()

    @staticmethod
    def parse(line: str) -> tuple[float, str, dict[str, Any]] | None:
        """``2026-11-26 10:00:00.123456789 +0000 UTC k8s.io /tasks/start {...}`` -> (wall, topic, body)."""
        parts = line.split(" ", 6)
        if len(parts) < 7:
            return None
        day, clock, offset, _zone, _namespace, topic, body = parts
        whole, _, frac = clock.partition(".")
        try:
            stamp = datetime.strptime(f"{day} {whole} {offset}", "%Y-%m-%d %H:%M:%S %z").timestamp()
            data = json.loads(body)
        except ValueError:
            return None
        return stamp + (float(f"0.{frac}") if frac else 0.0), topic, data

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            got = self.parse(line.strip())
            if got is None or got[1] not in self.TOPICS:
                continue
            wall, topic, data = got
            ident = data.get("id") if topic == "/containers/create" else data.get("container_id")
            if ident:
                with self._lock:
                    self.marks.setdefault(ident, {}).setdefault(self.TOPICS[topic], mono_of_wall(wall))

    def get(self, ident: str | None) -> dict[str, float]:
        with self._lock:
            return dict(self.marks.get(ident or "", {}))

    def stop(self) -> None:
        for p in self._procs:
            p.terminate()
        for p in self._procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


class WebhookReceiver:
    """Receives the tenancies' ``container.running`` events: container id -> the API's time
    of the Running status (monotonic seconds)."""

    def __init__(self) -> None:
        self.running: dict[str, float] = {}
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                if body.get("type") == "container.running":
                    cid = body["data"]["container"]["id"]
                    at = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00")).timestamp()
                    with receiver.cond:
                        receiver.running.setdefault(cid, mono_of_wall(at))
                        receiver.cond.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="webhooks").start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_all(what: str, ids: list[str], done: Any, cond: threading.Condition) -> None:
    """Until ``done(id)`` holds for every id; raises if none progressed for STALL_S."""
    with cond:
        last, count = time.monotonic(), 0
        while True:
            now_done = sum(bool(done(i)) for i in ids)
            if now_done == len(ids):
                return
            if now_done > count:
                last, count = time.monotonic(), now_done
            if time.monotonic() - last > STALL_S:
                raise RuntimeError(f"{count}/{len(ids)} containers reached {what}; none more for {STALL_S:.0f}s")
            cond.wait(1.0)


def post(api: GpucaasApi, token: str, body: dict[str, Any]) -> tuple[str, float, float]:
    """Submit one container (429s waited out); returns its id, when the POST that was answered
    went, when its 202 came."""
    answer = api.call("POST", "/v1/containers", token, body)
    if answer.status != 202:
        raise RuntimeError(f"POST /v1/containers: {answer.status} {str(answer.body)[:200]}")
    return answer.body["id"], answer.sent_at, answer.answered_at


def cache_image(sb: Any, api: GpucaasApi, token: str, watcher: PodWatch, ctr: Path) -> None:
    """One 8-GPU container per node (a whole board each: they cannot share a node), then check
    that every node's containerd holds the image."""
    body = {"image": IMAGE, "gpus": 8, "command": ["true"]}
    ids = [post(api, token, body)[0] for _ in sb.real_nodes]
    wait_all("finished (warm-up)", ids, lambda i: getattr(watcher.seen.get(i), "finished", None), watcher.cond)
    for name, node in sb.real_nodes.items():
        images = subprocess.run(
            [str(ctr), "--address", str(node.containerd_socket), "--namespace", "k8s.io", "images", "ls", "-q"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if IMAGE_REF not in images:
            raise RuntimeError(
                f"{name}: {IMAGE_REF} not cached after the warm-up (nodes used: "
                f"{sorted(str(watcher.seen[i].node) for i in ids)})"
            )


def wait_gpus_free(kubeconfig: Path) -> None:
    """Until every GPU's lease is back to Free (the warm-up's boards released and checked)."""
    from core.crds import GPULEASE_PLURAL, GROUP, VERSION
    from core.kube import KubeConnection, connect
    from core.lease_states import LeaseState, state_of
    from devtools.waiting import wait_for

    with connect(KubeConnection(kubeconfig=kubeconfig)) as kube:

        def free() -> bool:
            items = kube.request("GET", f"/apis/{GROUP}/{VERSION}/{GPULEASE_PLURAL}")["items"]
            return all(state_of(o.get("status")) == LeaseState.FREE for o in items)

        wait_for(free, STALL_S, interval=0.5, what="every GPU's lease Free after the warm-up")


def submit_all(api: GpucaasApi, tokens: list[str], count: int) -> tuple[dict[str, float], dict[str, float]]:
    """One thread per tenancy submits its share back to back; returns id -> POST sent, id -> 202 answered."""
    posted: dict[str, float] = {}
    answered: dict[str, float] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def tenant(t: int, token: str) -> None:
        body = {"image": IMAGE, "gpus": 1, "command": COMMAND}
        for _ in range(t, count, len(tokens)):
            try:
                cid, t0, t1 = post(api, token, body)
            except RuntimeError as exc:
                with lock:
                    errors.append(str(exc))
                return
            with lock:
                posted[cid], answered[cid] = t0, t1

    threads = [threading.Thread(target=tenant, args=(t, tok)) for t, tok in enumerate(tokens)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"{len(errors)} submissions failed, first: {errors[0]}")
    return posted, answered


KUBE_ONLY_NAMESPACE = "ttr-kube-only"
KUBE_ONLY_LABEL = "benchmark.gpucaas.io/kube-only"


def kube_only_pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A pod like the API's (``template``: one it made and the scheduler bound) without
    gpucaas: no GPU (so no device plugin, no lease), no tenancy (its own namespace, no
    pull secret, no claims on the tenancy's volumes); the same image, command, CPU and memory,
    runtime class, placement rules and volumes that need no other object (the ``/dev/shm``
    ``emptyDir`` every GPU container carries, as any PyTorch pod on Kubernetes does), so it
    needs the same room on the same nodes and the kubelet mounts what it mounts for the
    API's."""
    spec = {
        k: v
        for k, v in template["spec"].items()
        if k not in ("nodeName", "volumes", "imagePullSecrets", "serviceAccountName", "serviceAccount")
    }
    kept = [v for v in template["spec"].get("volumes") or () if set(v) == {"name", "emptyDir"}]
    if kept:
        spec["volumes"] = kept
    names = {v["name"] for v in kept}
    containers = []
    for c in spec["containers"]:
        mounts = [m for m in c.get("volumeMounts") or () if m.get("name") in names]
        c = {k: v for k, v in c.items() if k not in ("volumeMounts", "env", "envFrom")}
        if mounts:
            c["volumeMounts"] = mounts
        res = c.get("resources") or {}
        c["resources"] = {
            kind: {r: q for r, q in (res.get(kind) or {}).items() if "/" not in r} for kind in ("requests", "limits")
        }
        containers.append(c)
    spec["containers"] = containers
    spec.pop("initContainers", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": KUBE_ONLY_NAMESPACE, "labels": {KUBE_ONLY_LABEL: name}},
        "spec": spec,
    }


def kube_only(
    sb: Any, template: dict[str, Any], count: int, threads: int, events: ContainerdEvents
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The upstream floor, same stack, same run: ``count`` pods like the API's created
    directly on kube-apiserver by ``threads`` threads back to back (as the tenancies
    submit), no gpucaas in their path. Returns create sent -> pod Running, less the wait
    for room, p50 / p99 (ms), and each pod's phases (:func:`phases_of`: its create is both
    POST and 202, its Running both the pod's and the API's, so ``admission`` and
    ``api_report`` are 0)."""
    from kubernetes import client

    from core.kube import new_api_client
    from devtools.waiting import wait_for

    with new_api_client(sb.kubeconfig) as api:
        core: Any = client.CoreV1Api(api)  # given plain JSON
        core.create_namespace({"metadata": {"name": KUBE_ONLY_NAMESPACE}})
        wait_for(  # pods need the namespace's default service account
            lambda: core.list_namespaced_service_account(KUBE_ONLY_NAMESPACE).items,
            STALL_S,
            interval=0.2,
            what=f"a service account in {KUBE_ONLY_NAMESPACE}",
        )
        watcher = PodWatch(sb.kubeconfig, label=KUBE_ONLY_LABEL)
        watcher.start()
        sent: dict[str, float] = {}
        lock = threading.Lock()

        def creator(t: int) -> None:
            for n in range(t, count, threads):
                name = f"kube-only-{n:04d}"
                t0 = time.monotonic()
                core.create_namespaced_pod(KUBE_ONLY_NAMESPACE, kube_only_pod(template, name))
                with lock:
                    sent[name] = t0

        try:
            workers = [threading.Thread(target=creator, args=(t,)) for t in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            names = sorted(sent)
            wait_all(
                "Running (kube only)", names, lambda i: getattr(watcher.seen.get(i), "running", None), watcher.cond
            )
            seen = {i: watcher.seen[i] for i in names}
        finally:
            watcher.stop()
    failed = [i for i in names if seen[i].last is not None]
    for i in failed[:3]:
        say(f"kube only: {i} failed: {' '.join(str(seen[i].last).split())[:300]}")
    times = []
    for i in names:
        times.append(max(0.0, (seen[i].running - sent[i] - seen[i].room_wait()) * 1000))  # type: ignore[operator]
    split = []
    for i in names:
        marks = events.get(seen[i].container_id)
        phases = phases_of(
            [
                sent[i],
                sent[i],
                seen[i].created,
                seen[i].bound,
                marks.get("record"),
                marks.get("task"),
                marks.get("started"),
                seen[i].running,
                seen[i].running,
            ],
            seen[i].room_wait(),
        )
        if phases is not None:
            split.append(phases)
    summary = {
        **p50_p99("kube_only_running", times, empty=math.nan),
        "kube_only_pods": len(times),
        "kube_only_failed": len(failed),
    }
    return summary, split


def phases_of(marks: list[float | None], waited: float) -> dict[str, float] | None:
    """POST, 202, pod seen, bound, record, task, started, pod Running, API Running -> the phases (ms).

    Each mark is taken as at least the one before it, so the phases add up to POST -> API
    Running; the scheduling phase is split into the wait for room on a node and the rest."""
    if any(m is None for m in marks):
        return None
    cum: list[float] = []
    for m in marks:
        cum.append(max(m, cum[-1]) if cum else m)  # type: ignore[type-var, arg-type]
    steps = [(b - a) * 1000 for a, b in zip(cum, cum[1:], strict=False)]
    admission, pod_creation, scheduling, kubelet, runc_create, runc_start, status_report, api_report = steps
    room_wait = min(scheduling, waited * 1000)
    return {
        "admission": admission,
        "pod_creation": pod_creation,
        "scheduling": scheduling - room_wait,
        "room_wait": room_wait,
        "kubelet": kubelet,
        "runc_create": runc_create,
        "runc_start": runc_start,
        "status_report": status_report,
        "api_report": api_report,
    }


def beyond_the_floor(
    result: dict[str, Any], floor: dict[str, float], floor_split: list[dict[str, float]]
) -> dict[str, Any]:
    """The ratios to the floor (``running_*_ratio_vs_kube``) and, per phase, the floor's own
    p50 / p99 (``kube_only_<phase>_*``) and what the API's path adds to it
    (``<phase>_beyond_kube_*``: the difference of the two percentiles, so a negative figure
    is a phase the floor's pods took longer over)."""
    out: dict[str, Any] = {}
    for q in ("p50", "p99"):
        api_ms, floor_ms = result[f"running_{q}_ms"], floor[f"kube_only_running_{q}_ms"]
        ok = floor_ms > 0 and not math.isnan(api_ms) and not math.isnan(floor_ms)
        out[f"running_{q}_ratio_vs_kube"] = round(api_ms / floor_ms, 2) if ok else math.nan
    for phase in PHASES:
        out.update(p50_p99(f"kube_only_{phase}", [p[phase] for p in floor_split], empty=math.nan))
        for q in ("p50", "p99"):
            out[f"{phase}_beyond_kube_{q}_ms"] = round(result[f"{phase}_{q}_ms"] - out[f"kube_only_{phase}_{q}_ms"], 1)
    return out


def run(count: int, tenancies: int, quick: bool, kube_only_count: int | None = None) -> dict[str, Any]:
    from devtools.sandbox.nodes import DEFAULT_NODES

    with sandbox("gpucaas-ttr-") as sb:
        api = GpucaasApi.of(sb)
        watcher = PodWatch(sb.kubeconfig)
        hooks = WebhookReceiver()
        events: ContainerdEvents | None = None
        try:
            assert sb.cluster is not None and sb.real_nodes, "the benchmark needs the sandbox's real nodes"
            ctr = sb.cluster.bin_dir / "ctr"
            # Quotas above what a tenancy submits: the figure is placement, not quota refusals.
            pod_quota = max(20, -(-count // tenancies))
            names = [f"ttr-{t:02d}" for t in range(tenancies)]
            made = open_tenancies(api, sb.admin_token, names, gpu_quota=8 * pod_quota, pod_quota=pod_quota)
            tokens = [made[name] for name in names]
            # Tenancy namespaces are made by the controller: a container submitted before its
            # tenancy is Ready would wait for that too, which is not what this measures.
            wait_ready(sb.kubeconfig, names)
            for token in tokens:
                api.expect("POST", "/v1/webhooks", token, {"url": hooks.url, "events": ["container.running"]})
            watcher.start()
            cache_image(sb, api, tokens[0], watcher, ctr)
            wait_gpus_free(sb.kubeconfig)
            events = ContainerdEvents(ctr, [n.containerd_socket for n in sb.real_nodes.values()])
            time.sleep(1.0)  # the event streams open
            posted, answered = submit_all(api, tokens, count)
            ids = list(posted)
            wait_all("Running in the API", ids, lambda i: i in hooks.running, hooks.cond)
            wait_all("finished", ids, lambda i: getattr(watcher.seen.get(i), "finished", None), watcher.cond)
            seen = {i: watcher.seen[i] for i in ids}
            api_running = {i: hooks.running[i] for i in ids}
            ctrd = {i: events.get(seen[i].container_id) for i in ids}
            assert watcher.template is not None, "no pod was bound"
            floor, floor_split = kube_only(
                sb, watcher.template, count if kube_only_count is None else kube_only_count, tenancies, events
            )
        finally:
            if events is not None:
                events.stop()
            hooks.stop()
            watcher.stop()
    reasons = sorted({seen[i].wait_reason or "" for i in ids if seen[i].unschedulable is not None})
    for reason in reasons:
        say(f"a pod waited: {reason}")
    waited = {i: seen[i].room_wait() for i in ids}
    # A pod the kubelet refused (no container was ever made) did not run: the API reports it
    # failed, after a container.running event of its own (the pod had a start time).
    never = [i for i in ids if seen[i].container_id is None]
    for i in never:
        say(f"did not start: {i}: {' '.join(str(seen[i].last).split())[:300]}")
    submitted = len(ids)
    ids = [i for i in ids if seen[i].container_id is not None]
    queued = [(api_running[i] - posted[i]) * 1000 for i in ids]
    control = [max(0.0, (api_running[i] - posted[i] - waited[i]) * 1000) for i in ids]
    to_pod = [(seen[i].created - posted[i]) * 1000 for i in ids]  # type: ignore[operator]
    node_part = [
        (running - bound) * 1000
        for running, bound in ((seen[i].running, seen[i].bound) for i in ids)
        if bound is not None and running is not None
    ]
    split = [
        p
        for p in (
            phases_of(
                [
                    posted[i],
                    answered[i],
                    seen[i].created,
                    seen[i].bound,
                    ctrd[i].get("record"),
                    ctrd[i].get("task"),
                    ctrd[i].get("started"),
                    seen[i].running,
                    api_running[i],
                ],
                waited[i],
            )
            for i in ids
        )
        if p is not None
    ]
    span = max(api_running[i] for i in ids) - min(posted.values())
    result: dict[str, Any] = {
        **p50_p99("running", control, empty=math.nan),
        **p50_p99("queued_running", queued, empty=math.nan),
    }
    for phase in PHASES:
        result.update(p50_p99(phase, [p[phase] for p in split], empty=math.nan))
    result.update(beyond_the_floor(result, floor, floor_split))
    result.update(
        {
            **floor,
            "kube_only_phases_measured": len(floor_split),
            "phases_measured": len(split),  # containers with every mark (the others lack a containerd event)
            **p50_p99("post_to_pod", to_pod, empty=math.nan),
            **p50_p99("bound_to_running", node_part, empty=math.nan),
            "waited_for_room": sum(waited[i] > 0 for i in ids),
            "started_per_s": round(len(ids) / span, 2),
            "containers": len(ids),  # those that ran
            "did_not_start": submitted - len(ids),
            "tenancies": tenancies,
            "gpus": submitted,
            "real_nodes": len(DEFAULT_NODES),
            "image": IMAGE,
            "quick": quick,
        }
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 containers instead of 200")
    parser.add_argument("--containers", type=int, default=None)
    parser.add_argument("--tenancies", type=int, default=20)
    args = parser.parse_args(argv)
    count = args.containers or (40 if args.quick else 200)
    result = run(count, args.tenancies, args.quick)
    where = ", ".join(f"{p} {result[f'{p}_p50_ms']} (+{result[f'{p}_beyond_kube_p50_ms']})" for p in PHASES)
    say(
        f"POST -> API Running, control plane and node: p50 {result['running_p50_ms']} ms, "
        f"p99 {result['running_p99_ms']} ms; with waits for room: p99 {result['queued_running_p99_ms']} ms; "
        f"{result['started_per_s']} started/s; ratios to Kubernetes alone: p50 "
        f"{result['running_p50_ratio_vs_kube']}, p99 {result['running_p99_ratio_vs_kube']}; "
        f"p50 by phase (ms, + what the API's path adds to the floor's): {where}"
    )
    emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
