"""Tokens and tenancies: a tenant token acts only within its tenancy; another tenancy's
things answer exactly like things that do not exist. Admin endpoints need an admin token."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import httpx
import pytest

from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer

IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


def _two_tenants(server: ApiServer, admin: httpx.Client) -> dict:
    """Tenancies alpha and beta, each with a token and one (Queued) container."""
    out = {}
    for name in ("alpha", "beta"):
        token = new_tenancy(admin, name)
        with server.client(token) as c:
            r = c.post("/v1/containers", json={"image": IMAGE})
            assert r.status_code == 202, r.text
            out[name] = {"token": token, "container": r.json()["id"]}
    return out


@pytest.fixture
def two_tenants(api_down: ApiServer, admin: httpx.Client) -> dict:
    return _two_tenants(api_down, admin)


@dataclass(frozen=True)
class Probed:
    server: ApiServer
    tenants: dict


@pytest.fixture(scope="module")
def probed(module_api_on_both: ApiServer) -> Probed:
    """alpha and beta on the server of the probe matrices below, one per database backend,
    shared: a probe that is refused changes nothing, and each checks that beta was left untouched."""
    with module_api_on_both.client() as admin:
        return Probed(module_api_on_both, _two_tenants(module_api_on_both, admin))


def _scrub(body: dict, secret_id: str) -> dict:
    return {k: str(v).replace(secret_id, "<id>") for k, v in body.items()}


CONTAINER_ENDPOINTS = [
    ("GET", "/v1/containers/{id}"),
    ("DELETE", "/v1/containers/{id}"),
    ("GET", "/v1/containers/{id}/logs"),
    ("GET", "/v1/containers/{id}/logs?follow=true"),
    ("GET", "/v1/containers/{id}/exec?command=sh"),  # the exec WebSocket asked over plain HTTP
]


@pytest.mark.parametrize(("method", "path"), CONTAINER_ENDPOINTS, ids=[f"{m} {p}" for m, p in CONTAINER_ENDPOINTS])
def test_other_tenancys_container_is_not_found(probed: Probed, method: str, path: str) -> None:
    beta_id = probed.tenants["beta"]["container"]
    with probed.server.client(probed.tenants["alpha"]["token"]) as alpha:
        theirs = alpha.request(method, path.format(id=beta_id))
        missing = alpha.request(method, path.format(id="00000000000000000000"))
    assert theirs.status_code == 404 and missing.status_code == 404
    assert _scrub(theirs.json(), beta_id) == _scrub(missing.json(), "00000000000000000000")
    with probed.server.client() as admin:  # untouched
        assert admin.get(f"/v1/containers/{beta_id}").json()["status"] == "Queued"


def test_other_tenancys_container_is_not_found_by_the_exec_websocket(api_down: ApiServer, two_tenants: dict) -> None:
    def refusal(cid: str) -> tuple[int, str]:
        status, body = api_down.refused_upgrade(
            f"/v1/containers/{cid}/exec?command=sh", two_tenants["alpha"]["token"], ("v5.channel.k8s.io",)
        )
        return status, body.decode().replace(cid, "<id>")

    assert refusal(two_tenants["beta"]["container"]) == refusal("00000000000000000000")
    assert refusal("00000000000000000000")[0] == 404


def test_other_tenancys_endpoint_is_not_found_by_the_ingress_question(api_down: ApiServer, two_tenants: dict) -> None:
    """``/v1/endpoint-auth`` (the ingress controller asks it for private endpoints): another
    tenancy's container and port answer exactly as a container that does not exist."""
    domain = api_down.app.state.settings.endpoint_domain

    def asked(cid: str) -> tuple[int, str]:
        with api_down.client(two_tenants["alpha"]["token"]) as alpha:
            r = alpha.get("/v1/endpoint-auth", headers={"X-Forwarded-Host": f"{cid}-8080.{domain}"})
        return r.status_code, r.text.replace(cid, "<id>")

    assert asked(two_tenants["beta"]["container"]) == asked("00000000000000000000")
    assert asked("00000000000000000000")[0] == 404


def test_submitting_into_another_tenancy_is_not_found(api_down: ApiServer, two_tenants: dict) -> None:
    with api_down.client(two_tenants["alpha"]["token"]) as alpha:
        other = alpha.post("/v1/containers", json={"image": IMAGE, "tenancy": "beta"})
        nowhere = alpha.post("/v1/containers", json={"image": IMAGE, "tenancy": "nowhere"})
        own = alpha.post("/v1/containers", json={"image": IMAGE, "tenancy": "alpha"})
    assert other.status_code == nowhere.status_code == 404
    assert other.json()["detail"].replace("beta", "X") == nowhere.json()["detail"].replace("nowhere", "X")
    assert own.status_code == 202 and own.json()["tenancy"] == "alpha"


