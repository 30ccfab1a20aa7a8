"""caasctl containers list/describe/logs/cancel against the API, whose worker creates the pods
in the Kubernetes cluster (the tenancy controller's and the kubelet's parts done by the test)."""

from __future__ import annotations

from typing import Any

from devtools.waiting import wait_for
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready

from .conftest import Caasctl

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def test_list_describe_logs_cancel(caasctl: Caasctl, api: ApiServer, kube: Any, logs: Any) -> None:
    assert caasctl("tenancies", "create", "cx", "--gpu-quota", "8").exit_code == 0
    assert caasctl("tenancies", "create", "other").exit_code == 0
    with api.client() as admin:
        cid = admin.post("/v1/containers", json={"image": IMAGE, "gpus": 2, "tenancy": "cx"}).json()["id"]
        queued = admin.post("/v1/containers", json={"image": IMAGE, "tenancy": "other"}).json()["id"]
    mark_tenancy_ready(kube, "cx")
    pod = f"gpucaas-{cid}"
    wait_for(lambda: get_pod(kube, "tenant-cx", pod))
    wait_for(lambda: caasctl("containers", "describe", cid, "-o", "json").json()["status"] == "Pending")

    every = caasctl("containers", "list", "-o", "json")
    assert every.exit_code == 0, every.stderr
    assert {c["id"] for c in every.json()} == {cid, queued}
    mine = caasctl("containers", "list", "--tenancy", "cx", "-o", "yaml").yaml()
    assert [(c["id"], c["tenancy"], c["image"], c["gpus"]) for c in mine] == [(cid, "cx", IMAGE, 2)]
    assert [c["id"] for c in caasctl("containers", "list", "--status", "Queued", "-o", "json").json()] == [queued]
    table = caasctl("containers", "list")
    for header in ("ID", "TENANCY", "IMAGE", "GPUs", "STATUS", "EXIT", "NODE", "CREATED"):
        assert header in table.stdout
    line = next(ln for ln in table.stdout.splitlines() if cid in ln)
    assert "cx" in line and "Pending" in line

    described = caasctl("containers", "describe", cid, "-o", "json").json()
    assert described["id"] == cid and described["namespace"] == "tenant-cx" and described["gpus"] == 2
    assert caasctl("containers", "describe", cid, "-o", "yaml").yaml() == described
    text = caasctl("containers", "describe", cid)
    assert text.exit_code == 0 and cid in text.stdout and "tenant-cx" in text.stdout

    logs.write("tenant-cx", pod, "[0] vector add\nTest PASSED\n")
    logs = caasctl("containers", "logs", cid)
    assert logs.exit_code == 0, logs.stderr
    assert logs.stdout.splitlines() == ["[0] vector add", "Test PASSED"]
    later = caasctl("containers", "logs", "--attempt", "2", cid)  # it never ran again
    assert later.exit_code == 1 and later.stderr.startswith("error: 404: ") and "on attempt 1" in later.stderr
    early = caasctl("containers", "logs", queued)  # no pod yet: the API's 409, on one line
    assert early.exit_code == 1 and early.stderr.startswith("error: 409: ") and "no pod yet" in early.stderr

    cancelled = caasctl("containers", "cancel", cid, "-o", "json")
    assert cancelled.exit_code == 0, cancelled.stderr
    assert cancelled.json()["status"] == "Cancelled"
    wait_for(lambda: get_pod(kube, "tenant-cx", pod) is None)  # the worker deletes the pod
    again = caasctl("containers", "cancel", cid, "--no-wait", "-o", "json")  # idempotent
    assert again.exit_code == 0 and again.json()["status"] == "Cancelled"

    missing = caasctl("containers", "describe", "no-such-container")
    assert missing.exit_code == 1 and missing.stdout == ""
    assert missing.stderr.strip() == "error: 404: container 'no-such-container' not found"


def test_follow_exits_0_and_admins_see_secret_names_events_and_exit_codes(
    caasctl: Caasctl, api: ApiServer, kube: Any, logs: Any
) -> None:
    from tests.api.conftest import new_tenancy
    from tests.api.kube_helpers import now, set_pod_status

    with api.client() as admin:
        token = new_tenancy(admin, "shown")
    mark_tenancy_ready(kube, "shown")
    with api.client(token) as tenant:
        assert tenant.post("/v1/secrets", json={"name": "hf", "value": "hf_never_shown"}).status_code == 201
        assert (
            tenant.post(
                "/v1/registry-credentials",
                json={"server": "nvcr.io", "username": "$oauthtoken", "password": "nvapi-never"},
            ).status_code
            == 201
        )
        cid = tenant.post("/v1/containers", json={"image": IMAGE, "env": {"HF_TOKEN": {"secret": "hf"}}}).json()["id"]
    pod = f"gpucaas-{cid}"
    wait_for(lambda: get_pod(kube, "tenant-shown", pod))
    logs.write("tenant-shown", pod, "Test PASSED\n")
    set_pod_status(
        kube,
        "tenant-shown",
        pod,
        {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": False,
                    "restartCount": 0,
                    "image": IMAGE,
                    "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now()}},
                }
            ],
        },
    )
    followed = caasctl("containers", "logs", "-f", cid)
    assert followed.exit_code == 0, followed.stderr
    assert followed.stdout.splitlines() == ["Test PASSED"]
    wait_for(lambda: caasctl("containers", "describe", cid, "-o", "json").json()["exit_code"] == 0)
    table = caasctl("containers", "list", "--tenancy", "shown")
    assert "EXIT" in table.stdout
    secrets = caasctl("secrets", "list", "shown", "-o", "json")
    creds = caasctl("registry-credentials", "list", "shown", "-o", "json")
    assert [s["name"] for s in secrets.json()] == ["hf"]
    assert [(c["server"], c["username"]) for c in creds.json()] == [("nvcr.io", "$oauthtoken")]
    events = caasctl("containers", "events", cid, "-o", "json")
    assert [e["kind"] for e in events.json()][0] == "queued" and events.json()[-1]["kind"] == "finished"
    described = caasctl("containers", "describe", cid, "-o", "json")
    for out in (secrets, creds, events, described):
        assert "never" not in out.stdout
    assert described.json()["env"] == {"HF_TOKEN": {"secret": "hf"}}
    assert caasctl("secrets", "delete", "shown", "hf").exit_code == 0
    gone = caasctl("secrets", "delete", "shown", "hf")
    assert gone.exit_code == 1 and gone.stderr.strip() == "error: 404: secret 'hf' not found"
    assert caasctl("registry-credentials", "delete", "shown", "nvcr.io").exit_code == 0
    assert caasctl("registry-credentials", "list", "shown", "-o", "json").json() == []
