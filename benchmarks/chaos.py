"""The chaos soak: short containers of mixed sizes on the real control plane and real nodes
while every component is killed, then a check that nothing was lost, run twice or leaked.

Run: ``python -m benchmarks.chaos [--quick] [--seed N] [--allocation device-plugin|dra]``
(``--random N`` is the same option).

Set-up: ``gpucaas sandbox`` with its two nodes real (containerd, runc and the pinned kubelet
run the containers), two API replicas on one PostgreSQL database (a fresh database of its
own, dropped after), and kube-apiserver compacting etcd every ``COMPACTION`` so that a watch
that falls behind, or comes back after a restart, meets 410 Gone. ``TENANCIES`` tenancies
each submit their share of the containers (1, 2, 4 or 8 GPUs; ``sh -c 'sleep S; exit E'``),
spread over the soak's window, one container of a tenancy at a time, through both replicas
(each request to the next one). Now and then a tenancy cancels its container, opens an exec
in it (over the API's WebSocket) or follows its log to the end; at seeded times the admin
deletes a tenancy or two.

Meanwhile a killer thread SIGKILLs, at seeded random times over the window, each component
of the mode at least once: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a
node's kubelet and containerd, one API replica, the tenancy controller, a node's device
plugin (or, in the DRA mode, its DRA driver) and its fabric service. Each stays down for a
seeded 0.5 to 3 s, then is started again and waited for. A component that exits on its own
is started again as its supervisor would (Kubernetes' restart policy, systemd) and counted
apart (``crashes`` on stderr).

Requests: a connection error, or a 503 with ``Retry-After`` (or a 429), is retried, on the
other replica; a POST carries an ``Idempotency-Key`` so a retry can never submit twice. Any
other 5xx is a server error (counted, then retried).

After the last kill, a bounded heal: until every accepted container has ended in the API,
no pod runs, every GPU lease is Free and no NVLink partition is active (``HEAL_S`` at most).
Then the checks, printed as one JSON object on the last line of stdout:

* ``submitted`` (submissions made), ``accepted`` (answered 202);
* ``lost``: accepted, but not ended in a state Kubernetes agrees with: still active in the
  API; Succeeded or Failed without a pod that ended so (with that exit code); Cancelled
  though neither the tenant nor a tenancy deletion cancelled it, or with its pod still running;
  or unknown to the API;
* ``duplicated``: two pods created for one container (kube-apiserver's audit log: more
  than one successful create of its pod, or the pod watch: more than one pod uid that ran),
  or a container the API holds that no 202 answered (a submission run twice);
* ``stuck_leases``: GPULeases not Free whose holder pod is not running;
* ``stuck_partitions``: NVLink partitions active (FabricState) although no pod runs;
* ``usage_mismatches``: runs whose usage record disagrees with the pod's own start and end
  (a started pod without a record, a record not ended, GPUs or GPU-seconds other than the
  pod's ``startedAt``..``finishedAt``; a pod deleted before it reported its end may be ended
  at its deletion, within ``USAGE_SLACK_S``);
* ``server_errors``: 5xx answers other than 503 with ``Retry-After``;
* ``kills`` (and ``kills_by_component``), ``seed``, ``allocation_mode``, ``quick``,
  ``duration_s``.

Details (each lost container, each server error, each crash) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import ssl
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from http.client import HTTPException
from pathlib import Path
from typing import Any

from core.backoff import Backoff

IMAGE = "busybox:1.36"
TENANCIES = 20
API_REPLICAS = 2
COMPACTION = "10s"
SIZES = (1, 1, 1, 1, 2, 2, 4, 8)  # GPUs, drawn uniformly: mostly small, some whole quads and boards
CANCEL_P, EXEC_P, FOLLOW_P, FAIL_P = 0.12, 0.08, 0.08, 0.1
DOWN_S = (0.5, 3.0)
HEAL_S = 240.0
CONTAINER_WAIT_S = 240.0  # a tenancy waits this long for its container to end before the next
USAGE_SLACK_S = 2.0
REQUEST_DEADLINE_S = 180.0
POSTGRES_ADMIN_URL = os.environ.get("GPUCAAS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

#: the figures that must be 0 (the soak exits 1 otherwise)
FIGURES = ("lost", "duplicated", "stuck_leases", "stuck_partitions", "usage_mismatches", "server_errors")
COMMON = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "api-replica",
    "controller",
    "fabric",
)


def components(allocation_mode: str) -> tuple[str, ...]:
    """What the killer kills in a mode: the control plane, a node's daemons, gpucaas's services."""
    return (*COMMON, "dra-driver" if allocation_mode == "dra" else "device-plugin")


@dataclass(frozen=True)
class Size:
    containers: int
    window_s: float  # submissions and kills are spread over it
    rounds: int  # kills of each component


QUICK = Size(containers=60, window_s=100.0, rounds=1)
FULL = Size(containers=300, window_s=600.0, rounds=3)


def kill_plan(rng: random.Random, allocation_mode: str, size: Size) -> list[tuple[float, str]]:
    """(seconds after the start, component): every component ``rounds`` times, at random
    times over the window, in random order."""
    names = [c for _ in range(size.rounds) for c in components(allocation_mode)]
    rng.shuffle(names)
    times = sorted(rng.uniform(5.0, size.window_s) for _ in names)
    return list(zip(times, names, strict=True))


# --- requests --------------------------------------------------------------------------


class GaveUp(RuntimeError):
    pass


@dataclass
class Tally:
    """What the requests met, shared by every thread."""

    server_errors: list[str] = field(default_factory=list)
    retries: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def server_error(self, what: str) -> None:
        with self.lock:
            self.server_errors.append(what)
        print(f"server error: {what}", file=sys.stderr)

    def retry(self, why: str) -> None:
        with self.lock:
            self.retries[why] += 1


class Api:
    """The API through its replicas: each request to the next one; retryable failures retried."""

    def __init__(self, urls: list[str], ca_file: Path, tally: Tally) -> None:
        self.urls = urls
        self.ctx = ssl.create_default_context(cafile=str(ca_file))
        self.tally = tally
        self._next = 0
        self._lock = threading.Lock()

    def url(self) -> str:
        with self._lock:
            self._next += 1
            return self.urls[self._next % len(self.urls)]

    def call(
        self,
        method: str,
        path: str,
        token: str,
        body: Any = None,
        *,
        idempotency_key: str | None = None,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> tuple[int, Any]:
        """(status, JSON body) of the first answer that is not retryable."""
        deadline = time.monotonic() + deadline_s
        data = json.dumps(body).encode() if body is not None else None
        while True:
            req = urllib.request.Request(self.url() + path, data=data, method=method)
            req.add_header("Authorization", f"Bearer {token}")
            if data is not None:
                req.add_header("Content-Type", "application/json")
            if idempotency_key:
                req.add_header("Idempotency-Key", idempotency_key)
            wait = 0.5
            try:
                with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:
                    raw = resp.read()
                    return resp.status, json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                retry_after = exc.headers.get("Retry-After")
                if exc.code == 429 or (exc.code == 503 and retry_after):
                    self.tally.retry(str(exc.code))
                    wait = min(float(retry_after or 1), 5.0)
                elif exc.code >= 500:
                    self.tally.server_error(f"{method} {path}: {exc.code} {raw[:300]!r}")
                else:
                    try:
                        return exc.code, json.loads(raw) if raw else None
                    except ValueError:
                        return exc.code, raw.decode(errors="replace")
            except (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError, OSError) as exc:
                self.tally.retry(type(exc).__name__)  # a replica gone (killed) or not answering yet
                del exc
            if time.monotonic() + wait > deadline:
                raise GaveUp(f"{method} {path}: no answer for {deadline_s:.0f}s")
            time.sleep(wait)

    def follow_logs(self, cid: str, token: str) -> str | None:
        """The log followed to its end (None when a stream could not be opened or broke)."""
        req = urllib.request.Request(self.url() + f"/v1/containers/{cid}/logs?follow=true")
        req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=120, context=self.ctx) as resp:
                return str(resp.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 and not (exc.code == 503 and exc.headers.get("Retry-After")):
                self.tally.server_error(f"GET logs?follow: {exc.code} {exc.read()[:300]!r}")
            return None
        except (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError, OSError):
            return None

    def exec(self, cid: str, token: str, command: list[str]) -> str | None:
        """stdout of ``command`` run in the container over the API's exec WebSocket (None: refused or broken).

        websockets' asyncio client: its sync one reads and writes one TLS session from two
        threads (OpenSSL forbids it), lost a request now and then and could then hang."""
        return asyncio.run(self._exec(cid, token, command))

    async def _exec(self, cid: str, token: str, command: list[str]) -> str | None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import (
            ConnectionClosed,
            InvalidHandshake,
            InvalidStatus,
        )

        query = urllib.parse.urlencode([("command", c) for c in command])
        url = self.url().replace("https://", "wss://") + f"/v1/containers/{cid}/exec?{query}"
        out = b""
        try:
            async with connect(
                url,
                ssl=self.ctx,
                additional_headers={"Authorization": f"Bearer {token}"},
                subprotocols=["v5.channel.k8s.io"],  # type: ignore[list-item]  # websockets' Subprotocol is a str
                compression=None,
                open_timeout=30,
                max_size=1 << 20,
            ) as ws:
                while True:
                    msg = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(msg, bytes) and msg[:1] == b"\x01":
                        out += msg[1:]
                    elif isinstance(msg, bytes) and msg[:1] == b"\x03":
                        break
        except InvalidStatus as exc:
            code = exc.response.status_code
            if code >= 500 and not (code == 503 and exc.response.headers.get("Retry-After")):
                self.tally.server_error(f"exec: {code} {bytes(exc.response.body or b'')[:300]!r}")
            return None
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError):
            return out.decode(errors="replace") if out else None
        return out.decode(errors="replace")


# --- the workload ----------------------------------------------------------------------


@dataclass
class Submission:
    key: str  # its Idempotency-Key
    tenancy: str
    gpus: int
    exit_code: int
    cid: str | None = None
    cancelled: bool = False  # the tenant asked to cancel it


@dataclass
class Workload:
    api: Api
    admin_token: str
    tokens: dict[str, str]
    size: Size
    rng_seed: int
    started: float = field(default_factory=time.monotonic)
    submissions: list[Submission] = field(default_factory=list)
    deleted: dict[str, float] = field(default_factory=dict)  # tenancy -> when its deletion was answered
    execs: Counter[str] = field(default_factory=Counter)
    follows: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, deletions: list[tuple[float, str]]) -> None:
        names = sorted(self.tokens)
        threads = [
            threading.Thread(target=self._tenant, args=(i, name), name=f"tenant-{name}", daemon=True)
            for i, name in enumerate(names)
        ]
        threads.append(threading.Thread(target=self._deleter, args=(deletions,), name="deleter", daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _deleter(self, deletions: list[tuple[float, str]]) -> None:
        for at, name in deletions:
            time.sleep(max(0.0, self.started + at - time.monotonic()))
            with self.lock:  # asked for from now on (a request that got no answer may have done it)
                self.deleted[name] = time.monotonic()
            try:
                status, _ = self.api.call("DELETE", f"/v1/admin/tenancies/{name}", self.admin_token)
            except GaveUp as exc:
                status = exc  # type: ignore[assignment]
            print(f"[{time.monotonic() - self.started:6.1f}s] deleted tenancy {name}: {status}", file=sys.stderr)

    def _tenant(self, index: int, name: str) -> None:
        rng = random.Random(f"{self.rng_seed}-{name}")
        token = self.tokens[name]
        n, count = len(self.tokens), self.size.containers
        for k in range(index, count, n):
            if name in self.deleted:
                return
            time.sleep(max(0.0, self.started + self.size.window_s * k / count - time.monotonic()))
            gpus = rng.choice(SIZES)
            exit_code = 3 if rng.random() < FAIL_P else 0
            action = rng.choices(
                ("cancel", "exec", "follow", "none"), (CANCEL_P, EXEC_P, FOLLOW_P, 1 - CANCEL_P - EXEC_P - FOLLOW_P)
            )[0]
            sleep_s = 8 if action in ("exec", "cancel") else rng.choice((1, 2, 3))
            sub = Submission(f"chaos-{secrets.token_hex(8)}", name, gpus, exit_code)
            with self.lock:
                self.submissions.append(sub)
            body = {
                "image": IMAGE,
                "gpus": gpus,
                "command": ["sh", "-c", f"echo chaos {sub.key}; sleep {sleep_s}; exit {exit_code}"],
            }
            try:
                status, made = self.api.call("POST", "/v1/containers", token, body, idempotency_key=sub.key)
            except GaveUp as exc:
                print(f"{name}: submission gave up: {exc}", file=sys.stderr)
                continue
            if status != 202:
                if name not in self.deleted:
                    print(f"{name}: submission refused: {status} {made}", file=sys.stderr)
                if status == 401:  # its tenancy was deleted
                    return
                continue
            sub.cid = made["id"]
            try:
                self._act(rng, action, sub, token)
                self._wait_ended(sub, token)
            except GaveUp as exc:
                print(f"{name}: {sub.cid}: {exc}", file=sys.stderr)

    def _act(self, rng: random.Random, action: str, sub: Submission, token: str) -> None:
        assert sub.cid is not None
        if action == "cancel":
            time.sleep(rng.uniform(0.0, 6.0))
            sub.cancelled = True  # asked for (a request that got no answer may have done it)
            self.api.call("DELETE", f"/v1/containers/{sub.cid}", token)
        elif action == "exec":
            if self._wait_status(sub, token, ("Running",), 120.0) == "Running":
                out = self.api.exec(sub.cid, token, ["echo", "exec", sub.key])
                self.execs["ok" if out is not None and f"exec {sub.key}" in out else "failed"] += 1
        elif action == "follow" and self._wait_status(sub, token, ("Running", "Succeeded", "Failed"), 120.0):
            text = self.api.follow_logs(sub.cid, token)
            self.follows["ok" if text is not None and f"chaos {sub.key}" in text else "failed"] += 1

    def _wait_status(self, sub: Submission, token: str, wanted: tuple[str, ...], within: float) -> str | None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            status, body = self.api.call("GET", f"/v1/containers/{sub.cid}", token)
            if status != 200:
                return None
            if body["status"] in wanted:
                return str(body["status"])
            if body["status"] in ("Succeeded", "Failed", "Cancelled"):
                return None
            time.sleep(0.5)
        return None

    def _wait_ended(self, sub: Submission, token: str) -> None:
        self._wait_status(sub, token, ("Succeeded", "Failed", "Cancelled"), CONTAINER_WAIT_S)


# --- the killer ------------------------------------------------------------------------


@dataclass
class Killer:
    """Kills each component at its planned time, keeps it down a moment, starts it again; also
    starts again any component that exited on its own (counted as a crash)."""

    sb: Any
    plan: list[tuple[float, str]]
    rng: random.Random
    started: float = field(default_factory=time.monotonic)
    kills: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while a kill is under way
    done: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        try:
            for at, name in self.plan:
                time.sleep(max(0.0, self.started + at - time.monotonic()))
                try:
                    self.kill(name)
                except Exception as exc:  # noqa: BLE001 (a component that does not come back is a finding)
                    self.errors.append(f"{name}: {exc}")
                    print(f"killer: {name} did not come back: {exc}", file=sys.stderr)
        finally:
            self.done.set()

    def _say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", file=sys.stderr)

    def kill(self, name: str) -> None:
        sb = self.sb
        node = self.rng.choice(sorted(sb.real_nodes))
        down = self.rng.uniform(*DOWN_S)
        with self.lock:
            if name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
                self._say(f"kill -9 {name}; down {down:.1f}s")
                self._cycle(sb.cluster, name, down)
            elif name in ("kubelet", "containerd"):
                self._say(f"kill -9 {name} on {node}; down {down:.1f}s")
                self._cycle(sb.real_nodes[node], name, down)
            else:
                service = {
                    "api-replica": self.rng.choice(["api", *(f"api-{i + 1}" for i in range(1, len(sb.api_urls)))]),
                    "controller": "controller",
                    "fabric": f"fabric-{node}",
                    "device-plugin": f"device-plugin-{node}",
                    "dra-driver": f"dra-driver-{node}",
                }[name]
                self._say(f"kill -9 {service}; down {down:.1f}s")
                self._cycle(sb.supervisor, service, down)
            self.kills[name] += 1
            self._say(f"{name} is back")

    @staticmethod
    def _cycle(group: Any, name: str, down: float) -> None:
        group.kill(name, signal.SIGKILL)
        time.sleep(down)
        group.bring_up(name, 300.0)

    def revive_loop(self, stop: threading.Event) -> None:
        """What a node's init system and Kubernetes would do: start again what exited on its own."""
        while not stop.wait(1.0):
            with self.lock:
                for event in self.sb.supervisor.revive():
                    if event.restarted:
                        self.crashes[event.name] += 1
                        self._say(f"crash: {event.describe()}")
                groups = [self.sb.cluster, *self.sb.real_nodes.values()]
                for group in groups:
                    for name, child in group.children.items():
                        if child.process is not None and child.process.poll() is not None:
                            self.crashes[name] += 1
                            self._say(f"crash: {name} exited with {child.process.returncode}; starting it again")
                            group.launch(name)


