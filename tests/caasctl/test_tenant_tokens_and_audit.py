"""``caasctl tokens create|list|revoke`` and ``caasctl audit`` with a tenant's own ``admin``
token, against the API over HTTPS: a read token named dash looks but cannot run, is
revoked and refused; the trail shows it all by token name; bad input is one line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpucaas.caasctl.main import one_line
from tests.api.harness import ApiServer

from .conftest import Caasctl
from .test_tenant_commands import tenant_token

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def test_a_tenant_mints_lists_revokes_and_reads_its_audit_trail(caasctl: Caasctl, api: ApiServer) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "keys")}  # scope admin, issued by the operator
    ran = caasctl("run", "--detach", IMAGE, env=me)
    assert ran.exit_code == 0, ran.stderr
    cid = ran.stdout.strip()

    made = caasctl("tokens", "create", "dash", "--scope", "read", "-o", "json", env=me)
    assert made.exit_code == 0, made.stderr
    dash = made.json()
    assert (dash["name"], dash["scope"], dash["tenancy"]) == ("dash", "read", "keys") and dash["token"]
    as_dash = {"GPUCAAS_TOKEN": dash["token"]}
    assert caasctl("ps", "-o", "json", env=as_dash).json()[0]["id"] == cid
    refused = caasctl("run", "--detach", IMAGE, env=as_dash)
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.strip() == (
        "error: 403: this token's scope is 'read'; POST /v1/containers needs a token with scope 'submit'"
    )
    no_keys = caasctl("tokens", "list", env=as_dash)
    assert no_keys.exit_code == 1 and one_line(no_keys.stderr) == (
        "error: 403: this token's scope is 'read'; GET /v1/tokens needs a token with scope 'admin'"
    )

    listed = caasctl("tokens", "list", "-o", "json", env=me).json()
    assert sorted((t["name"] or "-", t["scope"]) for t in listed) == [("-", "admin"), ("dash", "read")]
    assert all("token" not in t for t in listed)
    table = caasctl("tokens", "list", env=me)
    assert dash["id"] in table.stdout and dash["token"] not in table.stdout and "CREATED BY" in table.stdout

    revoked = caasctl("tokens", "revoke", dash["id"], env=me)
    assert revoked.exit_code == 0, revoked.stderr
    gone = caasctl("ps", env=as_dash)
    assert gone.exit_code == 1 and gone.stderr.strip() == "error: 401: invalid or revoked token"
    again = caasctl("tokens", "revoke", dash["id"], env=me)
    assert again.exit_code == 1 and again.stderr.strip() == f"error: 404: token '{dash['id']}' not found"

    trail = caasctl("audit", "-o", "json", env=me)
    assert trail.exit_code == 0, trail.stderr
    events = trail.json()
    assert [(e["action"], e["target"]) for e in events] == [
        ("token.revoke", dash["id"]),
        ("token.create", dash["id"]),
        ("container.submit", cid),
        ("token.create", events[-1]["target"]),
    ]
    assert dash["token"] not in trail.stdout
    one = caasctl("audit", "--action", "token.create", "--limit", "1", "-o", "json", env=me).json()
    assert [e["target"] for e in one] == [dash["id"]]
    table = caasctl("audit", env=me)
    assert table.exit_code == 0 and "token.revoke" in table.stdout and "CLIENT" in table.stdout


def test_expiry_by_duration_or_time(caasctl: Caasctl, api: ApiServer) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "keyexp")}
    made = caasctl("tokens", "create", "ci", "--scope", "submit", "--expires-in", "30d", "-o", "json", env=me).json()
    expires = datetime.fromisoformat(made["expires_at"].replace("Z", "+00:00"))
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=5)
    at = caasctl("tokens", "create", "ci2", "--expires-at", "2099-01-01T00:00:00Z", "-o", "json", env=me).json()
    assert (at["expires_at"], at["scope"]) == ("2099-01-01T00:00:00Z", "read")
    shown = caasctl("tokens", "create", "ci3", env=me)
    assert shown.exit_code == 0 and "token:   gpc_" in shown.stdout and "not shown again" in shown.stderr


def test_bad_input_is_one_line_and_a_failing_exit_code(caasctl: Caasctl, api: ApiServer) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "keybad")}
    cases: list[tuple[list[str], str]] = [
        (["tokens", "create", "x", "--expires-in", "soon"], "error: --expires-in: 'soon' is not a duration"),
        (["tokens", "create", "x", "--expires-in", "0d"], "error: --expires-in: '0d' is not a duration"),
        (
            ["tokens", "create", "x", "--expires-in", "1d", "--expires-at", "2099-01-01T00:00:00Z"],
            "error: give --expires-in or --expires-at, not both",
        ),
        (["tokens", "create", "x", "--scope", "root"], "error: 422: scope: "),
        (
            ["tokens", "create", "x", "--expires-at", "2001-01-01T00:00:00Z"],
            "error: 422: expires_at: must be in the future",
        ),
        (["tokens", "create", "x", "--expires-at", "yesterday"], "error: 422: expires_at: "),
        (["tokens", "create", " "], "error: 422: name: "),
        (["tokens", "revoke", "a", "b", "c"], "error: tokens revoke: expected ID, or TENANCY ID"),
        (["tokens", "revoke", "tok_nothing"], "error: 404: token 'tok_nothing' not found"),
        (["audit", "--action", "container.explode"], "error: 422: action: "),
    ]
    for args, start in cases:
        r = caasctl(*args, env=me)
        assert r.exit_code == 1 and r.stdout == "", (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(start), (args, r.stderr)
    assert caasctl("audit", "--limit", "0", env=me).exit_code == 2  # a usage error, as for every option range
    assert len(caasctl("tokens", "list", "-o", "json", env=me).json()) == 1  # nothing minted


def test_an_operator_keeps_its_forms_and_names_the_tenancy(caasctl: Caasctl, api: ApiServer, kube: Any) -> None:
    tenant_token(caasctl, "keyops")
    made = caasctl("tokens", "create", "by-ops", "--scope", "admin", "--tenancy", "keyops", "-o", "json")
    assert made.exit_code == 0, made.stderr
    assert {t["name"] for t in caasctl("tokens", "list", "keyops", "-o", "json").json()} == {None, "by-ops"}
    assert caasctl("tokens", "revoke", "keyops", made.json()["id"]).exit_code == 0
    trail = caasctl("audit", "--tenancy", "keyops", "-o", "json").json()
    assert [e["action"] for e in trail] == ["token.revoke", "token.create", "token.create"]
    unnamed = caasctl("audit")
    assert unnamed.exit_code == 1 and unnamed.stderr.startswith("error: 422: tenancy: query parameter required")
