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
no pod runs, every GPU lease is Free and no NVLink partition is active, given up once
``HEAL_S`` pass with nothing ending (a backlog that drains slowly, as it does on a loaded
machine, is healing; one that stops draining is stuck, and its leftovers are counted).
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
import json
import random
import secrets
import threading
import time
import urllib.parse
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from benchmarks.kit.database import scratch_database
from benchmarks.kit.gpucaas_api import GaveUp, GpucaasApi, Tally
from benchmarks.kit.killer import Killer
from benchmarks.kit.report import emit, say
from benchmarks.kit.sandbox import sandbox
from benchmarks.kit.tenancies import open_tenancies, wait_ready
from benchmarks.kit.watch import Watch, pods_path
from core.backoff import Backoff

if TYPE_CHECKING:
    from devtools.sandbox.runner import Sandbox

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


# --- the workload ----------------------------------------------------------------------


@dataclass
class Submission:
    key: str  # its Idempotency-Key
    tenancy: str
    gpus: int
    exit_code: int
    cid: str | None = None
    cancelled: bool = False  # the tenant asked to cancel it


class Submitted(Protocol):
    """What :func:`check` reads of a workload: its submissions and the tenancies it deleted."""

    submissions: list[Submission]
    deleted: dict[str, float]


@dataclass
class Workload:
    api: GpucaasApi
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
                status: object = self.api.call("DELETE", f"/v1/admin/tenancies/{name}", self.admin_token).status
            except GaveUp as exc:
                status = exc
            say(f"[{time.monotonic() - self.started:6.1f}s] deleted tenancy {name}: {status}")

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
                answer = self.api.call("POST", "/v1/containers", token, body, idempotency_key=sub.key)
            except GaveUp as exc:
                say(f"{name}: submission gave up: {exc}")
                continue
            if answer.status != 202:
                if name not in self.deleted:
                    say(f"{name}: submission refused: {answer.status} {answer.body}")
                if answer.status == 401:  # its tenancy was deleted
                    return
                continue
            sub.cid = answer.body["id"]
            try:
                self._act(rng, action, sub, token)
                self._wait_ended(sub, token)
            except GaveUp as exc:
                say(f"{name}: {sub.cid}: {exc}")

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
            answer = self.api.call("GET", f"/v1/containers/{sub.cid}", token)
            body = answer.body
            if answer.status != 200:
                return None
            if body["status"] in wanted:
                return str(body["status"])
            if body["status"] in ("Succeeded", "Failed", "Cancelled"):
                return None
            time.sleep(0.5)
        return None

    def _wait_ended(self, sub: Submission, token: str) -> None:
        self._wait_status(sub, token, ("Succeeded", "Failed", "Cancelled"), CONTAINER_WAIT_S)


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
    """Every pod gpucaas made, by uid, from the pods' watch (``benchmarks.kit.watch``: the
    product's informer, which resumes a cut watch from the last revision seen and lists again on
    410 Gone); a pod missing from a listing was deleted while no watch ran."""

    def __init__(self, kubeconfig: Path) -> None:
        from core.crds import LABEL_CONTAINER

        self.pods: dict[str, PodRecord] = {}
        self.watch = Watch(
            kubeconfig,
            pods_path(),
            query=[("labelSelector", LABEL_CONTAINER)],
            seen=self.note,
            relisted=self._relisted,
            name="pod-watch",
            backoff=Backoff(initial_s=0.5, max_s=0.5),  # kube-apiserver is killed on purpose: come back soon
            watch_timeout_s=30,
        )

    def start(self) -> PodWatch:
        self.watch.start()
        return self

    def stop(self) -> None:
        self.watch.stop()

    def _relisted(self, pods: list[dict[str, Any]]) -> None:
        listed = {pod["metadata"]["uid"] for pod in pods}
        for uid, rec in self.pods.items():
            if uid not in listed:
                rec.deleted = True

    def note(self, pod: dict[str, Any], deleted: bool) -> None:
        from core.crds import LABEL_CONTAINER
        from services.api.domain.pods import CONTAINER_NAME

        meta = pod.get("metadata") or {}
        cid = (meta.get("labels") or {}).get(LABEL_CONTAINER)
        if not cid:
            return
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
        with self.watch.cond:
            for rec in self.pods.values():
                out[rec.cid].append(rec)
        return out


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def api_containers(api: GpucaasApi, admin_token: str) -> dict[str, dict[str, Any]]:
    """Every container the API holds (deleted tenancies' included), by id."""
    out: dict[str, dict[str, Any]] = {}
    after = None
    while True:
        path = "/v1/admin/containers?limit=500" + (f"&after={urllib.parse.quote(after)}" if after else "")
        page = api.expect("GET", path, admin_token, ok=(200,))
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