# --- the checks ------------------------------------------------------------------------


@dataclass
class PodRecord:
    uid: str
    cid: str
    phase: str | None = None
    started_at: str | None = None  # the app container's own startedAt
    finished_at: str | None = None
    exit_code: int | None = None
    running: bool = False  # its container ran (started) at some point
    deleted: bool = False
    gpus: int | None = None


class PodWatch:
    """Every pod gpucaas made, by uid, from the product's informer: it resumes a cut watch from the
    last revision seen (as client-go's reflectors do) and lists again on 410 Gone."""

    def __init__(self, kubeconfig: Path) -> None:
        from core.crds import LABEL_CONTAINER
        from core.kube import Informer, Kube, KubeConnection

        self.kube = Kube(KubeConnection(kubeconfig=kubeconfig, read_timeout_s=30.0))
        self.pods: dict[str, PodRecord] = {}
        self.lock = threading.Lock()
        self.informer = Informer(
            self.kube,
            "/api/v1/pods",
            query=[("labelSelector", LABEL_CONTAINER)],
            name="pod-watch",
            on_list=self._listed,
            on_event=lambda kind, pod: self.note(pod, deleted=kind == "DELETED"),
            backoff=Backoff(initial_s=0.5, max_s=0.5),  # kube-apiserver is killed on purpose: come back soon
            watch_timeout_s=30,
        )

    @property
    def relists(self) -> int:
        return self.informer.relists

    @property
    def expired(self) -> int:
        """Watches that met 410 Gone (resumed from a compacted revision)."""
        return self.informer.expired

    def start(self) -> PodWatch:
        self.informer.start()
        return self

    def stop(self) -> None:
        self.informer.stop()
        self.kube.close()

    def _listed(self, pods: list[dict[str, Any]]) -> None:
        listed = set()
        for pod in pods:
            self.note(pod, deleted=False)
            listed.add(pod["metadata"]["uid"])
        with self.lock:  # gone while the watch was down: deleted
            for uid, rec in self.pods.items():
                if uid not in listed:
                    rec.deleted = True

    def note(self, pod: dict[str, Any], *, deleted: bool) -> None:
        from core.crds import LABEL_CONTAINER
        from services.api.pods import CONTAINER_NAME

        meta = pod.get("metadata") or {}
        cid = (meta.get("labels") or {}).get(LABEL_CONTAINER)
        if not cid:
            return
        with self.lock:
            rec = self.pods.setdefault(meta["uid"], PodRecord(meta["uid"], cid))
            status = pod.get("status") or {}
            rec.phase = status.get("phase") or rec.phase
            rec.deleted = rec.deleted or deleted
            for c in (pod.get("spec") or {}).get("containers") or []:
                limits = (c.get("resources") or {}).get("limits") or {}
                if "nvidia.com/gpu" in limits:
                    rec.gpus = int(limits["nvidia.com/gpu"])
            for cs in status.get("containerStatuses") or []:
                if cs.get("name") != CONTAINER_NAME:
                    continue
                state = cs.get("state") or {}
                if state.get("running"):
                    rec.running = True
                    rec.started_at = state["running"].get("startedAt") or rec.started_at
                if state.get("terminated"):
                    t = state["terminated"]
                    rec.running = rec.running or bool(t.get("startedAt"))
                    rec.started_at = t.get("startedAt") or rec.started_at
                    rec.finished_at = t.get("finishedAt") or rec.finished_at
                    rec.exit_code = t.get("exitCode")

    def by_container(self) -> dict[str, list[PodRecord]]:
        out: dict[str, list[PodRecord]] = defaultdict(list)
        with self.lock:
            for rec in self.pods.values():
                out[rec.cid].append(rec)
        return out


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def api_containers(api: Api, admin_token: str) -> dict[str, dict[str, Any]]:
    """Every container the API holds (deleted tenancies' included), by id."""
    out: dict[str, dict[str, Any]] = {}
    after = None
    while True:
        path = "/v1/admin/containers?limit=500" + (f"&after={urllib.parse.quote(after)}" if after else "")
        status, page = api.call("GET", path, admin_token)
        if status != 200:
            raise RuntimeError(f"GET /v1/admin/containers: {status} {page}")
        out.update({c["id"]: c for c in page["data"]})
        after = page.get("next")
        if not after:
            return out


