"""Self-service tokens (``/v1/tokens``), as a tenant uses them over HTTP on both databases:
an ``admin`` token mints a narrower one, which does what its scope allows and no more,
is revoked, and is refused on its next request; the secret is shown once; bad input is a
422 naming the field; narrower tokens cannot manage tokens."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session, select

from services.api.domain.models import ApiToken, AuditEvent
from services.api.security import scopes
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer

IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


def test_an_admin_token_mints_a_read_token_that_looks_but_cannot_submit_until_revoked(
    api_down: ApiServer, admin: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    owner = new_tenancy(admin, "acme")  # scope admin, named "test"
    with api_down.client(owner) as c:
        submitted = c.post("/v1/containers", json={"image": IMAGE})
        assert submitted.status_code == 202, submitted.text
        minted = c.post("/v1/tokens", json={"name": "dash", "scope": "read"})
    assert minted.status_code == 201, minted.text
    dash = minted.json()
    assert dash["token"].startswith("gpc_") and dash["name"] == "dash" and dash["scope"] == "read"
    assert dash["tenancy"] == "acme" and dash["expires_at"] is None and dash["created_by"]

    with api_down.client(dash["token"]) as d:
        listed = d.get("/v1/containers")
        assert listed.status_code == 200 and [x["id"] for x in listed.json()["data"]] == [submitted.json()["id"]]
        refused = d.post("/v1/containers", json={"image": IMAGE})
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"] == (
            "this token's scope is 'read'; POST /v1/containers needs a token with scope 'submit'"
        )
        with api_down.client(owner) as c:
            tokens = c.get("/v1/tokens").json()
            assert {t["name"]: t["scope"] for t in tokens["data"]} == {"test": "admin", "dash": "read"}
            assert all("token" not in t for t in tokens["data"])  # the secret is never shown again
            assert c.delete(f"/v1/tokens/{dash['id']}").status_code == 204
        gone = d.get("/v1/containers")
    assert gone.status_code == 401 and gone.json()["detail"] == "invalid or revoked token"

    with api_down.client(owner) as c:
        assert c.delete(f"/v1/tokens/{dash['id']}").status_code == 404  # already gone
        events = c.get("/v1/audit").json()["data"]
    assert [(e["action"], e["token_name"]) for e in events] == [
        ("token.revoke", "test"),
        ("token.create", "test"),
        ("container.submit", "test"),
        ("token.create", "bootstrap"),
    ]  # the operator issued "test"
    assert events[0]["target"] == events[1]["target"] == dash["id"]
    assert events[2]["target"] == submitted.json()["id"]
    assert all(e["client"] == "127.0.0.1" for e in events)
    assert "name 'test', scope admin" in events[3]["detail"]
    assert "name 'dash', scope read" in events[1]["detail"]
    assert dash["token"] not in str(events)
    # stored as a digest only; never logged
    with Session(api_down.app.state.engine) as session:
        row = session.exec(select(ApiToken).where(ApiToken.id == dash["id"])).first()
        assert row is None
        assert dash["token"] not in str(session.exec(select(AuditEvent)).all())
    assert dash["token"] not in caplog.text and owner not in caplog.text


def test_a_minted_token_keeps_its_expiry_and_the_minter(api_down: ApiServer, admin: httpx.Client) -> None:
    owner = new_tenancy(admin, "exp")
    later = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    with api_down.client(owner) as c:
        me = c.get("/v1/tokens").json()["data"][0]
        made = c.post(
            "/v1/tokens", json={"name": "ci", "scope": "submit", "expires_at": later.strftime("%Y-%m-%dT%H:%M:%SZ")}
        ).json()
        # scope defaults to read, the narrowest
        plain = c.post("/v1/tokens", json={"name": "peek"}).json()
    assert made["expires_at"] == later.strftime("%Y-%m-%dT%H:%M:%SZ") and made["created_by"] == me["id"]
    assert plain["scope"] == "read"
    with api_down.client(made["token"]) as ci:
        assert ci.post("/v1/containers", json={"image": IMAGE}).status_code == 202
        assert ci.post("/v1/secrets", json={"name": "x", "value": "y"}).status_code == 403


@pytest.mark.parametrize("scope", ["read", "submit"])
def test_narrower_tokens_cannot_manage_tokens_or_read_the_audit(
    api_down: ApiServer, admin: httpx.Client, scope: str
) -> None:
    owner = new_tenancy(admin, f"narrow-{scope}")
    with api_down.client(owner) as c:
        narrow = c.post("/v1/tokens", json={"name": "n", "scope": scope}).json()
        mine = c.get("/v1/tokens").json()["data"][0]["id"]
    with api_down.client(narrow["token"]) as n:
        for method, path, body in (
            ("POST", "/v1/tokens", {"name": "wider", "scope": "admin"}),
            ("POST", "/v1/tokens", {"name": "same", "scope": scope}),
            ("GET", "/v1/tokens", None),
            ("DELETE", f"/v1/tokens/{mine}", None),
            ("GET", "/v1/audit", None),
        ):
            r = n.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["detail"] == (
                f"this token's scope is '{scope}'; {method} {path} needs a token with scope 'admin'"
            )
    with api_down.client(owner) as c:
        assert len(c.get("/v1/tokens").json()["data"]) == 2  # nothing minted, nothing revoked


def test_no_token_may_mint_a_wider_scope_than_its_own() -> None:
    assert scopes.within("read", "read") and scopes.within("read", "submit") and scopes.within("submit", "submit")
    assert not scopes.within("submit", "read") and not scopes.within("admin", "submit")
    assert all(scopes.within(s, "admin") and scopes.within(s, None) for s in scopes.SCOPES)


BAD_BODIES = [
    ({"name": "x", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at: must be in the future"),
    ({"name": "x", "expires_at": "tomorrow"}, "expires_at: "),
    ({"name": "x", "expires_at": 12}, "expires_at: "),
    ({"name": "x", "scope": "root"}, "scope: "),
    ({"scope": "read"}, "name: field required"),
    ({"name": ""}, "name: "),
    ({"name": "   "}, "name: "),
    ({"name": "x" * 129}, "name: "),
    ({"name": "a\x00b"}, "name: "),
    ({"name": "x", "secret": "mine"}, "unknown field(s) 'secret'"),
]


def test_bad_input_is_422_naming_the_field(api_down: ApiServer, admin: httpx.Client) -> None:
    owner = new_tenancy(admin, "bad")
    with api_down.client(owner) as c:
        for body, start in BAD_BODIES:
            r = c.post("/v1/tokens", json=body)
            assert r.status_code == 422, (body, r.text)
            assert start in r.json()["detail"], (body, r.json())
        assert c.post("/v1/tokens", content=b"{", headers={"content-type": "application/json"}).status_code == 422
        assert len(c.get("/v1/tokens").json()["data"]) == 1


def test_an_operator_names_the_tenancy(api_down: ApiServer, admin: httpx.Client) -> None:
    new_tenancy(admin, "opsd")
    unnamed = admin.post("/v1/tokens", json={"name": "x"})
    assert unnamed.status_code == 422 and unnamed.json()["detail"].startswith("tenancy: query parameter required")
    made = admin.post("/v1/tokens", params={"tenancy": "opsd"}, json={"name": "by-ops", "scope": "admin"})
    assert made.status_code == 201 and made.json()["tenancy"] == "opsd"
    assert {t["name"] for t in admin.get("/v1/tokens", params={"tenancy": "opsd"}).json()["data"]} == {"test", "by-ops"}
    assert admin.delete(f"/v1/tokens/{made.json()['id']}", params={"tenancy": "opsd"}).status_code == 204
    assert admin.get("/v1/tokens", params={"tenancy": "nowhere"}).status_code == 404
    # the operator's own endpoints still work, and are audited in the tenancy
    issued = admin.post("/v1/admin/tenancies/opsd/tokens", json={"name": "legacy"}).json()
    assert admin.delete(f"/v1/admin/tenancies/opsd/tokens/{issued['id']}").status_code == 204
    events = admin.get("/v1/audit", params={"tenancy": "opsd"}).json()["data"]
    assert [(e["action"], e["token_name"]) for e in events] == [
        ("token.revoke", "bootstrap"),
        ("token.create", "bootstrap"),
        ("token.revoke", "bootstrap"),
        ("token.create", "bootstrap"),
        ("token.create", "bootstrap"),
    ]


def test_a_tenancy_holds_at_most_a_hundred_tokens(
    serve: Callable[..., ApiServer], sqlite_url: str, dead_kubeconfig: Path
) -> None:
    api = serve(sqlite_url, dead_kubeconfig, rate_limit_token="", rate_limit_tenancy="")
    with api.client() as admin:
        owner = new_tenancy(admin, "many")
    with api.client(owner) as c:
        for i in range(99):
            assert c.post("/v1/tokens", json={"name": f"t{i}"}).status_code == 201
        full = c.post("/v1/tokens", json={"name": "one-too-many"})
        assert full.status_code == 409 and "100 tokens, the most allowed" in full.json()["detail"]
        first = c.get("/v1/tokens").json()["data"][1]["id"]
        assert c.delete(f"/v1/tokens/{first}").status_code == 204
        assert c.post("/v1/tokens", json={"name": "fits-again"}).status_code == 201
