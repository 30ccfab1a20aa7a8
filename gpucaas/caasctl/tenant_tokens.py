"""caasctl's commands for a tenancy's own tokens and its audit trail, with a tenant token
of scope ``admin``: ``tokens create|list|revoke`` (``/v1/tokens``) and ``audit``
(``GET /v1/audit``). With an admin token, ``--tenancy`` names the tenancy (and the
operator's ``tokens issue|list|revoke TENANCY`` keep working).

A minted token's secret is printed once, by ``tokens create``; the API never shows it
again. Bad input is one line and exit 1.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from gpucaas.caasctl.client import CaasctlError
from gpucaas.caasctl.output import Format, emit, err_console

Output = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")]
TenancyOpt = Annotated[str | None, typer.Option("--tenancy", help="With an admin token: the tenancy acted on.")]

TOKEN_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("NAME", lambda r: r.get("name")),
    ("SCOPE", lambda r: r.get("scope")),
    ("EXPIRES", lambda r: r.get("expires_at")),
    ("LAST USED", lambda r: r.get("last_used_at")),
    ("CREATED", lambda r: r.get("created_at")),
    ("CREATED BY", lambda r: r.get("created_by")),
]
AUDIT_COLUMNS = [
    ("TIME", lambda r: r["at"]),
    ("ACTION", lambda r: r["action"]),
    ("TARGET", lambda r: r.get("target")),
    ("TOKEN", lambda r: r.get("token_name")),
    ("TOKEN ID", lambda r: r.get("token_id")),
    ("CLIENT", lambda r: r.get("client")),
    ("DETAIL", lambda r: r.get("detail")),
]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhdw])$")


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w``: a positive whole number and a unit."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise CaasctlError(
            f"--expires-in: {text!r} is not a duration; use a number and a unit: s, m, h, d or w (e.g. 30d)"
        )
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def _q(tenancy: str | None) -> str:
    return f"?tenancy={tenancy}" if tenancy else ""


def register(app: typer.Typer, tokens_app: typer.Typer, api_of: Any) -> None:
    """Add ``tokens create`` and ``audit`` to caasctl; ``api_of(ctx)`` is the REST client.
    (``tokens list`` and ``tokens revoke`` take the tenant's form in ``main``.)"""

    @tokens_app.command("create")
    def tokens_create(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="What the token is for, e.g. dash.")],
        scope: Annotated[str, typer.Option(help="read, submit or admin; no wider than your own token's.")] = "read",
        expires_in: Annotated[str | None, typer.Option(help="Expire after this long: 30d, 12h, 90m, 2w.")] = None,
        expires_at: Annotated[
            str | None, typer.Option(help="Expire then: UTC ISO 8601 (2027-01-01T00:00:00Z).")
        ] = None,
        tenancy: TenancyOpt = None,
        output: Output = Format.table,
    ) -> None:
        """Mint a token for your tenancy; its secret is printed this once."""
        if expires_in is not None and expires_at is not None:
            raise CaasctlError("give --expires-in or --expires-at, not both")
        body: dict[str, Any] = {"name": name, "scope": scope}
        if expires_in is not None:
            when = datetime.now(UTC) + parse_duration(expires_in)
            body["expires_at"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        elif expires_at is not None:
            body["expires_at"] = expires_at
        made = api_of(ctx).post(f"/v1/tokens{_q(tenancy)}", body)
        if output == Format.table:
            typer.echo(
                f"id:      {made['id']}\nname:    {made['name']}\nscope:   {made['scope']}\n"
                f"expires: {made.get('expires_at') or 'never'}\ntoken:   {made['token']}"
            )
            err_console.print("Keep the token now: it is not shown again.")
        else:
            emit(made, output)

    @app.command("audit")
    def audit(
        ctx: typer.Context,
        action: Annotated[
            str | None, typer.Option(help="Only this action, e.g. container.submit, token.revoke.")
        ] = None,
        limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many events, newest first.")] = 50,
        tenancy: TenancyOpt = None,
        output: Output = Format.table,
    ) -> None:
        """Your tenancy's audit trail: who (token name) did what, when, from which address."""
        api = api_of(ctx)
        rows: list[Any] = []
        after = None
        while len(rows) < limit:
            page = api.get("/v1/audit", action=action, limit=min(500, limit - len(rows)), after=after, tenancy=tenancy)
            rows += page["data"]
            after = page.get("next")
            if not after or not page["data"]:
                break
        emit(rows, output, AUDIT_COLUMNS, title="audit trail")


def list_tokens(api: Any, tenancy: str | None, output: Format) -> None:
    """``tokens list``: your tenancy's (``/v1/tokens``), or with TENANCY the operator's listing."""
    path = f"/v1/admin/tenancies/{tenancy}/tokens" if tenancy else "/v1/tokens"
    emit(api.get(path)["data"], output, TOKEN_COLUMNS, title="tokens")


def revoke_token(api: Any, args: list[str], output: Format) -> None:
    """``tokens revoke ID`` (yours) or ``tokens revoke TENANCY ID`` (an operator's)."""
    if len(args) > 2:
        raise CaasctlError("tokens revoke: expected ID, or TENANCY ID")
    tenancy, token_id = (args[0], args[1]) if len(args) == 2 else (None, args[0])
    path = f"/v1/admin/tenancies/{tenancy}/tokens/{token_id}" if tenancy else f"/v1/tokens/{token_id}"
    result = api.delete(path)
    emit(result if isinstance(result, dict) else {"revoked": token_id}, output)
