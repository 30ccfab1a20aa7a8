"""caasctl's tenant commands for secrets, registry logins and webhooks, with a tenant token.

Against the API (its worker creating pods in the Kubernetes cluster) with a real HTTP
receiver on 127.0.0.1 (``webhook_allow_loopback``, as in the sandbox)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.waiting import wait_for
from services.api.webhooks.signing import verify
from tests.api.harness import ApiServer
from tests.api.kube_helpers import mark_tenancy_ready, set_pod_status
from tests.api.webhook_receiver import Receiver

from .conftest import Caasctl, start_api


@pytest.fixture(scope="module")
def api(ca: Any, kcfg: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The module's API, allowing webhooks to loopback (the receiver runs on 127.0.0.1)."""
    server = start_api(ca, kcfg, tmp_path_factory, webhook_allow_loopback=True, webhook_retry_first_seconds=0.2)
    try:
        yield server
    finally:
        server.stop()


def tenant(caasctl: Caasctl, kube: Any, name: str) -> dict[str, str]:
    assert caasctl("tenancies", "create", name, "--gpu-quota", "8").exit_code == 0
    issued = caasctl("tokens", "issue", name, "-o", "json")
    assert issued.exit_code == 0, issued.stderr
    mark_tenancy_ready(kube, name)
    return {"GPUCAAS_TOKEN": issued.json()["token"]}


def _secret_data(kube: Any, ns: str, name: str) -> dict[str, str]:
    data = client.CoreV1Api(kube).read_namespaced_secret(name, ns).data
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_secrets_create_list_delete_with_the_value_from_stdin(caasctl: Caasctl, kube: Any) -> None:
    me = tenant(caasctl, kube, "sk")
    made = caasctl("secrets", "create", "hf", input="hf_SECRET_1234\n", env=me)
    assert made.exit_code == 0, made.stderr
    assert "hf_SECRET_1234" not in made.stdout
    assert _secret_data(kube, "tenant-sk", "gpucaas-secret-hf") == {"value": "hf_SECRET_1234"}
    again = caasctl("secrets", "create", "hf", input="other\n", env=me)
    assert again.exit_code == 1 and again.stderr.startswith("error: 409: name: secret 'hf' already exists")
    assert caasctl("secrets", "create", "hf", "--replace", input="hf_NEW\n", env=me).exit_code == 0
    assert _secret_data(kube, "tenant-sk", "gpucaas-secret-hf") == {"value": "hf_NEW"}
    listed = caasctl("secrets", "list", "-o", "json", env=me)
    assert [s["name"] for s in listed.json()] == ["hf"] and "hf_NEW" not in listed.stdout
    assert caasctl("secrets", "list", "sk", "-o", "json").json() == listed.json()  # the admin's form still works
    assert caasctl("secrets", "delete", "hf", env=me).exit_code == 0
    gone = caasctl("secrets", "delete", "hf", env=me)
    assert gone.exit_code == 1 and gone.stderr.strip() == "error: 404: secret 'hf' not found"
    assert caasctl("secrets", "list", "-o", "json", env=me).json() == []
    empty = caasctl("secrets", "create", "hf", input="", env=me)
    assert empty.exit_code == 1 and empty.stderr.strip() == "error: no value on standard input"


def test_registry_login_stores_a_dockerconfigjson_and_logout_removes_it(caasctl: Caasctl, kube: Any) -> None:
    me = tenant(caasctl, kube, "rl")
    login = caasctl(
        "registry", "login", "nvcr.io", "--username", "$oauthtoken", "--password-stdin", input="nvapi-KEY-42\n", env=me
    )
    assert login.exit_code == 0, login.stderr
    assert login.stdout.strip() == "Login stored for nvcr.io as $oauthtoken" and "nvapi" not in login.stdout
    listed = caasctl("registry", "list", "-o", "json", env=me).json()
    assert [(r["server"], r["username"]) for r in listed] == [("nvcr.io", "$oauthtoken")]
    secrets = (
        client.CoreV1Api(kube)
        .list_namespaced_secret("tenant-rl", label_selector="gpucaas.dev/secret-kind=registry-credential")
        .items
    )
    config = json.loads(base64.b64decode(secrets[0].data[".dockerconfigjson"]))
    assert config["auths"]["nvcr.io"]["password"] == "nvapi-KEY-42"
    assert caasctl("registry", "logout", "nvcr.io", env=me).exit_code == 0
    assert caasctl("registry", "list", "-o", "json", env=me).json() == []
    bad = caasctl("registry", "login", "https://x/y/z", "-u", "me", "--password-stdin", input="pw\n", env=me)
    assert bad.exit_code == 1 and "server" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_webhooks_create_list_deliveries_resend_delete(caasctl: Caasctl, kube: Any) -> None:
    me = tenant(caasctl, kube, "wk")
    receiver = Receiver().start()
    try:
        made = caasctl(
            "webhooks",
            "create",
            receiver.url,
            "-e",
            "container.running",
            "-e",
            "container.cancelled",
            "--description",
            "ci",
            "-o",
            "json",
            env=me,
        )
        assert made.exit_code == 0, made.stderr
        hook = made.json()
        assert hook["events"] == ["container.running", "container.cancelled"] and hook["secret"].startswith("whsec_")
        table = caasctl("webhooks", "list", env=me)
        assert hook["id"] in table.stdout and hook["secret"] not in table.stdout

        ran = caasctl("run", "--detach", "busybox:1.36", "--gpus", "2", "--", "sleep", "3", env=me)
        cid = ran.stdout.strip()
        pod = f"gpucaas-{cid}"
        wait_for(lambda: caasctl("ps", "-o", "json", env=me).json()[0]["status"] == "Pending", what="the pod")
        set_pod_status(kube, "tenant-wk", pod, {"phase": "Running", "startTime": "2026-01-02T03:00:00Z"})
        wait_for(lambda: receiver.received("container.running"), what="container.running")
        assert caasctl("cancel", cid, env=me).exit_code == 0
        got = wait_for(lambda: receiver.received("container.cancelled"), what="container.cancelled")
        assert verify(hook["secret"], got[0].headers, got[0].body)

        def both_delivered() -> list[dict[str, Any]] | None:
            rows = caasctl("webhooks", "deliveries", hook["id"], "--status", "delivered", "-o", "json", env=me).json()
            return rows if len(rows) == 2 else None

        rows = wait_for(both_delivered, what="two delivered")
        assert {r["event_type"] for r in rows} == {"container.running", "container.cancelled"}
        table = caasctl("webhooks", "deliveries", hook["id"], env=me)
        assert table.exit_code == 0 and "delivered" in table.stdout
        resent = caasctl("webhooks", "resend", hook["id"], rows[0]["id"], "-o", "json", env=me)
        assert resent.exit_code == 0 and resent.json()["status"] == "pending"
        wait_for(lambda: len(receiver.received()) == 3, what="the resend")

        assert caasctl("webhooks", "delete", hook["id"], env=me).stdout.strip() == hook["id"]
        assert caasctl("webhooks", "list", "-o", "json", env=me).json() == []
        refused = caasctl("webhooks", "create", "http://169.254.169.254/latest", env=me)
        assert refused.exit_code == 1 and refused.stderr.startswith("error: 422: url: 169.254.169.254 is a link-local")
        assert len(refused.stderr.strip().splitlines()) == 1
    finally:
        receiver.stop()