def heal(api: GpucaasApi, admin_token: str, kubeconfig: Path, accepted: set[str]) -> float:
    """Until every accepted container has ended, no pod runs, every lease is Free and no
    partition is active; given up after HEAL_S without progress (:func:`draining`, measured
    against the least left so far, so that a pod started again and again is none). Returns
    the seconds it took."""
    t0 = progress_at = time.monotonic()
    least: tuple[int, ...] | None = None
    while time.monotonic() - progress_at < HEAL_S:
        try:
            rows = api_containers(api, admin_token)
            leases, fabric, pods = cluster_state(kubeconfig)
        except Exception as exc:  # noqa: BLE001 (still healing)
            say(f"heal: {exc}")
            time.sleep(2)
            continue
        active = [c for c in accepted if rows.get(c, {}).get("status") in (None, "Queued", "Pending", "Running")]
        bad_leases, bad_parts = stuck(leases, fabric, pods)
        now = (len(active), len(_running_pods(pods)), len(bad_leases), len(bad_parts))
        if not any(now):
            return time.monotonic() - t0
        if least is None or draining(least, now):
            progress_at, least = time.monotonic(), now
        time.sleep(2)
    say(f"heal: nothing ended in {HEAL_S:.0f}s; giving up")
    return time.monotonic() - t0


def draining(before: tuple[int, ...], now: tuple[int, ...]) -> bool:
    """Whether the heal made progress: fewer active containers, or as many with fewer of the
    rest (pods running, leases held, partitions active, in that order)."""
    return now < before


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
    work: Submitted,
    rows: dict[str, dict[str, Any]],
    pods: dict[str, list[PodRecord]],
    creates: Counter[str],
    usage: dict[str, dict[str, Any]],
    live_pods: list[dict[str, Any]],
    tenancy_prefix: str = "chaos-",
) -> dict[str, list[str]]:
    """Each finding, by figure (the workload's tenancies are named ``tenancy_prefix...``)."""
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
            say(f"unverifiable: {cid} is {status} in the API; its pod was deleted before the soak saw it end")
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
                say(f"failed without an end: {cid}: {row.get('message')}")
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
        if cid not in subs and row["tenancy"].startswith(tenancy_prefix):
            found["duplicated"].append(f"{cid} ({row['tenancy']}): in the API, but no submission was answered with it")
    return found


def settle_and_check(
    sb: Sandbox,
    api: GpucaasApi,
    work: Submitted,
    watcher: PodWatch,
    tally: Tally,
    database_url: str,
    tenancy_prefix: str = "chaos-",
) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]], float]:
    """Once the load is over: the bounded :func:`heal`, then every finding by figure (each said
    on stderr), the API's containers, and the seconds the heal took."""
    assert sb.audit_log is not None
    accepted = {s.cid for s in work.submissions if s.cid}
    healed = heal(api, sb.admin_token, sb.kubeconfig, accepted)
    time.sleep(3)  # the pod watch catches up
    rows = api_containers(api, sb.admin_token)
    leases, fabric, live_pods = cluster_state(sb.kubeconfig)
    found = check(
        work,
        rows,
        watcher.by_container(),
        audit_pod_creates(sb.audit_log),
        usage_records(database_url),
        live_pods,
        tenancy_prefix,
    )
    found["stuck_leases"], found["stuck_partitions"] = stuck(leases, fabric, live_pods)
    found["server_errors"] = list(tally.server_errors)
    for figure, items in sorted(found.items()):
        for item in items:
            say(f"{figure}: {item}")
    return found, rows, healed


