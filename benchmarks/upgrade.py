"""``helm upgrade`` under load: the chart and image of an earlier commit upgraded to this work
tree's while tenants keep submitting, then a check that nothing was lost, run twice or left
holding a GPU.

Run: ``python -m benchmarks.upgrade [--from COMMIT] [--containers N] [--queueing kueue|none]``
(``make test-upgrade``, ``UPGRADE_FROM`` the commit).

Set-up: the earlier commit's tree checked out beside this one (``git worktree add --detach``,
removed after), its image built by its own ``deploy/image/build.sh`` (into the same cache: the
base is shared) and this work tree's image built; then ``gpucaas sandbox --install helm``
installing the earlier commit's chart with its ``values-sandbox.yaml`` and its image, with two
API replicas so that the roll always leaves one serving.

Load: ``TENANCIES`` tenancies submit small 1-GPU busybox containers that end at once, one every
``1 / RATE`` s, sent from a pool of threads (a slow answer holds up no other), to the API's
Service (its ClusterIP, which this machine reaches through kube-proxy; TLS verified against the
Service's DNS name), each POST with an ``Idempotency-Key``. A connection error or a 5xx is
retried with the same key, as a real client does; every 5xx is counted. After ``WARMUP``
submissions, ``helm upgrade --wait`` to this work tree's chart and image (its pre-upgrade
migration Job, then the roll of every Deployment and DaemonSet); the submissions go on until at
least ``--containers`` were made, half that many accepted, and for ``TAIL_S`` after the upgrade,
so that both releases serve.

After: the chaos soak's bounded heal and checks (:mod:`benchmarks.chaos`), printed as one JSON
object on the last line of stdout: ``submitted``, ``accepted``, ``refused`` (answered 4xx),
``failed_by_faults`` (ended Failed with an exit code other than its command's); ``lost``,
``duplicated`` (two pods for one container, or a container no 202 answered: one
Idempotency-Key submitted twice), ``stuck_leases``, ``stuck_partitions``, ``usage_mismatches``
as the soak defines them; ``server_errors`` (every 5xx answer, 503 with ``Retry-After``
included); ``from`` and ``to`` (the images' tags: the commits' short hashes); ``upgrade_s``
(``helm upgrade`` until every DaemonSet pod is Ready and the GPUs are offered again),
``queueing``, ``duration_s``. ``lost``, ``duplicated``, ``server_errors`` and
``stuck_leases`` must be 0, ``submitted`` at least ``--containers`` and ``accepted`` at least
half of it (the run exits 1 otherwise). Details go to stderr.

The backlog: the load outruns the two nodes, so containers queue during the roll, and each
tenancy's quota (``QUOTA`` GPUs) bounds how many: beyond it the API refuses the submission
(403 ``quota_exceeded``, counted in ``refused``), as it would any client's. After the roll the
run waits for that backlog to end, so the quota also bounds the wait (with 64 a tenancy, a
slow roll beside the rest of ``make test`` left 256 queued and 6 minutes of waiting).
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import chaos
from benchmarks.kit.gpucaas_api import GaveUp, GpucaasApi, Tally
from benchmarks.kit.report import emit, say
from benchmarks.kit.sandbox import sandbox
from benchmarks.kit.tenancies import open_tenancies, wait_ready

REPO = Path(__file__).resolve().parents[1]
#: the commit upgraded from by default: the last one before this benchmark (in full, so that a
#: shallow clone can fetch it by name)
FROM = "93e6706600fce9804288b970c05b15ead03c503f"
IMAGE = "busybox:1.36"
TENANCIES = 4
QUOTA = 16  # GPUs and pods per tenancy: the backlog the roll builds (Kueue queues it) is 64 at most
CONTAINERS = 200
RATE = 1.5  # submissions per second: above what the two nodes run (about 0.7/s), so a backlog builds
WARMUP = 20  # submissions before the upgrade starts
TAIL_S = 15.0  # submissions go on this long after the upgrade
GIVE_UP_S = 900.0  # the load stops by then even short of its accepted submissions
API_REPLICAS = 2
API_SERVICE = "gpucaas-api"
API_SERVER_NAME = "gpucaas-api.gpucaas-system.svc"
PREFIX = "upgrade-"

#: the figures that must be 0 (the run exits 1 otherwise)
FIGURES = ("lost", "duplicated", "server_errors", "stuck_leases")


class MissingCommit(RuntimeError):
    """The earlier commit is not in this clone."""


def _rev_parse(commit: str, repo: Path) -> str | None:
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else None


def resolve(commit: str, repo: Path = REPO) -> str:
    """The full hash of ``commit`` in this clone; a full hash a shallow clone lacks is fetched
    from its ``origin`` first (:class:`MissingCommit` when neither has it)."""
    found = _rev_parse(commit, repo)
    if found is None and len(commit) == 40:
        say(f"commit {commit[:12]} is not in this clone: fetching it from origin")
        subprocess.run(
            ["git", "-C", str(repo), "fetch", "--quiet", "--depth", "1", "origin", commit],
            capture_output=True,
            check=False,
        )
        found = _rev_parse(commit, repo)
    if found is None:
        raise MissingCommit(
            f"commit {commit} is not in this clone"
            + (" nor in its origin" if len(commit) == 40 else " (a shallow one? name it by its full hash)")
            + "; set UPGRADE_FROM to one that is"
        )
    return found


@contextmanager
def checked_out(commit: str) -> Iterator[Path]:
    """``commit``'s tree in a temporary work tree, removed after."""
    where = Path(tempfile.mkdtemp(prefix="gpucaas-upgrade-from-"))
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--quiet", "--detach", str(where), commit],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)


