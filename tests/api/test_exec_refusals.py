"""What the exec WebSocket refuses, before the upgrade, with the status and body of every route.

The sessions themselves (output, exit code, terminal) run on real nodes:
``tests/e2e/test_exec.py``. Here the pods have no kubelet, so every refusal the
API decides itself is checked: protocol, token, scope, input, another tenancy, a container
that is not running, and the API server's own refusal of a pod no node runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import RUNNING, mark_tenancy_ready, set_pod_status


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def refused(
    api: ApiServer,
    token: str | None,
    cid: str,
    query: str = "command=true",
    protocols: tuple[str, ...] = ("v5.channel.k8s.io",),
) -> tuple[int, dict[str, Any]]:
    """The status and body of a refused exec upgrade (the test fails if it was accepted)."""
    status, body = api.refused_upgrade(f"/v1/containers/{cid}/exec?{query}", token, protocols)
    return status, json.loads(body or b"{}")


def test_every_refusal_before_the_upgrade_says_why(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "execs")
        stranger = new_tenancy(admin, "strangers")
    mark_tenancy_ready(k8s, "execs")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending")
        reader = c.post("/v1/tokens", json={"name": "dash", "scope": "read"}).json()["token"]

    status, body = refused(api, token, cid, protocols=("channel.k8s.io",))
    assert status == 400 and "v5.channel.k8s.io" in body["detail"]
    status, body = refused(api, None, cid)
    assert status == 401 and body["code"] == "unauthorized"
    status, body = refused(api, reader, cid)
    assert status == 403 and "'submit'" in body["detail"]
    status, body = refused(api, token, cid, query="stdin=true")
    assert status == 422 and body["detail"].startswith("query.command")
    status, body = refused(api, token, cid, query="command=printf&command=%1B%5B2J")  # ESC: refused, newline is not
    assert status == 422 and body["detail"].startswith("query.command: control characters")
    status, body = refused(api, token, cid, query="command=sh&tty=maybe")
    assert status == 422 and body["detail"].startswith("query.tty")
    status, body = refused(api, token, cid)
    assert status == 409 and "Pending" in body["detail"] and "Running" in body["detail"]

    # another tenancy's container reads exactly as one that does not exist
    theirs = refused(api, stranger, cid)
    missing = refused(api, stranger, "0" * len(cid))
    assert theirs[0] == missing[0] == 404
    assert theirs[1]["detail"].replace(cid, "ID") == missing[1]["detail"].replace("0" * len(cid), "ID")

    # plain HTTP: 426 for the owner, the same 404 for a stranger
    with api.client(token) as c:
        r = c.get(f"/v1/containers/{cid}/exec", params={"command": "true"})
        assert r.status_code == 426 and "WebSocket" in r.json()["detail"]
    with api.client(stranger) as c:
        assert c.get(f"/v1/containers/{cid}/exec", params={"command": "true"}).status_code == 404


def test_a_pod_no_node_runs_is_refused_by_the_api_server_and_said_plainly(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "nohost")
    mark_tenancy_ready(k8s, "nohost")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending")
        set_pod_status(k8s, "tenant-nohost", f"gpucaas-{cid}", RUNNING)  # no kubelet: no node behind it
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Running")
    status, body = refused(api, token, cid)
    assert status == 409 and "no longer running" in body["detail"]
    with api.client(token) as c:  # nothing started: nothing in the audit trail
        assert not c.get("/v1/audit", params={"action": "container.exec"}).json()["data"]
