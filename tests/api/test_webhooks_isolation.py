"""Webhooks per tenancy: another tenancy's webhooks and deliveries answer exactly like
missing ones, on every endpoint; lists show the caller's own only; a deleted tenancy's
webhooks do not pass to a new tenancy of the same name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import mark_tenancy_ready

URL = "https://hooks.example.com/gpucaas"
MISSING_HOOK = "wh_00000000000000000000"
MISSING_DELIVERY = "whd_000000000000000000000000"


@pytest.fixture
def world(kubeconfig: Path, serve: Callable[..., ApiServer], sqlite_url: str, k8s: Any) -> dict[str, Any]:
    """alpha and beta, each with a webhook; beta's has a delivery (of a cancelled container)."""
    api = serve(sqlite_url, kubeconfig, webhook_retry_first_seconds=0.2, webhook_retry_max_seconds=1.0)
    out: dict[str, Any] = {"api": api}
    for name in ("alpha", "beta"):
        with api.client() as admin:
            token = new_tenancy(admin, name)
        mark_tenancy_ready(k8s, name)
        with api.client(token) as c:
            hook = c.post("/v1/webhooks", json={"url": URL, "events": ["container.cancelled"]})
            assert hook.status_code == 201, hook.text
            cid = c.post("/v1/containers", json={"image": "busybox:1.36"}).json()["id"]
            assert c.delete(f"/v1/containers/{cid}").status_code in (200, 202)
            hook_id = hook.json()["id"]
            deliveries = wait_for(
                lambda hook_id=hook_id: c.get(f"/v1/webhooks/{hook_id}/deliveries").json()["data"], what="a delivery"
            )
        out[name] = {"token": token, "hook": hook_id, "delivery": deliveries[0]["id"]}
    return out


def _scrub(body: dict, *ids: str) -> dict:
    text = {k: str(v) for k, v in body.items()}
    for i in ids:
        text = {k: v.replace(i, "<id>") for k, v in text.items()}
    return text


ENDPOINTS = [
    ("GET", "/v1/webhooks/{hook}"),
    ("DELETE", "/v1/webhooks/{hook}"),
    ("GET", "/v1/webhooks/{hook}/deliveries"),
    ("POST", "/v1/webhooks/{hook}/deliveries/{delivery}/resend"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS, ids=[f"{m} {p}" for m, p in ENDPOINTS])
def test_another_tenancys_webhook_is_not_found(world: dict[str, Any], method: str, path: str) -> None:
    api, beta = world["api"], world["beta"]
    with api.client(world["alpha"]["token"]) as alpha:
        theirs = alpha.request(method, path.format(hook=beta["hook"], delivery=beta["delivery"]))
        missing = alpha.request(method, path.format(hook=MISSING_HOOK, delivery=MISSING_DELIVERY))
    assert theirs.status_code == 404 and missing.status_code == 404, (theirs.text, missing.text)
    assert _scrub(theirs.json(), beta["hook"], beta["delivery"]) == _scrub(
        missing.json(), MISSING_HOOK, MISSING_DELIVERY
    )
    with api.client(beta["token"]) as own:  # untouched
        assert own.get(f"/v1/webhooks/{beta['hook']}").status_code == 200


def test_a_delivery_is_reached_only_through_its_own_webhook(world: dict[str, Any]) -> None:
    api, alpha, beta = world["api"], world["alpha"], world["beta"]
    with api.client(alpha["token"]) as c:
        crossed = c.post(f"/v1/webhooks/{alpha['hook']}/deliveries/{beta['delivery']}/resend")
        missing = c.post(f"/v1/webhooks/{alpha['hook']}/deliveries/{MISSING_DELIVERY}/resend")
    assert crossed.status_code == missing.status_code == 404
    assert _scrub(crossed.json(), beta["delivery"]) == _scrub(missing.json(), MISSING_DELIVERY)


def test_lists_and_admin_views_are_per_tenancy(world: dict[str, Any]) -> None:
    api, alpha, beta = world["api"], world["alpha"], world["beta"]
    with api.client(alpha["token"]) as c:
        mine = c.get("/v1/webhooks").json()
        other = c.get("/v1/webhooks", params={"tenancy": "beta"})
        nowhere = c.get("/v1/webhooks", params={"tenancy": "nowhere"})
        create_there = c.post(
            "/v1/webhooks", params={"tenancy": "beta"}, json={"url": URL, "events": ["container.failed"]}
        )
    assert [h["id"] for h in mine["data"]] == [alpha["hook"]] and mine["count"] == 1
    assert other.status_code == nowhere.status_code == create_there.status_code == 404
    assert other.json()["detail"].replace("beta", "X") == nowhere.json()["detail"].replace("nowhere", "X")
    with api.client() as admin:
        theirs = admin.get("/v1/webhooks", params={"tenancy": "beta"}).json()
        deliveries = admin.get(f"/v1/webhooks/{beta['hook']}/deliveries", params={"tenancy": "beta"})
        wrong = admin.get(f"/v1/webhooks/{beta['hook']}", params={"tenancy": "alpha"})
        unnamed = admin.get("/v1/webhooks")
    assert [h["id"] for h in theirs["data"]] == [beta["hook"]]
    assert deliveries.status_code == 200 and deliveries.json()["data"][0]["id"] == beta["delivery"]
    assert wrong.status_code == 404
    assert unnamed.status_code == 422 and unnamed.json()["detail"].startswith("tenancy:")


def test_a_read_token_looks_but_does_not_manage(world: dict[str, Any]) -> None:
    api, alpha = world["api"], world["alpha"]
    with api.client() as admin:
        read = admin.post("/v1/admin/tenancies/alpha/tokens", json={"scope": "read"}).json()["token"]
    with api.client(read) as c:
        assert c.get("/v1/webhooks").status_code == 200
        assert c.get(f"/v1/webhooks/{alpha['hook']}/deliveries").status_code == 200
        for r in (
            c.post("/v1/webhooks", json={"url": URL, "events": ["container.failed"]}),
            c.delete(f"/v1/webhooks/{alpha['hook']}"),
            c.post(f"/v1/webhooks/{alpha['hook']}/deliveries/{alpha['delivery']}/resend"),
        ):
            assert r.status_code == 403 and "scope" in r.json()["detail"]


def test_a_deleted_tenancys_webhooks_do_not_pass_to_its_namesake(world: dict[str, Any], k8s: Any) -> None:
    api = world["api"]
    with api.client() as admin:
        assert admin.delete("/v1/admin/tenancies/beta").status_code in (200, 202, 204)
        token = new_tenancy(admin, "beta")
    with api.client(token) as c:
        assert c.get("/v1/webhooks").json() == {"data": [], "count": 0}
        assert c.get(f"/v1/webhooks/{world['beta']['hook']}").status_code == 404
        assert c.get(f"/v1/webhooks/{world['beta']['hook']}/deliveries").status_code == 404