# --- the load --------------------------------------------------------------------------


@dataclass
class Load:
    """Submissions at a steady rate until ``stopping`` is set, at least ``at_least`` were made
    and half that many accepted (or ``GIVE_UP_S`` has passed: the figures then say it)."""

    api: GpucaasApi
    tokens: dict[str, str]
    at_least: int
    submissions: list[chaos.Submission] = field(default_factory=list)
    deleted: dict[str, float] = field(default_factory=dict)  # none here; chaos.check reads it
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    warmed: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        names = sorted(self.tokens)
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=32, thread_name_prefix="submit") as pool:
            k = 0
            while True:
                time.sleep(max(0.0, start + k / RATE - time.monotonic()))
                if self.stopping.is_set() and k >= self.at_least and self.accepted() >= accepted_needed(self.at_least):
                    break
                if time.monotonic() - start > GIVE_UP_S:
                    say(f"load: {self.accepted()} accepted after {GIVE_UP_S:.0f}s; stopping")
                    break
                sub = chaos.Submission(f"{PREFIX}{secrets.token_hex(8)}", names[k % len(names)], 1, 0)
                with self.lock:
                    self.submissions.append(sub)
                pool.submit(self._submit, sub)
                k += 1
                if k == WARMUP:
                    self.warmed.set()

    def accepted(self) -> int:
        with self.lock:
            return sum(1 for s in self.submissions if s.cid)

    def _submit(self, sub: chaos.Submission) -> None:
        body = {"image": IMAGE, "gpus": 1, "command": ["sh", "-c", f"echo {sub.key}; sleep 1"]}
        try:
            answer = self.api.call("POST", "/v1/containers", self.tokens[sub.tenancy], body, idempotency_key=sub.key)
        except GaveUp as exc:
            say(f"{sub.tenancy}: submission {sub.key} gave up: {exc}")
            return
        if answer.status == 202:
            sub.cid = answer.body["id"]
        else:
            with self.lock:
                self.refused.append(f"{sub.key}: {answer.status} {str(answer.body)[:200]}")


def server_errors(tally: Tally) -> int:
    """Every 5xx answered: those counted as server errors and the 503s with ``Retry-After``
    (retried as the API asks, but a roll that drains a replica after its Service stopped
    sending it requests answers none)."""
    return len(tally.server_errors) + tally.retries["503"]


def figures(load: Load, found: dict[str, list[str]], tally: Tally) -> dict[str, int]:
    """The run's counts, from the checks' findings."""
    return {
        "submitted": len(load.submissions),
        "accepted": load.accepted(),
        "refused": len(load.refused),
        "lost": len(found["lost"]),
        "duplicated": len(found["duplicated"]),
        "server_errors": server_errors(tally),
        "stuck_leases": len(found["stuck_leases"]),
        "stuck_partitions": len(found["stuck_partitions"]),
        "usage_mismatches": len(found["usage_mismatches"]),
    }


def accepted_needed(at_least: int) -> int:
    """Accepted submissions a run needs: half of ``at_least`` (the quota refuses the rest)."""
    return (at_least + 1) // 2


def failures(result: dict[str, Any], at_least: int) -> list[str]:
    """What makes the run fail, in words (none: it passed)."""
    out = [f"{k} = {result[k]}" for k in FIGURES if result[k]]
    if result["submitted"] < at_least:
        out.append(f"submitted {result['submitted']} < {at_least}")
    if result["accepted"] < (need := accepted_needed(at_least)):
        out.append(f"accepted {result['accepted']} < {need}")
    return out


# --- the run ---------------------------------------------------------------------------


def service_url(kubeconfig: Path) -> str:
    """The API Service's address, as a client in the cluster (or kube-proxy's host) reaches it."""
    from kubernetes import client

    from core.kube import new_api_client
    from devtools.sandbox.chart_install import NAMESPACE

    with new_api_client(kubeconfig) as api:
        spec = client.CoreV1Api(api).read_namespaced_service(API_SERVICE, NAMESPACE).spec
    assert spec is not None
    return f"https://{spec.cluster_ip}:443"


