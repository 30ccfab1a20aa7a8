"""Tenant secrets and registry credentials: write-only values kept as Kubernetes Secrets in
the tenant namespace (never in the API's database, never returned), used by pods through
``secretKeyRef`` and ``imagePullSecrets``; per tenancy, 404 for everyone else."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as kc

from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready

HF_VALUE = "hf_SECRETVALUE_4c1b9d0e7a"
NGC_KEY = "nvapi-NGCKEY-93ac5e1f"


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def _tenant(api: ApiServer, k8s: Any, name: str) -> str:
    with api.client() as admin:
        token = new_tenancy(admin, name)
    mark_tenancy_ready(k8s, name)
    return token


def _secret_obj(k8s: Any, ns: str, name: str) -> dict[str, Any]:
    return k8s.sanitize_for_serialization(kc.CoreV1Api(k8s).read_namespaced_secret(name, ns))


def _no_value_in(*responses: httpx.Response) -> None:
    for r in responses:
        assert HF_VALUE not in r.text and NGC_KEY not in r.text, r.text


def test_a_secret_is_write_only_and_lives_in_the_tenant_namespace(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "keeper")
    with api.client(token) as c:
        created = c.post("/v1/secrets", json={"name": "hf", "value": HF_VALUE})
        again = c.post("/v1/secrets", json={"name": "hf", "value": "other"})
        listed = c.get("/v1/secrets")
        one = c.get("/v1/secrets/hf")
        replaced = c.put("/v1/secrets/hf", json={"value": HF_VALUE + "-2"})
        _no_value_in(created, again, listed, one, replaced)
        assert created.status_code == 201 and created.json()["name"] == "hf" and created.json()["created_at"]
        assert again.status_code == 409 and again.json()["detail"].startswith("name: secret 'hf' already exists")
        assert [s["name"] for s in listed.json()["data"]] == ["hf"] and listed.json()["count"] == 1
        assert set(one.json()) == {"name", "created_at"} and replaced.status_code == 200
        obj = _secret_obj(k8s, "tenant-keeper", "gpucaas-secret-hf")
        assert obj["type"] == "Opaque"
        assert base64.b64decode(obj["data"]["value"]).decode() == HF_VALUE + "-2"
        assert c.delete("/v1/secrets/hf").status_code == 204
        gone = c.delete("/v1/secrets/hf")
        assert gone.status_code == 404 and gone.json()["detail"] == "secret 'hf' not found"
        assert c.get("/v1/secrets").json() == {"data": [], "count": 0}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad_Name", "value": "x"}, "name"),
        ({"name": "hf", "value": ""}, "value"),
        ({"name": "hf", "value": "a\x00b"}, "body: value"),  # the API-wide control-character guard
        ({"name": "hf"}, "value"),
        ({"name": "hf", "value": "x", "extra": 1}, "body"),
    ],
    ids=["bad-name", "empty-value", "nul-byte", "no-value", "unknown-field"],
)
def test_bad_secret_requests_name_the_field(api: ApiServer, k8s: Any, body: dict, field: str) -> None:
    token = _tenant(api, k8s, "strict")
    with api.client(token) as c:
        r = c.post("/v1/secrets", json=body)
    assert r.status_code == 422 and r.json()["detail"].startswith(f"{field}:"), r.text


def test_env_from_a_secret_reaches_the_pod_and_no_value_is_echoed(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "envs")
    with api.client(token) as c:
        assert c.post("/v1/secrets", json={"name": "hf", "value": HF_VALUE}).status_code == 201
        missing = c.post("/v1/containers", json={"image": "ubuntu", "env": {"HF_TOKEN": {"secret": "nope"}}})
        assert missing.status_code == 422
        assert missing.json()["detail"].startswith("env.HF_TOKEN: secret 'nope' not found")
        bad_ref = c.post("/v1/containers", json={"image": "ubuntu", "env": {"HF_TOKEN": {"secrets": "hf"}}})
        assert bad_ref.status_code == 422 and "env.HF_TOKEN" in bad_ref.json()["detail"]
        r = c.post("/v1/containers", json={"image": "ubuntu", "env": {"HF_TOKEN": {"secret": "hf"}, "EPOCHS": "3"}})
        assert r.status_code == 202, r.text
        cid = r.json()["id"]
        shown = [r, c.get(f"/v1/containers/{cid}"), c.get("/v1/containers")]
        for resp in shown:
            body = resp.json()
            row = body["data"][0] if "data" in body else body
            assert row["env"] == {"HF_TOKEN": {"secret": "hf"}, "EPOCHS": "<redacted>"}
        _no_value_in(*shown)
        pod = wait_for(lambda: get_pod(k8s, "tenant-envs", f"gpucaas-{cid}"))
    env = pod["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "gpucaas-secret-hf", "key": "value"}}},
        {"name": "EPOCHS", "value": "3"},
    ]


def test_a_secret_deleted_after_submission_fails_the_container_with_the_reason(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "racy")  # not Ready yet: the submission waits in the queue
    with api.client(token) as c:
        _namespace_for(k8s, "racy")  # the controller's first step, without marking it Ready
        assert c.post("/v1/secrets", json={"name": "hf", "value": HF_VALUE}).status_code == 201
        cid = c.post("/v1/containers", json={"image": "ubuntu", "env": {"T": {"secret": "hf"}}}).json()["id"]
        assert c.delete("/v1/secrets/hf").status_code == 204
        mark_tenancy_ready(k8s, "racy")
        failed = wait_for(lambda: (s := c.get(f"/v1/containers/{cid}").json())["status"] == "Failed" and s)
    assert failed["message"].startswith("env.T: secret 'hf' not found")
    assert get_pod(k8s, "tenant-racy", f"gpucaas-{cid}") is None


def _namespace_for(k8s: Any, tenancy: str) -> bool:
    core = kc.CoreV1Api(k8s)
    try:
        core.read_namespace(f"tenant-{tenancy}")
        return True
    except kc.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
    core.create_namespace({"metadata": {"name": f"tenant-{tenancy}"}})
    return True


def test_the_database_never_holds_a_secret_value(
    kubeconfig: Path, serve: Callable[..., ApiServer], sqlite_url: str, k8s: Any
) -> None:
    api = serve(sqlite_url, kubeconfig)
    token = _tenant(api, k8s, "dbcheck")
    with api.client(token) as c:
        assert c.post("/v1/secrets", json={"name": "hf", "value": HF_VALUE}).status_code == 201
        assert (
            c.post(
                "/v1/registry-credentials", json={"server": "nvcr.io", "username": "$oauthtoken", "password": NGC_KEY}
            ).status_code
            == 201
        )
        cid = c.post(
            "/v1/containers", json={"image": "nvcr.io/acme/train:1", "env": {"HF_TOKEN": {"secret": "hf"}}}
        ).json()["id"]
        wait_for(lambda: get_pod(k8s, "tenant-dbcheck", f"gpucaas-{cid}"))
    api.stop()  # checkpoint: everything the API wrote is on disk
    db_file = Path(sqlite_url.removeprefix("sqlite:///"))
    files = [p for p in db_file.parent.iterdir() if p.name.startswith(db_file.name)]
    assert db_file in files
    for path in files:
        data = path.read_bytes()
        for needle in (HF_VALUE, NGC_KEY):
            assert needle.encode() not in data, f"{needle} found in {path.name}"
            assert base64.b64encode(needle.encode()) not in data


def test_registry_credentials_become_image_pull_secrets(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "private")
    with api.client(token) as c:
        r = c.post(
            "/v1/registry-credentials", json={"server": "nvcr.io", "username": "$oauthtoken", "password": NGC_KEY}
        )
        again = c.post(
            "/v1/registry-credentials",
            json={"server": "https://nvcr.io/", "username": "$oauthtoken", "password": NGC_KEY + "x"},
        )
        c.post("/v1/registry-credentials", json={"server": "ghcr.io", "username": "bot", "password": "ghp_x"})
        listed = c.get("/v1/registry-credentials")
        _no_value_in(r, again, listed)
        assert r.status_code == 201 and (r.json()["server"], r.json()["username"]) == ("nvcr.io", "$oauthtoken")
        assert again.status_code == 201  # the same server again replaces it
        assert [(x["server"], x["username"]) for x in listed.json()["data"]] == [
            ("ghcr.io", "bot"),
            ("nvcr.io", "$oauthtoken"),
        ]
        assert "password" not in listed.json()["data"][0]
        cid = c.post("/v1/containers", json={"image": "nvcr.io/nvidia/pytorch:24.05-py3"}).json()["id"]
        pod = wait_for(lambda: get_pod(k8s, "tenant-private", f"gpucaas-{cid}"))
        names = [s["name"] for s in pod["spec"]["imagePullSecrets"]]
        objs = [_secret_obj(k8s, "tenant-private", n) for n in names]
        assert all(o["type"] == "kubernetes.io/dockerconfigjson" for o in objs)
        auths = {}
        for o in objs:
            auths.update(json.loads(base64.b64decode(o["data"][".dockerconfigjson"]))["auths"])
        assert set(auths) == {"nvcr.io", "ghcr.io"}
        assert auths["nvcr.io"]["username"] == "$oauthtoken" and auths["nvcr.io"]["password"] == NGC_KEY + "x"
        assert base64.b64decode(auths["nvcr.io"]["auth"]).decode() == f"$oauthtoken:{NGC_KEY}x"
        assert c.delete("/v1/registry-credentials/nvcr.io").status_code == 204
        assert c.delete("/v1/registry-credentials/nvcr.io").status_code == 404
        assert [x["server"] for x in c.get("/v1/registry-credentials").json()["data"]] == ["ghcr.io"]
        bad = c.post("/v1/registry-credentials", json={"server": "nvcr.io/v2/x", "username": "u", "password": "p"})
        assert bad.status_code == 422 and bad.json()["detail"].startswith("server:")
        colon = c.post("/v1/registry-credentials", json={"server": "nvcr.io", "username": "a:b", "password": "p"})
        assert colon.status_code == 422 and colon.json()["detail"].startswith("username:")


def test_admins_name_the_tenancy(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "managed")
    with api.client(token) as c:
        c.post("/v1/secrets", json={"name": "wandb", "value": HF_VALUE})
    with api.client() as admin:
        nameless = admin.get("/v1/secrets")
        listed = admin.get("/v1/secrets", params={"tenancy": "managed"})
        nowhere = admin.get("/v1/secrets", params={"tenancy": "nowhere"})
    assert nameless.status_code == 422 and nameless.json()["detail"].startswith("tenancy:")
    assert [s["name"] for s in listed.json()["data"]] == ["wandb"]
    assert nowhere.status_code == 404
    _no_value_in(listed)