def test_lists_show_only_the_callers_containers(api_down: ApiServer, two_tenants: dict) -> None:
    with api_down.client(two_tenants["alpha"]["token"]) as alpha:
        mine = alpha.get("/v1/containers").json()
    assert [c["id"] for c in mine["data"]] == [two_tenants["alpha"]["container"]]
    assert mine["count"] == 1
    with api_down.client() as admin:
        everything = admin.get("/v1/admin/containers").json()
        only_beta = admin.get("/v1/admin/containers", params={"tenancy": "beta"}).json()
    assert everything["count"] == 2
    assert [c["id"] for c in only_beta["data"]] == [two_tenants["beta"]["container"]]


ADMIN_ENDPOINTS = [
    ("POST", "/v1/admin/tenancies", {"name": "gamma"}),
    ("GET", "/v1/admin/tenancies", None),
    ("GET", "/v1/admin/tenancies/beta", None),
    ("PATCH", "/v1/admin/tenancies/beta", {"gpu_quota": 64}),
    # a tenant can neither give itself a guarantee or a heavier weight, nor read another's
    ("POST", "/v1/admin/tenancies", {"name": "gamma", "gpu_quota": 8, "guaranteed_gpus": 8, "weight": 1000}),
    ("PATCH", "/v1/admin/tenancies/alpha", {"guaranteed_gpus": 8, "weight": 1000}),
    ("DELETE", "/v1/admin/tenancies/beta", None),
    ("POST", "/v1/admin/tenancies/alpha/tokens", {}),
    ("GET", "/v1/admin/tenancies/alpha/tokens", None),
    ("DELETE", "/v1/admin/tenancies/beta/tokens/tok_x", None),
    ("GET", "/v1/admin/containers", None),
    ("GET", "/v1/admin/nodes", None),
    ("GET", "/v1/admin/gpus", None),
    ("GET", "/v1/admin/leases", None),
    ("GET", "/v1/admin/partitions", None),
    ("GET", "/v1/admin/warm-images", None),
    ("POST", "/v1/admin/warm-images", {"image": "busybox:1.36"}),
    ("DELETE", f"/v1/admin/warm-images/wi-{'0' * 20}", None),
    ("GET", "/v1/admin/usage", None),
    ("GET", "/v1/admin/usage?tenancy=beta", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ADMIN_ENDPOINTS])
def test_tenant_tokens_cannot_use_admin_endpoints(probed: Probed, method: str, path: str, body: dict | None) -> None:
    with probed.server.client(probed.tenants["alpha"]["token"]) as alpha:
        r = alpha.request(method, path, json=body)
    assert r.status_code == 403
    assert r.json() == {"code": "forbidden", "detail": "this endpoint needs an admin token"}
    with probed.server.client() as admin:
        assert admin.get("/v1/admin/tenancies/beta").status_code == 200
        alpha_row = admin.get("/v1/admin/tenancies/alpha").json()
    assert (alpha_row["guaranteed_gpus"], alpha_row["weight"]) == (0, 1.0)  # untouched


# --- tokens and the audit trail: another tenancy's answer like missing ones -----------------

TOKEN_PROBES = [
    ("DELETE", "/v1/tokens/{token}", None),
    ("DELETE", "/v1/tokens/{token}?tenancy={owner}", None),
    ("GET", "/v1/tokens?tenancy={owner}", None),
    ("POST", "/v1/tokens?tenancy={owner}", {"name": "intruder", "scope": "admin"}),
    ("GET", "/v1/audit?tenancy={owner}", None),
    ("GET", "/v1/audit?tenancy={owner}&action=token.create", None),
]


