"""The tenancy audit trail (``GET /v1/audit``) as a tenant reads it, on both databases:
every change is there with the token's name and the client's address, newest first, in
keyset pages; no secret value ever reaches a row; a refused submission records nothing;
retention prunes old events; a deleted tenancy's trail is not its namesake's; the hooks
for later changes record too; migration 0010 goes down and up."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, insert, text
from sqlmodel import Session

from services.api.db import engines
from services.api.domain.models import AuditAction, AuditEvent, utcnow
from services.api.store import audit, retention
from services.api.store.audit import Actor
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import mark_tenancy_ready

IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


@pytest.fixture
def api_up(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    """The API on both databases with the local cluster's kube-apiserver answering (secrets work)."""
    return serve(database_url, kubeconfig, webhook_allow_loopback=True)


def _all_rows(engine: Engine) -> str:
    """Every column of every audit row, as text."""
    with engine.connect() as conn:
        return repr(conn.execute(text("SELECT * FROM audit_event")).all())


def test_every_change_is_recorded_with_the_token_name_and_address_and_never_a_secret_value(
    api_up: ApiServer, k8s: Any
) -> None:
    with api_up.client() as admin:
        owner = new_tenancy(admin, "audited")
    mark_tenancy_ready(k8s, "audited")
    values = ["s3cr3t-VALUE-first", "s3cr3t-VALUE-second", "nvapi-PASSWORD-third", "URLSECRET-fourth"]
    with api_up.client(owner) as c:
        assert c.post("/v1/secrets", json={"name": "hf", "value": values[0]}).status_code == 201
        assert c.put("/v1/secrets/hf", json={"value": values[1]}).status_code == 200
        plain = c.post("/v1/containers", json={"image": IMAGE, "env": {"PLAIN": "not-a-secret-but-a-value"}})
        referencing = c.post("/v1/containers", json={"image": IMAGE, "env": {"HF": {"secret": "hf"}}})
        assert plain.status_code == referencing.status_code == 202, (plain.text, referencing.text)
        assert c.delete(f"/v1/containers/{plain.json()['id']}").status_code == 200
        assert c.delete("/v1/secrets/hf").status_code == 204
        assert (
            c.post(
                "/v1/registry-credentials", json={"server": "nvcr.io", "username": "$oauthtoken", "password": values[2]}
            ).status_code
            == 201
        )
        assert c.delete("/v1/registry-credentials/nvcr.io").status_code == 204
        hook = c.post(
            "/v1/webhooks", json={"url": f"http://127.0.0.1:9/hook?key={values[3]}", "events": ["container.failed"]}
        )
        assert hook.status_code == 201, hook.text
        assert c.delete(f"/v1/webhooks/{hook.json()['id']}").status_code == 204
        minted = c.post("/v1/tokens", json={"name": "dash", "scope": "read"}).json()
        assert c.delete(f"/v1/tokens/{minted['id']}").status_code == 204
        page = c.get("/v1/audit", params={"limit": 500})
    assert page.status_code == 200 and page.json()["next"] is None
    events = page.json()["data"]
    assert [(e["action"], e["target"]) for e in events] == [
        ("token.revoke", minted["id"]),
        ("token.create", minted["id"]),
        ("webhook.delete", hook.json()["id"]),
        ("webhook.create", hook.json()["id"]),
        ("registry_credential.delete", "nvcr.io"),
        ("registry_credential.put", "nvcr.io"),
        ("secret.delete", "hf"),
        ("container.cancel", plain.json()["id"]),
        ("container.submit", referencing.json()["id"]),
        ("container.submit", plain.json()["id"]),
        ("secret.put", "hf"),
        ("secret.put", "hf"),
        ("token.create", events[-1]["target"]),  # the operator issued the tenant's token
    ]
    assert {e["token_name"] for e in events[:-1]} == {"test"} and events[-1]["token_name"] == "bootstrap"
    assert {e["client"] for e in events} == {"127.0.0.1"}
    at = [e["at"] for e in events]
    assert at == sorted(at, reverse=True)
    secrets = [*values, "not-a-secret-but-a-value", hook.json()["secret"], minted["token"], owner]
    secrets += [base64.b64encode(v.encode()).decode() for v in values]
    for shown in (page.text, _all_rows(api_up.app.state.engine)):
        assert not [s for s in secrets if s in shown], shown


def test_pages_newest_first_with_a_filter_and_a_cursor(api_down: ApiServer, admin: httpx.Client) -> None:
    owner = new_tenancy(admin, "paged")
    with api_down.client(owner) as c:
        ids = [c.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(5)]
        first = c.get("/v1/audit", params={"limit": 2, "action": "container.submit"}).json()
        assert [e["target"] for e in first["data"]] == ids[::-1][:2] and first["limit"] == 2
        seen, after = [], None
        while True:
            page = c.get(
                "/v1/audit",
                params={"limit": 2, "after": after, "action": "container.submit"}
                if after
                else {"limit": 2, "action": "container.submit"},
            ).json()
            seen += [e["target"] for e in page["data"]]
            after = page["next"]
            if after is None:
                break
        assert seen == ids[::-1]
        assert [e["action"] for e in c.get("/v1/audit", params={"action": "token.create"}).json()["data"]] == [
            "token.create"
        ]
        for params, field in (
            ({"after": "bm90LWEtY3Vyc29y"}, "after"),
            ({"after": "!"}, "after"),
            ({"action": "container.explode"}, "action"),
            ({"limit": 0}, "limit"),
            ({"limit": 501}, "limit"),
            ({"tenancy": "Not A Name"}, "tenancy"),
        ):
            r = c.get("/v1/audit", params=params)
            assert r.status_code == 422, (params, r.text)
            assert r.json()["detail"].startswith(f"{field}: "), (params, r.json())


