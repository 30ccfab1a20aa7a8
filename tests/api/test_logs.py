"""Logs that stream and stay: a followed log ends with a complete body when the container
ends or is cancelled (read with httpx and with ``curl -N``), and the tail of every
finished container's log is kept by the API and served after its pod is gone."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc
from sqlmodel import Session

from devtools.waiting import wait_for
from services.api.store import log_archive
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import ended, get_pod, mark_tenancy_ready, set_pod_status
from tests.fixtures.kubelet_logs import GONE, LOG_FILE_GONE

TERMINATED_OK = {
    "phase": "Succeeded",
    "containerStatuses": [
        {
            "name": "main",
            "ready": False,
            "restartCount": 0,
            "image": "x",
            "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-02T04:00:00Z"}},
        }
    ],
}


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig, log_archive_bytes=2048)


@pytest.fixture
def ca_file(tls_ca: Any, tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    tls_ca.cert_pem.write_to_path(path)
    return path


def _started(api: ApiServer, k8s: Any, tenancy: str) -> tuple[str, str, str]:
    """A tenancy with a token and one container whose pod exists: (token, container id, pod)."""
    with api.client() as admin:
        token = new_tenancy(admin, tenancy)
    mark_tenancy_ready(k8s, tenancy)
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending")
    return token, cid, f"gpucaas-{cid}"


def _curl(api: ApiServer, ca_file: Path, token: str, path: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "curl",
            "-sS",
            "-N",
            "--fail",
            "--cacert",
            str(ca_file),
            "-H",
            f"Authorization: Bearer {token}",
            f"{api.base_url}{path}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_httpx_reads_a_followed_log_to_its_end_when_the_container_ends(
    api: ApiServer, k8s: Any, node_logs: Any
) -> None:
    token, cid, pod = _started(api, k8s, "follow")
    node_logs.write("tenant-follow", pod, "step 1\n")
    with api.client(token) as c, c.stream("GET", f"/v1/containers/{cid}/logs", params={"follow": "true"}) as stream:
        lines = stream.iter_lines()
        assert next(lines) == "step 1"
        node_logs.write("tenant-follow", pod, "step 2\nResult = PASS\n")
        assert next(lines) == "step 2"
        node_logs.end("tenant-follow", pod)  # the container exits
        set_pod_status(k8s, "tenant-follow", pod, TERMINATED_OK)
        rest = list(lines)  # raises httpx.RemoteProtocolError if the chunked body is cut
    assert rest == ["Result = PASS"]
    assert stream.is_closed


def test_curl_follow_exits_0_with_the_whole_log_on_completion(
    api: ApiServer, k8s: Any, node_logs: Any, ca_file: Path
) -> None:
    if shutil.which("curl") is None:
        pytest.fail("curl is needed (Debian package curl)")
    token, cid, pod = _started(api, k8s, "curled")
    node_logs.write("tenant-curled", pod, "one\n")
    proc = _curl(api, ca_file, token, f"/v1/containers/{cid}/logs?follow=true")
    assert proc.stdout is not None
    first = proc.stdout.readline()
    node_logs.write("tenant-curled", pod, "two\n")
    node_logs.end("tenant-curled", pod)  # the container exits
    set_pod_status(k8s, "tenant-curled", pod, TERMINATED_OK)
    out, err = proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert first + out == b"one\ntwo\n"


def test_curl_follow_exits_0_when_the_container_is_cancelled_and_the_log_stays(
    api: ApiServer, k8s: Any, node_logs: Any, ca_file: Path
) -> None:
    token, cid, pod = _started(api, k8s, "cancelled")
    node_logs.write("tenant-cancelled", pod, "epoch 1 loss 0.9\n")
    proc = _curl(api, ca_file, token, f"/v1/containers/{cid}/logs?follow=true")
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"epoch 1 loss 0.9\n"
    with api.client(token) as c:
        assert c.delete(f"/v1/containers/{cid}").json()["status"] == "Cancelled"
        out, err = proc.communicate()
        assert proc.returncode == 0, err.decode()
        wait_for(lambda: get_pod(k8s, "tenant-cancelled", pod) is None)
        kept = c.get(f"/v1/containers/{cid}/logs")
    assert kept.status_code == 200 and kept.text == "epoch 1 loss 0.9\n"


def test_a_client_that_leaves_a_follow_early_does_not_break_the_server(
    api: ApiServer, k8s: Any, node_logs: Any
) -> None:
    token, cid, pod = _started(api, k8s, "leaver")
    node_logs.write("tenant-leaver", pod, "hello\n")
    with api.client(token) as c:
        with c.stream("GET", f"/v1/containers/{cid}/logs", params={"follow": "true"}) as stream:
            assert next(stream.iter_lines()) == "hello"
        # the server is still fine, and the same log can be followed again
        assert c.get(f"/v1/containers/{cid}/logs").text == "hello\n"


def test_the_log_of_a_finished_container_is_served_after_its_pod_is_gone(
    api: ApiServer, k8s: Any, node_logs: Any
) -> None:
    token, cid, pod = _started(api, k8s, "kept")
    lines = [f"line {i:04d} " + "x" * 40 + "\n" for i in range(200)]  # ~10 KB, kept: the last 2 KiB
    node_logs.write("tenant-kept", pod, "".join(lines))
    node_logs.end("tenant-kept", pod)  # the container exits
    set_pod_status(k8s, "tenant-kept", pod, TERMINATED_OK)
    with api.client(token) as c:
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Succeeded")
        kc.CoreV1Api(k8s).delete_namespaced_pod(pod, "tenant-kept")
        wait_for(lambda: get_pod(k8s, "tenant-kept", pod) is None)
        r = wait_for(lambda: (r := c.get(f"/v1/containers/{cid}/logs")).status_code == 200 and r)
        tail = c.get(f"/v1/containers/{cid}/logs", params={"tail_lines": 2})
        followed = c.get(f"/v1/containers/{cid}/logs", params={"follow": "true"})
    assert len(r.text.encode()) <= 2048
    assert r.text.endswith(lines[-1]) and r.text.startswith("line ")  # cut on a line boundary
    assert r.text == "".join(lines[-len(r.text.splitlines()) :])
    assert tail.text == lines[-2] + lines[-1]
    assert followed.status_code == 200 and followed.text == r.text
    with api.client() as admin:
        other = new_tenancy(admin, "snoop")
    with api.client(other) as snoop:  # another tenancy's kept log: exactly like a missing one
        theirs = snoop.get(f"/v1/containers/{cid}/logs")
        missing = snoop.get("/v1/containers/00000000000000000000/logs")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace(cid, "X") == missing.json()["detail"].replace("00000000000000000000", "X")


def test_a_preempted_runs_log_is_kept_and_served_by_its_attempt(api: ApiServer, k8s: Any, node_logs: Any) -> None:
    """A container put back in the queue after a preemption: the preempted run's output stays
    readable (``?attempt=1``) after its pod is gone, beside the next run's."""
    with api.client() as admin:
        token = new_tenancy(admin, "rerun")
    mark_tenancy_ready(k8s, "rerun")
    preempted = ended(
        "Failed",
        exit_code=143,
        reason="Error",
        started="2026-01-02T03:00:00Z",
        finished="2026-01-02T03:00:09Z",
        conditions=[{"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted"}],
    )
    with api.client(token) as c:
        body = {"image": "ubuntu", "interruptible": True, "restart_on_preemption": True}
        cid = c.post("/v1/containers", json=body).json()["id"]
        first, second = f"gpucaas-{cid}", f"gpucaas-{cid}-r1"
        wait_for(lambda: get_pod(k8s, "tenant-rerun", first) is not None, what="the first run's pod")
        node_logs.write("tenant-rerun", first, "epoch 1\ncheckpoint saved\n")
        node_logs.end("tenant-rerun", first)
        set_pod_status(k8s, "tenant-rerun", first, preempted)
        wait_for(lambda: get_pod(k8s, "tenant-rerun", first) is None, what="the preempted run's pod deleted")
        assert c.get(f"/v1/containers/{cid}").json()["attempt"] == 2
        assert c.get(f"/v1/containers/{cid}/logs", params={"attempt": 1}).text == "epoch 1\ncheckpoint saved\n"
        assert c.get(f"/v1/containers/{cid}/logs", params={"attempt": 1, "tail_lines": 1}).text == "checkpoint saved\n"
        beyond = c.get(f"/v1/containers/{cid}/logs", params={"attempt": 3})
        assert beyond.status_code == 404 and "on attempt 2" in beyond.json()["detail"]
        assert c.get(f"/v1/containers/{cid}/logs", params={"attempt": 0}).status_code == 422

        wait_for(lambda: get_pod(k8s, "tenant-rerun", second) is not None, what="the second run's pod")
        node_logs.write("tenant-rerun", second, "resumed from checkpoint\n")
        node_logs.end("tenant-rerun", second)
        set_pod_status(k8s, "tenant-rerun", second, TERMINATED_OK)
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Succeeded", what="the second run")
        last = wait_for(lambda: (r := c.get(f"/v1/containers/{cid}/logs")).status_code == 200 and r)
        assert last.text == "resumed from checkpoint\n"
        assert c.get(f"/v1/containers/{cid}/logs", params={"attempt": 2}).text == last.text
        assert c.get(f"/v1/containers/{cid}/logs", params={"attempt": 1}).text == "epoch 1\ncheckpoint saved\n"
    with api.client() as admin:
        other = new_tenancy(admin, "rerun-snoop")
    with api.client(other) as snoop:  # another tenancy's earlier run: exactly like a missing container
        theirs = snoop.get(f"/v1/containers/{cid}/logs", params={"attempt": 1})
        missing = snoop.get("/v1/containers/00000000000000000000/logs", params={"attempt": 1})
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace(cid, "X") == missing.json()["detail"].replace("00000000000000000000", "X")