@pytest.mark.parametrize(("method", "path", "body"), TOKEN_PROBES, ids=[f"{m} {p}" for m, p, _ in TOKEN_PROBES])
def test_another_tenancys_tokens_and_audit_are_not_found(
    probed: Probed, method: str, path: str, body: dict | None
) -> None:
    with probed.server.client() as admin:
        beta_token = admin.get("/v1/admin/tenancies/beta/tokens").json()["data"][0]["id"]
    with probed.server.client(probed.tenants["alpha"]["token"]) as alpha:
        theirs = alpha.request(method, path.format(token=beta_token, owner="beta"), json=body)
        missing = alpha.request(method, path.format(token="tok_0000000000000000", owner="nowhere"), json=body)
        own_tokens = alpha.get("/v1/tokens").json()["data"]
        own_events = alpha.get("/v1/audit").json()["data"]
    assert theirs.status_code == missing.status_code == 404, (theirs.text, missing.text)
    norm = lambda r, *names: functools.reduce(lambda t, n: t.replace(n, "X"), names, r.json()["detail"])  # noqa: E731
    assert norm(theirs, beta_token, "beta") == norm(missing, "tok_0000000000000000", "nowhere")
    assert {t["tenancy"] for t in own_tokens} == {"alpha"}
    assert beta_token not in str(own_events) and "beta" not in str(own_events)
    with probed.server.client(probed.tenants["beta"]["token"]) as beta:  # untouched
        assert beta.get("/v1/containers").status_code == 200
        assert [t["id"] for t in beta.get("/v1/tokens").json()["data"]] == [beta_token]
        assert {e["action"] for e in beta.get("/v1/audit").json()["data"]} == {"token.create", "container.submit"}