def test_a_refused_or_repeated_submission_records_no_event(api_down: ApiServer, admin: httpx.Client) -> None:
    owner = new_tenancy(admin, "tight", gpu_quota=1, pod_quota=1)
    budgeted = new_tenancy(admin, "budgeted", gpu_hours_per_month=100)
    with api_down.client(owner) as c:
        body = {"image": IMAGE}
        one = c.post("/v1/containers", json=body, headers={"Idempotency-Key": "k1"})
        again = c.post("/v1/containers", json=body, headers={"Idempotency-Key": "k1"})
        full = c.post("/v1/containers", json=body)
        assert (one.status_code, again.status_code, full.status_code) == (202, 202, 403)
        events = c.get("/v1/audit", params={"action": "container.submit"}).json()["data"]
    assert [e["target"] for e in events] == [one.json()["id"]]
    with api_down.client(budgeted) as c:  # admitted after its budget was checked: another path, audited too
        made = c.post("/v1/containers", json={"image": IMAGE})
        assert made.status_code == 202, made.text
        events = c.get("/v1/audit", params={"action": "container.submit"}).json()["data"]
    assert [e["target"] for e in events] == [made.json()["id"]]


def test_retention_prunes_old_events(api_down: ApiServer, admin: httpx.Client) -> None:
    engine = api_down.app.state.engine
    owner = new_tenancy(admin, "kept")
    with Session(engine) as session:
        old = audit.values(
            Actor("tok_old", "old", "10.0.0.1"),
            tenancy="kept",
            action=AuditAction.SECRET_DELETE,
            target="gone",
            at=utcnow() - timedelta(days=91),
        )
        session.execute(insert(AuditEvent.__table__), old)  # type: ignore[attr-defined]
        session.commit()
    with api_down.client(owner) as c:
        assert len(c.get("/v1/audit").json()["data"]) == 2
    assert retention.prune_audit(engine, days=90) == 1
    assert retention.prune_audit(engine, days=90) == 0
    with api_down.client(owner) as c:
        assert [e["action"] for e in c.get("/v1/audit").json()["data"]] == ["token.create"]


def test_a_deleted_tenancys_trail_is_hidden_from_a_new_tenancy_of_the_same_name(api_up: ApiServer, k8s: Any) -> None:
    with api_up.client() as admin:
        first = new_tenancy(admin, "reborn")
        with api_up.client(first) as c:
            assert c.post("/v1/containers", json={"image": IMAGE}).status_code == 202
        assert admin.delete("/v1/admin/tenancies/reborn").status_code == 204
        second = new_tenancy(admin, "reborn")
    with api_up.client(second) as c:
        assert [e["action"] for e in c.get("/v1/audit").json()["data"]] == ["token.create"]


def test_the_hooks_for_exec_volumes_and_endpoints_record(api_down: ApiServer, admin: httpx.Client) -> None:
    owner = new_tenancy(admin, "hooks")
    who = Actor("tok_x", "ops-bot", "192.0.2.7")
    with Session(api_down.app.state.engine) as session:
        audit.exec_started(
            session, who, tenancy="hooks", container_id="c0ffee", command=["sh", "-c", "echo $((6*7))"], tty=False
        )
        audit.exec_started(session, who, tenancy="hooks", container_id="c0ffee", command=["x" * 300], tty=True)
        audit.volume_changed(session, who, tenancy="hooks", volume="scratch", change="create")
        audit.endpoint_changed(session, who, tenancy="hooks", endpoint="notebook", change="delete")
        audit.volume_changed(session, None, tenancy="hooks", volume="unseen", change="delete")  # no actor: nothing
        session.commit()
    with api_down.client(owner) as c:
        events = c.get("/v1/audit").json()["data"]
    assert [(e["action"], e["target"], e["token_name"], e["client"]) for e in events[:4]] == [
        ("endpoint.delete", "notebook", "ops-bot", "192.0.2.7"),
        ("volume.create", "scratch", "ops-bot", "192.0.2.7"),
        ("container.exec", "c0ffee", "ops-bot", "192.0.2.7"),
        ("container.exec", "c0ffee", "ops-bot", "192.0.2.7"),
    ]
    # an exec's command line as typed (quoted as a shell would read it), cut to the column's width
    assert {e["detail"] for e in events[2:4]} == {"sh -c 'echo $((6*7))'", "tty: " + "x" * 250 + "\u2026"}


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = engines.make_engine(database_url)
    engines.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def test_migration_0010_goes_down_and_up(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    with Session(engine) as session:
        session.execute(
            insert(AuditEvent.__table__),
            audit.values(  # type: ignore[attr-defined]
                Actor("tok_a", "a", None), tenancy="t", action=AuditAction.TOKEN_CREATE, target="tok_b"
            ),
        )
        session.execute(
            text(
                "INSERT INTO api_token (id, tenancy, token_hash, name, created_at, created_by) "
                "VALUES ('tok_b', 't', 'h', 'b', CURRENT_TIMESTAMP, 'tok_a')"
            )
        )
        session.commit()
    cfg = Config()
    cfg.set_main_option("script_location", str(engines.MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0009")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM api_token WHERE id = 'tok_b'")).scalar_one() == "b"
        tables = set(engine.dialect.get_table_names(conn))
    assert not tables & {"audit_event", "revocation_epoch", "revocation_listener"}
    engines.upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT created_by FROM api_token WHERE id = 'tok_b'")).scalar_one() is None
        assert conn.execute(text("SELECT epoch FROM revocation_epoch")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM audit_event")).scalar_one() == 0