def cluster_state(kubeconfig: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(GPULeases, FabricStates, the gpucaas pods) as kube-apiserver has them now."""
    from kubernetes import client

    from core.crds import (
        FABRICSTATE_PLURAL,
        GPULEASE_PLURAL,
        GROUP,
        LABEL_CONTAINER,
        VERSION,
    )
    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        objects = client.CustomObjectsApi(api)
        # the client types its answer as object; a list of a custom resource is {"items": [...]}
        leases: list[dict[str, Any]] = objects.list_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL)["items"]  # type: ignore[index]
        fabric: list[dict[str, Any]] = objects.list_cluster_custom_object(  # type: ignore[index]
            GROUP, VERSION, FABRICSTATE_PLURAL
        )["items"]
        pods = client.CoreV1Api(api).list_pod_for_all_namespaces(label_selector=LABEL_CONTAINER).items
        return leases, fabric, [api.sanitize_for_serialization(p) for p in pods]


def _running_pods(pods: list[dict[str, Any]]) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in pods
        if (p.get("status") or {}).get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")
    }


def stuck(
    leases: list[dict[str, Any]], fabric: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """(leases not Free whose holder pod does not run, partitions active while no pod runs)."""
    live = _running_pods(pods)
    bad_leases = []
    for lease in leases:
        st = lease.get("status") or {}
        if (st.get("state") or "Free") == "Free":
            continue
        holder = st.get("holder") or {}
        pod = holder.get("pod") if isinstance(holder, dict) else None
        if pod not in live:
            bad_leases.append(f"{lease['metadata']['name']}: {st.get('state')} ({st.get('reason')}; holder {holder})")
    bad_parts = []
    if not live:
        for fs in fabric:
            for p in (fs.get("status") or {}).get("partitions") or []:
                if p.get("active"):
                    bad_parts.append(f"{fs['metadata']['name']}: partition {p['id']} active (holder {p.get('holder')})")
    return bad_leases, bad_parts


def heal(api: Api, admin_token: str, kubeconfig: Path, accepted: set[str]) -> float:
    """Until every accepted container has ended, no pod runs, every lease is Free and no
    partition is active; at most HEAL_S. Returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < HEAL_S:
        try:
            rows = api_containers(api, admin_token)
            leases, fabric, pods = cluster_state(kubeconfig)
        except Exception as exc:  # noqa: BLE001 (still healing)
            print(f"heal: {exc}", file=sys.stderr)
            time.sleep(2)
            continue
        active = [c for c in accepted if rows.get(c, {}).get("status") in (None, "Queued", "Pending", "Running")]
        bad_leases, bad_parts = stuck(leases, fabric, pods)
        if not active and not _running_pods(pods) and not bad_leases and not bad_parts:
            return time.monotonic() - t0
        time.sleep(2)
    return time.monotonic() - t0


def audit_pod_creates(audit_log: Path) -> Counter[str]:
    """Successful creates of each gpucaas pod (by name) in kube-apiserver's audit log."""
    creates: Counter[str] = Counter()
    for line in audit_log.read_text(errors="replace").splitlines():
        if '"pods"' not in line or '"create"' not in line:
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        ref = ev.get("objectRef") or {}
        if (
            ev.get("verb") == "create"
            and ref.get("resource") == "pods"
            and not ref.get("subresource")
            and str(ref.get("name", "")).startswith("gpucaas-")
            and (ev.get("responseStatus") or {}).get("code") == 201
        ):
            creates[f"{ref.get('namespace')}/{ref['name']}"] += 1
    return creates


def usage_records(database_url: str) -> dict[str, dict[str, Any]]:
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = (
                conn.execute(
                    text(
                        "SELECT container_id, gpus, started_at, finished_at, gpu_seconds, end_source FROM usage_record"
                    )
                )
                .mappings()
                .all()
            )
    finally:
        engine.dispose()
    return {r["container_id"]: dict(r) for r in rows}


def check(
    work: Workload,
    rows: dict[str, dict[str, Any]],
    pods: dict[str, list[PodRecord]],
    creates: Counter[str],
    usage: dict[str, dict[str, Any]],
    live_pods: list[dict[str, Any]],
) -> dict[str, list[str]]:
    """Each finding, by figure."""
    found: dict[str, list[str]] = defaultdict(list)
    live = _running_pods(live_pods)
    subs = {s.cid: s for s in work.submissions if s.cid}
    for cid, sub in subs.items():
        row = rows.get(cid)
        ran = [p for p in pods.get(cid, []) if p.running]
        ended = [p for p in pods.get(cid, []) if p.phase in ("Succeeded", "Failed")]
        status = row["status"] if row else None
        # the pod was deleted (a tenancy deletion) while the soak's watch was down: its end unseen
        unseen = not ended and bool(pods.get(cid)) and all(p.deleted for p in pods[cid])
        why = None
        if row is None:
            why = "unknown to the API"
        elif status in ("Queued", "Pending", "Running"):
            why = f"still {status} in the API"
        elif status in ("Succeeded", "Failed") and unseen:
            print(
                f"unverifiable: {cid} is {status} in the API; its pod was deleted before the soak saw it end",
                file=sys.stderr,
            )
        elif status == "Succeeded":
            if not any(p.phase == "Succeeded" and p.exit_code == 0 for p in ended):
                why = f"Succeeded in the API, the pods: {[(p.phase, p.exit_code) for p in pods.get(cid, [])]}"
        elif status == "Failed":
            if row.get("exit_code") is not None and not any(p.exit_code == row["exit_code"] for p in ended):
                seen = [(p.phase, p.exit_code) for p in pods.get(cid, [])]
                why = f"Failed with {row['exit_code']} in the API, the pods: {seen}"
            elif row.get("exit_code") is None and any(p.phase == "Succeeded" for p in ended):
                why = f"Failed in the API ({row.get('message')}) but its pod Succeeded"
            elif row.get("exit_code") is None and not ended:
                # Kubernetes never ran it to an end: fine only if the pod was refused or is gone
                print(f"failed without an end: {cid}: {row.get('message')}", file=sys.stderr)
        elif status == "Cancelled":
            if not sub.cancelled and sub.tenancy not in work.deleted:
                why = f"Cancelled, but nobody cancelled it ({row.get('message')})"
            elif any(name == f"gpucaas-{cid}" or name.startswith(f"gpucaas-{cid}-r") for name in live):
                why = "Cancelled, but its pod still runs"
        if why:
            found["lost"].append(f"{cid} ({sub.tenancy}, {sub.gpus} GPUs): {why}")
        if len(ran) > 1:
            found["duplicated"].append(f"{cid}: {len(ran)} pods ran ({[p.uid for p in ran]})")
        made = creates.get(f"tenant-{sub.tenancy}/gpucaas-{cid}", 0)
        if made > 1:
            found["duplicated"].append(f"{cid}: its pod created {made} times (audit log)")
        # usage: the pod's own start and end
        rec = usage.get(cid)
        if not ran:
            if rec is not None:
                found["usage_mismatches"].append(f"{cid}: a usage record but no pod ran: {rec}")
            continue
        pod = ran[-1]
        start, end = _time(pod.started_at), _time(pod.finished_at)
        if rec is None:
            found["usage_mismatches"].append(f"{cid}: ran ({pod.started_at}..{pod.finished_at}) with no usage record")
            continue
        if rec["gpu_seconds"] is None or rec["finished_at"] is None:
            found["usage_mismatches"].append(f"{cid}: usage record not ended: {rec}")
            continue
        if rec["gpus"] != sub.gpus:
            found["usage_mismatches"].append(f"{cid}: {rec['gpus']} GPUs recorded, {sub.gpus} asked")
        rec_start = _as_aware(rec["started_at"])
        if start is not None and abs((rec_start - start).total_seconds()) > 0.001:
            found["usage_mismatches"].append(f"{cid}: started {rec_start} recorded, the pod's {start}")
        if end is not None and start is not None:
            want = sub.gpus * (end - start).total_seconds()
            slack = 0.001 if rec["end_source"] == "pod" else sub.gpus * USAGE_SLACK_S
            if abs(rec["gpu_seconds"] - want) > slack:
                found["usage_mismatches"].append(
                    f"{cid}: {rec['gpu_seconds']} GPU-s recorded ({rec['end_source']}), the pod's {want} "
                    f"({pod.started_at}..{pod.finished_at})"
                )
    for cid, row in rows.items():
        if cid not in subs and row["tenancy"].startswith("chaos-"):
            found["duplicated"].append(f"{cid} ({row['tenancy']}): in the API, but no submission was answered with it")
    return found


def failed_by_faults(work: Workload, rows: dict[str, dict[str, Any]]) -> list[str]:
    """Containers that ended Failed, agreeing with Kubernetes, but not with the exit code their
    command chose: a pod refused or ended by a fault (reported, not one of the figures)."""
    out = []
    for sub in work.submissions:
        row = rows.get(sub.cid or "")
        if row and row["status"] == "Failed" and row.get("exit_code") != sub.exit_code:
            out.append(f"{sub.cid} ({sub.tenancy}, {sub.gpus} GPUs): exit {row.get('exit_code')}: {row.get('message')}")
    return out


def _as_aware(value: datetime) -> datetime:
    from datetime import UTC

    return value if value.tzinfo else value.replace(tzinfo=UTC)


# --- the run ---------------------------------------------------------------------------


def _create_database() -> tuple[str, str]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"gpucaas_chaos_{secrets.token_hex(4)}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False), name


def _drop_database(name: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def run(seed: int, allocation_mode: str, quick: bool, containers: int | None = None) -> dict[str, Any]:
    from benchmarks.time_to_running import wait_ready
    from devtools.ports import free_port
    from devtools.sandbox import runner

    size = QUICK if quick else FULL
    if containers:
        size = Size(containers, size.window_s, size.rounds)
    rng = random.Random(seed)
    plan = kill_plan(rng, allocation_mode, size)
    names = [f"chaos-{t:02d}" for t in range(TENANCIES)]
    deletions = [(rng.uniform(0.4, 0.8) * size.window_s, name) for name in rng.sample(names, 1 if quick else 2)]
    print(
        f"chaos soak: seed {seed}, {allocation_mode}, {size.containers} containers over {size.window_s:.0f}s; "
        f"kills: {', '.join(f'{n}@{t:.0f}s' for t, n in plan)}; tenancy deletions: "
        f"{', '.join(f'{n}@{t:.0f}s' for t, n in deletions)}",
        file=sys.stderr,
    )
    t_start = time.monotonic()
    database_url, database = _create_database()
    tally = Tally()
    stop_revive = threading.Event()
    state = Path(tempfile.mkdtemp(prefix="gpucaas-chaos-", dir="/tmp"))
    sb = None
    watcher: PodWatch | None = None
    keep = False
    try:
        sb = runner.start(
            state,
            api_port=free_port(),
            allocation_mode=allocation_mode,
            database_url=database_url,
            api_replicas=API_REPLICAS,
            compaction_interval=COMPACTION,
        )
        assert sb.cluster is not None and sb.audit_log is not None
        api = Api(sb.api_urls, sb.tls.ca_cert, tally)
        tokens = {}
        for name in names:
            status, body = api.call(
                "POST", "/v1/admin/tenancies", sb.admin_token, {"name": name, "gpu_quota": 16, "pod_quota": 10}
            )
            assert status in (201, 409), body
            status, body = api.call("POST", f"/v1/admin/tenancies/{name}/tokens", sb.admin_token, {})
            assert status == 201, body
            tokens[name] = body["token"]
        wait_ready(sb, names)
        watcher = PodWatch(sb.kubeconfig).start()
        work = Workload(api, sb.admin_token, tokens, size, seed)
        killer = Killer(sb, plan, random.Random(seed + 1))
        t_load = time.monotonic()
        work.started = killer.started = t_load
        print(f"sandbox up in {t_load - t_start:.0f}s (state in {state})", file=sys.stderr)
        revive = threading.Thread(target=killer.revive_loop, args=(stop_revive,), daemon=True, name="revive")
        revive.start()
        kill_thread = threading.Thread(target=killer.run, daemon=True, name="killer")
        kill_thread.start()
        work.run(deletions)
        kill_thread.join()
        accepted = {s.cid for s in work.submissions if s.cid}
        print(f"[{time.monotonic() - t_load:6.1f}s] workload and kills done; healing", file=sys.stderr)
        healed = heal(api, sb.admin_token, sb.kubeconfig, accepted)
        time.sleep(3)  # the pod watch catches up
        rows = api_containers(api, sb.admin_token)
        _leases, _fabric, live_pods = cluster_state(sb.kubeconfig)
        bad_leases, bad_parts = stuck(_leases, _fabric, live_pods)
        found = check(
            work, rows, watcher.by_container(), audit_pod_creates(sb.audit_log), usage_records(database_url), live_pods
        )
        found["stuck_leases"], found["stuck_partitions"] = bad_leases, bad_parts
        found["server_errors"] = list(tally.server_errors)
        for figure, items in sorted(found.items()):
            for item in items:
                print(f"{figure}: {item}", file=sys.stderr)
        for err in killer.errors:
            print(f"kill failed: {err}", file=sys.stderr)
        statuses = Counter(rows[c]["status"] for c in accepted if c in rows)
        faults = failed_by_faults(work, rows)
        for item in faults:
            print(f"failed by a fault: {item}", file=sys.stderr)
        print(
            f"API statuses: {dict(statuses)}; execs {dict(work.execs)}; log follows {dict(work.follows)}; "
            f"retried {dict(tally.retries)}; crashes {dict(killer.crashes)}; pod watch relists {watcher.relists}, "
            f"410 Gone {watcher.expired}; "
            f"heal {healed:.0f}s",
            file=sys.stderr,
        )
        result = {
            "submitted": len(work.submissions),
            "accepted": len(accepted),
            "lost": len(found["lost"]),
            "duplicated": len(found["duplicated"]),
            "stuck_leases": len(bad_leases),
            "stuck_partitions": len(bad_parts),
            "usage_mismatches": len(found["usage_mismatches"]),
            "server_errors": len(tally.server_errors),
            "kills": sum(killer.kills.values()),
            "failed_by_faults": len(faults),
            "kills_by_component": dict(sorted(killer.kills.items())),
            "seed": seed,
            "allocation_mode": allocation_mode,
            "quick": quick,
            "duration_s": round(time.monotonic() - t_start, 1),
        }
        keep = any(
            result[k]
            for k in ("lost", "duplicated", "stuck_leases", "stuck_partitions", "usage_mismatches", "server_errors")
        ) or bool(killer.errors)
        return result
    except BaseException:
        keep = True
        raise
    finally:
        stop_revive.set()
        if watcher is not None:
            watcher.stop()
        if sb is not None:
            sb.stop()
        _drop_database(database)
        if keep:
            print(f"sandbox state and logs kept in {state}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK.containers} containers over {QUICK.window_s:.0f}s, each component killed once (CI's size)",
    )
    parser.add_argument(
        "--seed",
        "--random",
        dest="seed",
        type=int,
        default=None,
        help="the random seed: every random draw of the run follows from it (printed; a new one by default)",
    )
    parser.add_argument("--allocation", choices=("device-plugin", "dra"), default="device-plugin")
    parser.add_argument("--containers", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(1 << 31)
    result = run(seed, args.allocation, args.quick, args.containers)
    print(json.dumps(result))
    failed = [k for k in FIGURES if result[k]]
    unkilled = sorted(set(components(args.allocation)) - set(result["kills_by_component"]))
    if failed or unkilled:
        print(
            f"chaos soak FAILED (seed {seed}, {args.allocation}): "
            + "; ".join([*(f"{k} = {result[k]}" for k in failed), *(f"{c} never killed" for c in unkilled)]),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
