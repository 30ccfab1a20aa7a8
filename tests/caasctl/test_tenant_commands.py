"""caasctl's tenant commands (run, ps, logs, cancel) with a tenant's own token.

Against the API, whose worker creates the pods in the Kubernetes cluster; the tenancy
controller's and the kubelet's parts are played by the test.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

from devtools.waiting import wait_for
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready, set_pod_status

from .conftest import Caasctl, Run

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def tenant_token(caasctl: Caasctl, tenancy: str) -> str:
    assert caasctl("tenancies", "create", tenancy, "--gpu-quota", "8").exit_code == 0
    issued = caasctl("tokens", "issue", tenancy, "-o", "json")
    assert issued.exit_code == 0, issued.stderr
    return issued.json()["token"]


def test_a_tenant_runs_lists_reads_and_cancels_with_its_own_token(
    caasctl: Caasctl, api: ApiServer, kube: Any, logs: Any
) -> None:
    token = tenant_token(caasctl, "tt")
    me = {"GPUCAAS_TOKEN": token}
    ran = caasctl(
        "run",
        "--detach",
        IMAGE,
        "--gpus",
        "2",
        "-e",
        "MODE=train",
        "--timeout",
        "600",
        "--",
        "python",
        "train.py",
        "--epochs",
        "3",
        env=me,
    )
    assert ran.exit_code == 0, ran.stderr
    cid = ran.stdout.strip()
    with api.client() as admin:
        c = admin.get(f"/v1/containers/{cid}").json()
    assert (c["tenancy"], c["gpus"], c["image"], c["timeout_seconds"]) == ("tt", 2, IMAGE, 600)
    assert c["command"] == ["python", "train.py", "--epochs", "3"]  # everything after -- is the command

    listed = caasctl("ps", "-o", "json", env=me)
    assert listed.exit_code == 0 and [r["id"] for r in listed.json()] == [cid]
    table = caasctl("ps", env=me)
    assert cid in table.stdout and "STATUS" in table.stdout

    mark_tenancy_ready(kube, "tt")
    pod = f"gpucaas-{cid}"
    wait_for(lambda: get_pod(kube, "tenant-tt", pod))
    logs.write("tenant-tt", pod, "epoch 1\nepoch 2\n")
    logs = caasctl("logs", cid, env=me)
    assert logs.exit_code == 0 and logs.stdout.splitlines() == ["epoch 1", "epoch 2"]

    cancelled = caasctl("cancel", cid, env=me)
    assert cancelled.exit_code == 0 and cancelled.stdout.strip() == cid
    assert caasctl("ps", "-o", "json", "--status", "Cancelled", env=me).json()[0]["id"] == cid

    spot = caasctl("run", "--detach", "--interruptible", "--restart-on-preemption", IMAGE, env=me)
    assert spot.exit_code == 0, spot.stderr
    with api.client() as admin:
        shown = admin.get(f"/v1/containers/{spot.stdout.strip()}").json()
    assert shown["interruptible"] is True and shown["restart_on_preemption"] is True
    table = caasctl("ps", env=me).stdout
    assert "CLASS" in table and "interruptible" in table and "standard" in table  # the spot one, the cancelled one


def test_admin_commands_refuse_a_tenant_token_in_one_line(caasctl: Caasctl) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "ta")}
    for args in (["tenancies", "list"], ["containers", "list"], ["leases"]):
        got = caasctl(*args, env=me)
        assert got.exit_code == 1 and got.stdout == ""
        assert got.stderr.strip() == (
            "error: this is an admin command and the token in use is not an admin token "
            "(a tenant token runs: run, ps, logs, exec, cancel, usage, secrets, registry, webhooks, "
            "tokens, audit)"
        )


def test_bad_input_is_a_usage_error(caasctl: Caasctl) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "tb")}
    bad_env = caasctl("run", IMAGE, "-e", "NOEQUALS", env=me)
    assert bad_env.exit_code == 2 and "NAME=VALUE" in bad_env.stderr
    too_many = caasctl("run", IMAGE, "--gpus", "9", env=me)
    assert too_many.exit_code == 2


def test_version_and_completion(caasctl: Caasctl, monkeypatch: pytest.MonkeyPatch) -> None:
    import shellingham

    from gpucaas import __version__

    v = caasctl("--version")
    assert v.exit_code == 0 and v.stdout.strip() == f"caasctl {__version__}"
    # Typer finds the shell among the process's ancestors; a test run started in the
    # background has none, so the user's bash is given here
    monkeypatch.setattr(shellingham, "detect_shell", lambda: ("bash", "/bin/bash"))
    shown = caasctl("--show-completion", env={"SHELL": "/bin/bash"})
    assert shown.exit_code == 0 and "caasctl" in shown.stdout


def test_run_follow_streams_the_log_and_exits_with_the_containers_code(
    caasctl: Caasctl, api: ApiServer, kube: Any, logs: Any
) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "tf")}
    mark_tenancy_ready(kube, "tf")
    outcome: dict[str, Run] = {}

    def run() -> None:
        outcome["run"] = caasctl("run", IMAGE, "--follow", "--", "sh", "-c", "exit 3", env=me)

    t = threading.Thread(target=run)
    t.start()
    pods: list[str] = []

    def our_pod() -> bool:
        pods[:] = [p.metadata.name for p in client.CoreV1Api(kube).list_namespaced_pod("tenant-tf").items]
        return bool(pods)

    wait_for(our_pod, 60, what="the pod of `caasctl run --follow`")
    pod = pods[0]
    started = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "main",
                "ready": True,
                "restartCount": 0,
                "image": IMAGE,
                "imageID": "",
                "state": {"running": {"startedAt": "2026-11-22T10:00:00Z"}},
            }
        ],
    }
    set_pod_status(kube, "tenant-tf", pod, started)
    logs.write("tenant-tf", pod, "starting\nfailing on purpose\n")
    ended = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": IMAGE,
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 3,
                        "reason": "Error",
                        "startedAt": "2026-11-22T10:00:00Z",
                        "finishedAt": "2026-11-22T10:00:05Z",
                    }
                },
            }
        ],
    }
    set_pod_status(kube, "tenant-tf", pod, ended)
    t.join(120)
    assert not t.is_alive()
    result = outcome["run"]
    assert "starting" in result.stdout and "failing on purpose" in result.stdout
    assert result.exit_code in (1, 3)  # 3 once the API reports the container's exit_code


def test_listings_follow_the_page_cursor_to_the_last_page(caasctl: Caasctl, api: ApiServer, ca_file: Any) -> None:
    """The API pages its listings (50 rows by default); caasctl follows ``next`` so that
    ``ps`` and ``containers list`` never stop at the first page."""
    from pydantic import SecretStr

    from gpucaas.caasctl.client import Config, RestClient

    token = tenant_token(caasctl, "pager")
    me = {"GPUCAAS_TOKEN": token}
    ids = []
    for _ in range(5):
        ran = caasctl("run", "--detach", IMAGE, "--gpus", "1", env=me)
        assert ran.exit_code == 0, ran.stderr
        ids.append(ran.stdout.strip())
    rest = RestClient(Config(url=api.base_url, token=SecretStr(token), ca_cert=str(ca_file)))
    try:
        pages: list[int] = []
        original = rest.get

        def counting_get(path: str, **params: Any) -> Any:
            page = original(path, **params)
            pages.append(len(page["data"]))
            return page

        rest.get = counting_get  # type: ignore[method-assign]
        rows = rest.get_all("/v1/containers", page_size=2)
    finally:
        rest.close()
    assert [r["id"] for r in rows] == list(reversed(ids))  # newest first, every row once
    assert pages == [2, 2, 1]
    listed = caasctl("ps", "-o", "json", env=me)
    assert sorted(r["id"] for r in listed.json()) == sorted(ids)
    admin_listed = caasctl("containers", "list", "--tenancy", "pager", "-o", "json")
    assert sorted(r["id"] for r in admin_listed.json()) == sorted(ids)