@pytest.mark.parametrize("answer", [GONE, LOG_FILE_GONE], ids=["container-removed", "log-file-removed"])
def test_a_container_the_queue_stops_keeps_its_log_when_its_node_removes_it_first(
    api: ApiServer, k8s: Any, node_logs: Any, answer: bytes
) -> None:
    """Kueue deletes the pod it preempts, and the node may remove the ended container, or only
    its log file, before the API reads its log, answering with an error line instead: the log
    kept while the pod was stopping stays the container's, never that line."""
    token, cid, pod = _started(api, k8s, "stopped")
    node_logs.write("tenant-stopped", pod, "step 1\nstep 2\n")
    queue_stop = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted"}
    set_pod_status(k8s, "tenant-stopped", pod, {"phase": "Running", "conditions": [queue_stop]})

    def snapshot() -> bool:
        with Session(api.app.state.engine) as session:
            return log_archive.get(session, container_id=cid) is not None

    wait_for(snapshot, what="the log kept while the queue stops the pod")
    node_logs.end("tenant-stopped", pod)
    node_logs.remove("tenant-stopped", pod, answer)  # gone before the API reads it at the end
    ended_by_queue = ended(
        "Failed",
        exit_code=143,
        reason="Error",
        started="2026-01-02T03:00:00Z",
        finished="2026-01-02T03:00:09Z",
        conditions=[queue_stop],
    )
    set_pod_status(k8s, "tenant-stopped", pod, ended_by_queue)
    with api.client(token) as c:
        done = wait_for(lambda: (r := c.get(f"/v1/containers/{cid}").json())["status"] == "Failed" and r)
        assert done["reason"] == "Preempted"
        kc.CoreV1Api(k8s).delete_namespaced_pod(pod, "tenant-stopped")
        wait_for(lambda: get_pod(k8s, "tenant-stopped", pod) is None)
        assert c.get(f"/v1/containers/{cid}/logs").text == "step 1\nstep 2\n"


def test_the_kubelets_answer_for_a_removed_container_is_no_log() -> None:
    assert log_archive.container_gone(GONE.decode() + "\n")
    assert log_archive.container_gone(LOG_FILE_GONE.decode())
    assert not log_archive.container_gone(LOG_FILE_GONE.decode() + "\nand more output")
    assert not log_archive.container_gone("unable to retrieve container logs for containerd://abc\nand more output")
    assert not log_archive.container_gone("step 1\n")


def test_bounded_tail_cuts_on_a_line_boundary() -> None:
    from services.api.store.log_archive import bounded_tail

    cases = [
        ("short\n", 100, ("short\n", False)),
        ("aaaa\nbbbb\ncccc\n", 11, ("bbbb\ncccc\n", True)),
        ("aaaa\nbbbb\ncccc\n", 9, ("cccc\n", True)),
        ("no newline at all", 5, ("t all", True)),
        ("é" * 10, 5, ("éé", True)),
    ]
    for text, limit, expected in cases:
        assert bounded_tail(text, limit) == expected, (text, limit)