@pytest.mark.parametrize(
    "header", [None, "Bearer", "Bearer wrong", "Basic abc"], ids=["none", "empty", "wrong", "basic"]
)
def test_missing_or_bad_tokens_are_401(probed: Probed, header: str | None) -> None:
    with probed.server.client(None) as anon:
        r = anon.get("/v1/containers", headers={"Authorization": header} if header else {})
    assert r.status_code == 401
    assert r.json()["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"


def test_tokens_are_shown_once_stored_hashed_and_revocable(api_down: ApiServer, admin: httpx.Client) -> None:
    admin.post("/v1/admin/tenancies", json={"name": "delta"})
    issued = admin.post("/v1/admin/tenancies/delta/tokens", json={"name": "ci"}).json()
    assert issued["token"].startswith("gpc_") and issued["tenancy"] == "delta"
    listed = admin.get("/v1/admin/tenancies/delta/tokens").json()
    assert listed["count"] == 1 and "token" not in listed["data"][0]
    with api_down.client(issued["token"]) as delta:
        assert delta.get("/v1/containers").status_code == 200
        assert admin.delete(f"/v1/admin/tenancies/delta/tokens/{issued['id']}").status_code == 204
        assert delta.get("/v1/containers").status_code == 401
    assert admin.delete(f"/v1/admin/tenancies/delta/tokens/{issued['id']}").status_code == 404
    # the digest, never the secret, is what the database holds
    from sqlmodel import Session, select

    from services.api.domain.models import ApiToken

    with Session(api_down.app.state.engine) as session:
        hashes = [t.token_hash for t in session.exec(select(ApiToken)).all()]
    assert issued["token"] not in hashes and all(len(h) == 64 for h in hashes)


# --- secrets, registry credentials and kept logs: another tenancy's are not found ---------

SECRET_PROBES = [
    ("GET", "/v1/secrets/{name}", None),
    ("PUT", "/v1/secrets/{name}?tenancy={owner}", {"value": "stolen"}),
    ("DELETE", "/v1/secrets/{name}", None),
    ("GET", "/v1/secrets?tenancy={owner}", None),
    ("DELETE", "/v1/registry-credentials/{server}", None),
    ("GET", "/v1/registry-credentials?tenancy={owner}", None),
    ("POST", "/v1/registry-credentials?tenancy={owner}", {"server": "nvcr.io", "username": "u", "password": "p"}),
]


@pytest.fixture
def api_up(kubeconfig, serve, database_url) -> ApiServer:  # the arguments are fixtures
    return serve(database_url, kubeconfig)


@pytest.mark.parametrize(("method", "path", "body"), SECRET_PROBES, ids=[f"{m} {p}" for m, p, _ in SECRET_PROBES])
def test_another_tenancys_secrets_and_credentials_are_not_found(
    api_up: ApiServer, k8s, method: str, path: str, body: dict | None
) -> None:
    from kubernetes import client as kc

    from tests.api.kube_helpers import mark_tenancy_ready

    with api_up.client() as admin:
        tokens = {name: new_tenancy(admin, name) for name in ("owner", "thief")}
    for name in tokens:
        mark_tenancy_ready(k8s, name)
    with api_up.client(tokens["owner"]) as owner:
        assert owner.post("/v1/secrets", json={"name": "hf", "value": "hf_owner_only"}).status_code == 201
        assert (
            owner.post(
                "/v1/registry-credentials",
                json={"server": "nvcr.io", "username": "$oauthtoken", "password": "nvapi-owner"},
            ).status_code
            == 201
        )
    with api_up.client(tokens["thief"]) as thief:
        theirs = thief.request(method, path.format(name="hf", server="nvcr.io", owner="owner"), json=body)
        missing = thief.request(method, path.format(name="zz", server="zz.example", owner="nowhere"), json=body)
        # using the owner's secret from the thief's container: exactly like a secret that does not exist
        use = thief.post("/v1/containers", json={"image": "ubuntu", "env": {"T": {"secret": "hf"}}})
        none = thief.post("/v1/containers", json={"image": "ubuntu", "env": {"T": {"secret": "zz"}}})
        own_list = thief.get("/v1/secrets").json()
    assert theirs.status_code == missing.status_code == 404, (theirs.text, missing.text)
    norm = lambda r, *names: functools.reduce(lambda t, n: t.replace(n, "X"), names, r.json()["detail"])  # noqa: E731
    assert norm(theirs, "hf", "nvcr.io", "owner") == norm(missing, "zz.example", "zz", "nowhere")
    assert use.status_code == none.status_code == 422
    assert norm(use, "hf") == norm(none, "zz")
    assert own_list == {"data": [], "count": 0}
    core = kc.CoreV1Api(k8s)
    value = core.read_namespaced_secret("gpucaas-secret-hf", "tenant-owner").data["value"]
    assert value == "aGZfb3duZXJfb25seQ=="  # untouched: base64 of hf_owner_only
    assert len(core.list_namespaced_secret("tenant-owner").items) == 2


# --- volumes: another tenancy's cannot be named -----------------------------------------

VOLUME_PROBES = [
    ("GET", "/v1/volumes/{name}", None),
    ("DELETE", "/v1/volumes/{name}", None),
    ("GET", "/v1/volumes/{name}?tenancy={owner}", None),
    ("DELETE", "/v1/volumes/{name}?tenancy={owner}", None),
    ("GET", "/v1/volumes?tenancy={owner}", None),
    ("POST", "/v1/volumes?tenancy={owner}", {"name": "grab", "size": "1Gi"}),
]


@pytest.mark.parametrize(("method", "path", "body"), VOLUME_PROBES, ids=[f"{m} {p}" for m, p, _ in VOLUME_PROBES])
def test_another_tenancys_volumes_are_not_found(
    api_up: ApiServer, k8s, method: str, path: str, body: dict | None
) -> None:
    from kubernetes import client as kc

    from tests.api.kube_helpers import mark_tenancy_ready

    with api_up.client() as admin:
        tokens = {name: new_tenancy(admin, name) for name in ("vowner", "vthief")}
    for name in tokens:
        mark_tenancy_ready(k8s, name)
    with api_up.client(tokens["vowner"]) as owner:
        assert owner.post("/v1/volumes", json={"name": "data", "size": "1Gi"}).status_code == 201
    with api_up.client(tokens["vthief"]) as thief:
        theirs = thief.request(method, path.format(name="data", owner="vowner"), json=body)
        missing = thief.request(method, path.format(name="zz", owner="nowhere"), json=body)
        # mounting the owner's volume: exactly like one that does not exist
        use = thief.post("/v1/containers", json={"image": "ubuntu", "volumes": [{"name": "data", "mount_path": "/d"}]})
        none = thief.post("/v1/containers", json={"image": "ubuntu", "volumes": [{"name": "zz", "mount_path": "/d"}]})
        own_list = thief.get("/v1/volumes").json()
    assert theirs.status_code == missing.status_code == 404, (theirs.text, missing.text)
    norm = lambda r, *names: functools.reduce(lambda t, n: t.replace(n, "X"), names, r.json()["detail"])  # noqa: E731
    assert norm(theirs, "data", "vowner") == norm(missing, "zz", "nowhere")
    assert use.status_code == none.status_code == 422
    assert norm(use, "data") == norm(none, "zz")
    assert own_list["data"] == [] and own_list["count"] == 0
    claims = kc.CoreV1Api(k8s).list_namespaced_persistent_volume_claim("tenant-vowner").items
    assert [c.metadata.name for c in claims] == ["gpucaas-volume-data"]  # untouched