def revive_loop(sb: Any, stop: threading.Event) -> None:
    """Until ``stop``: the sandbox's host processes started again when they exit (the
    port-forward to the API ends with the pod it forwards to)."""
    while not stop.wait(1.0):
        for _, event in sb.revive():
            if event.restarted:
                say(f"restarted: {event.describe()}")


def run(commit: str, containers: int, queueing: str) -> dict[str, Any]:
    from devtools import image as product_image
    from devtools.sandbox import chart_install, host_database

    t_start = time.monotonic()
    replicas = {"api": {"replicas": API_REPLICAS}}
    with checked_out(commit) as tree:
        say(f"building the image of {commit[:12]} with its own deploy/image/build.sh")
        earlier = product_image.build(
            {"GPUCAAS_IMAGE_PYTHON": sys.executable}, script=tree / "deploy" / "image" / "build.sh"
        )
        say("building this work tree's image")
        current = product_image.build()
        say(f"upgrade from {earlier.tag} to {current.tag}; starting the sandbox with {earlier.tag}'s chart")
        release = chart_install.ChartRelease(
            tree / "deploy" / "helm" / "gpucaas", tree / "deploy" / "helm" / "values-sandbox.yaml", earlier, replicas
        )
        tally = Tally()
        findings = False
        with sandbox(
            "gpucaas-upgrade-", keep=lambda: findings, install="helm", queueing=queueing, release=release
        ) as sb:
            assert sb.audit_log is not None
            api = GpucaasApi(
                [service_url(sb.kubeconfig)],
                sb.tls.ca_cert,
                tally=tally,
                retry_server_errors=True,
                server_name=API_SERVER_NAME,
            )
            names = [f"{PREFIX}{t:02d}" for t in range(TENANCIES)]
            tokens = open_tenancies(api, sb.admin_token, names, gpu_quota=QUOTA, pod_quota=QUOTA)
            wait_ready(sb.kubeconfig, names)
            watcher = chaos.PodWatch(sb.kubeconfig).start()
            stop_revive = threading.Event()
            revive = threading.Thread(target=revive_loop, args=(sb, stop_revive), daemon=True, name="revive")
            revive.start()
            load = Load(api, tokens, containers)
            t_load = time.monotonic()
            say(f"sandbox up in {t_load - t_start:.0f}s (state in {sb.state_dir}); load at {RATE}/s")
            loader = threading.Thread(target=load.run, name="load", daemon=True)
            loader.start()
            try:
                load.warmed.wait()
                say(f"[{time.monotonic() - t_load:6.1f}s] helm upgrade to {current.tag}")
                t_up = time.monotonic()
                chart_install.upgrade(sb, chart_install.ChartRelease(image=current, values=replicas), queueing, say)
                upgrade_s = time.monotonic() - t_up
                say(f"[{time.monotonic() - t_load:6.1f}s] upgraded in {upgrade_s:.0f}s")
                time.sleep(TAIL_S)
            finally:
                load.stopping.set()
                loader.join()
            say(f"[{time.monotonic() - t_load:6.1f}s] {len(load.submissions)} submitted; waiting for their ends")
            found, rows, healed = chaos.settle_and_check(
                sb, api, load, watcher, tally, host_database.url(sb.state_dir, "127.0.0.1"), PREFIX
            )
            for item in load.refused:
                say(f"refused: {item}")
            faults = chaos.failed_by_faults(load, rows)
            for item in faults:
                say(f"failed by a fault: {item}")
            say(f"retried {dict(tally.retries)}; heal {healed:.0f}s")
            stop_revive.set()
            watcher.stop()
            result: dict[str, Any] = {
                **figures(load, found, tally),
                "failed_by_faults": len(faults),
                "from": earlier.tag,
                "to": current.tag,
                "upgrade_s": round(upgrade_s, 1),
                "queueing": queueing,
                "duration_s": round(time.monotonic() - t_start, 1),
            }
            findings = bool(failures(result, containers))
        if not findings:  # kept with the sandbox's state otherwise
            host_database.drop(sb.state_dir)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="commit", default=FROM, help=f"the earlier commit upgraded from ({FROM})")
    parser.add_argument("--containers", type=int, default=CONTAINERS, help="submissions at least")
    parser.add_argument("--queueing", choices=("kueue", "none"), default="kueue")
    args = parser.parse_args(argv)
    try:
        commit = resolve(args.commit)
    except MissingCommit as exc:
        print(f"benchmarks.upgrade: {exc}", file=sys.stderr)
        return 2
    result = run(commit, args.containers, args.queueing)
    emit(result)
    failed = failures(result, args.containers)
    if failed:
        say(f"upgrade under load FAILED ({result['from']} -> {result['to']}): " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