def failed_by_faults(work: Submitted, rows: dict[str, dict[str, Any]]) -> list[str]:
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


def run(seed: int, allocation_mode: str, quick: bool, containers: int | None = None) -> dict[str, Any]:
    size = QUICK if quick else FULL
    if containers:
        size = Size(containers, size.window_s, size.rounds)
    rng = random.Random(seed)
    plan = kill_plan(rng, allocation_mode, size)
    names = [f"chaos-{t:02d}" for t in range(TENANCIES)]
    deletions = [(rng.uniform(0.4, 0.8) * size.window_s, name) for name in rng.sample(names, 1 if quick else 2)]
    say(
        f"chaos soak: seed {seed}, {allocation_mode}, {size.containers} containers over {size.window_s:.0f}s; "
        f"kills: {', '.join(f'{n}@{t:.0f}s' for t, n in plan)}; tenancy deletions: "
        f"{', '.join(f'{n}@{t:.0f}s' for t, n in deletions)}"
    )
    t_start = time.monotonic()
    tally = Tally()
    findings = False  # the sandbox's state and logs stay for a look when there are
    with (
        scratch_database("gpucaas_chaos") as database_url,
        sandbox(
            "gpucaas-chaos-",
            keep=lambda: findings,
            allocation_mode=allocation_mode,
            database_url=database_url,
            api_replicas=API_REPLICAS,
            compaction_interval=COMPACTION,
        ) as sb,
    ):
        assert sb.cluster is not None and sb.audit_log is not None
        api = GpucaasApi.of(sb, tally=tally, retry_server_errors=True)
        tokens = open_tenancies(api, sb.admin_token, names, gpu_quota=16, pod_quota=10)
        wait_ready(sb.kubeconfig, names)
        watcher = PodWatch(sb.kubeconfig).start()
        stop_revive = threading.Event()
        try:
            work = Workload(api, sb.admin_token, tokens, size, seed)
            killer = Killer(sb, plan, random.Random(seed + 1), down_s=DOWN_S)
            t_load = time.monotonic()
            work.started = killer.started = t_load
            say(f"sandbox up in {t_load - t_start:.0f}s (state in {sb.state_dir})")
            revive = threading.Thread(target=killer.revive_loop, args=(stop_revive,), daemon=True, name="revive")
            revive.start()
            kill_thread = threading.Thread(target=killer.run, daemon=True, name="killer")
            kill_thread.start()
            work.run(deletions)
            kill_thread.join()
            accepted = {s.cid for s in work.submissions if s.cid}
            say(f"[{time.monotonic() - t_load:6.1f}s] workload and kills done; healing")
            found, rows, healed = settle_and_check(sb, api, work, watcher, tally, database_url)
        finally:
            stop_revive.set()
            watcher.stop()
        for err in killer.errors:
            say(f"kill failed: {err}")
        statuses = Counter(rows[c]["status"] for c in accepted if c in rows)
        faults = failed_by_faults(work, rows)
        for item in faults:
            say(f"failed by a fault: {item}")
        say(
            f"API statuses: {dict(statuses)}; execs {dict(work.execs)}; log follows {dict(work.follows)}; "
            f"retried {dict(tally.retries)}; crashes {dict(killer.crashes)}; pod watch relists "
            f"{watcher.watch.relists}, 410 Gone {watcher.watch.expired}; heal {healed:.0f}s"
        )
        result = {
            "submitted": len(work.submissions),
            "accepted": len(accepted),
            "lost": len(found["lost"]),
            "duplicated": len(found["duplicated"]),
            "stuck_leases": len(found["stuck_leases"]),
            "stuck_partitions": len(found["stuck_partitions"]),
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
        findings = any(result[k] for k in FIGURES) or bool(killer.errors)
    return result


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
    emit(result)
    failed = [k for k in FIGURES if result[k]]
    unkilled = sorted(set(components(args.allocation)) - set(result["kills_by_component"]))
    if failed or unkilled:
        say(
            f"chaos soak FAILED (seed {seed}, {args.allocation}): "
            + "; ".join([*(f"{k} = {result[k]}" for k in failed), *(f"{c} never killed" for c in unkilled)])
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
