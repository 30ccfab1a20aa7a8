"""caasctl's commands for a tenancy's own things: secrets, registry logins, webhooks.

They call the tenant endpoints (``/v1/secrets``, ``/v1/registry-credentials``,
``/v1/webhooks``), so a tenant token with scope ``admin`` is enough; with an admin token,
``--tenancy`` names the tenancy. Values are read from standard input (or a hidden
prompt on a terminal), never from the command line, where other users of the machine
and the shell history would see them (as ``docker login --password-stdin``).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from gpucaas.caasctl.client import CaasctlError
from gpucaas.caasctl.output import Format, emit, err_console

EVENTS = ("container.running", "container.succeeded", "container.failed", "container.cancelled")

Output = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")]
TenancyOpt = Annotated[str | None, typer.Option("--tenancy", help="With an admin token: the tenancy acted on.")]

WEBHOOK_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("URL", lambda r: r["url"]),
    ("EVENTS", lambda r: ",".join(r["events"])),
    ("CREATED", lambda r: r.get("created_at")),
    ("DESCRIPTION", lambda r: r.get("description")),
]
DELIVERY_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("EVENT", lambda r: r["event_type"]),
    ("CONTAINER", lambda r: r.get("container_id")),
    ("STATUS", lambda r: r["status"]),
    ("ATTEMPTS", lambda r: r["attempt_count"]),
    ("LAST CODE", lambda r: r.get("last_status_code")),
    ("NEXT ATTEMPT", lambda r: r.get("next_attempt_at")),
    ("LAST ERROR", lambda r: r.get("last_error")),
]


def read_value(what: str) -> str:
    """A secret value from standard input (one trailing newline dropped), or a hidden prompt."""
    if sys.stdin is None or sys.stdin.isatty():
        return typer.prompt(what, hide_input=True)
    value = sys.stdin.read()
    if value.endswith("\n"):
        value = value[:-1]
        if value.endswith("\r"):
            value = value[:-1]
    if not value:
        raise CaasctlError(f"no {what.lower()} on standard input")
    return value


def _q(tenancy: str | None) -> str:
    return f"?tenancy={tenancy}" if tenancy else ""


def register(app: typer.Typer, secrets_app: typer.Typer, api_of: Any) -> None:
    """Add ``secrets create``, ``registry`` and ``webhooks`` to caasctl; ``api_of(ctx)`` is the client."""

    @secrets_app.command("create")
    def secrets_create(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="The secret's name, e.g. hf.")],
        replace: Annotated[bool, typer.Option(help="Replace the value if the secret exists.")] = False,
        tenancy: TenancyOpt = None,
        output: Output = Format.table,
    ) -> None:
        """Store a secret; its value is read from standard input (echo -n "$V" | caasctl secrets create hf)."""
        value = read_value("Value")
        api = api_of(ctx)
        if replace:
            made = api.request("PUT", f"/v1/secrets/{name}{_q(tenancy)}", json={"value": value})
        else:
            made = api.post(f"/v1/secrets{_q(tenancy)}", {"name": name, "value": value})
        emit(made, output, [("NAME", lambda r: r["name"]), ("CREATED", lambda r: r.get("created_at"))])

    registry_app = typer.Typer(
        help="Log in to private registries: pods pull with these credentials.", no_args_is_help=True
    )
    app.add_typer(registry_app, name="registry")

    @registry_app.command("login")
    def registry_login(
        ctx: typer.Context,
        server: Annotated[str, typer.Argument(help="The registry, e.g. nvcr.io or registry.example.com:5000.")],
        username: Annotated[str, typer.Option("--username", "-u", help="The registry user (nvcr.io: $oauthtoken).")],
        password_stdin: Annotated[
            bool,
            typer.Option("--password-stdin", help="Read the password from standard input (else: a hidden prompt)."),
        ] = False,
        tenancy: TenancyOpt = None,
    ) -> None:
        """Store (or replace) the credential for SERVER; the password is never shown again."""
        if password_stdin and sys.stdin is not None and sys.stdin.isatty():
            raise CaasctlError("--password-stdin: standard input is a terminal; pipe the password in")
        password = read_value("Password")
        made = api_of(ctx).post(
            f"/v1/registry-credentials{_q(tenancy)}", {"server": server, "username": username, "password": password}
        )
        typer.echo(f"Login stored for {made['server']} as {made['username']}")

    @registry_app.command("logout")
    def registry_logout(ctx: typer.Context, server: str, tenancy: TenancyOpt = None) -> None:
        """Forget the credential for SERVER."""
        api_of(ctx).delete(f"/v1/registry-credentials/{server}{_q(tenancy)}")
        typer.echo(f"Removed login for {server}")

    @registry_app.command("list")
    def registry_list(ctx: typer.Context, tenancy: TenancyOpt = None, output: Output = Format.table) -> None:
        """The registries with a stored login (server and username)."""
        emit(
            api_of(ctx).get("/v1/registry-credentials", tenancy=tenancy)["data"],
            output,
            [
                ("SERVER", lambda r: r["server"]),
                ("USERNAME", lambda r: r["username"]),
                ("CREATED", lambda r: r.get("created_at")),
            ],
        )

    webhooks_app = typer.Typer(help="Webhooks: be told when your containers run and end.", no_args_is_help=True)
    app.add_typer(webhooks_app, name="webhooks")

    @webhooks_app.command("create")
    def webhooks_create(
        ctx: typer.Context,
        url: Annotated[str, typer.Argument(help="Where events are POSTed (https://...).")],
        event: Annotated[
            list[str] | None,
            typer.Option("--event", "-e", help=f"An event wanted (repeatable; default all): {', '.join(EVENTS)}."),
        ] = None,
        description: Annotated[str | None, typer.Option(help="A note for yourself.")] = None,
        tenancy: TenancyOpt = None,
        output: Output = Format.table,
    ) -> None:
        """Register a webhook; prints its signing secret, which is shown this once."""
        body: dict[str, Any] = {"url": url, "events": list(event or EVENTS)}
        if description:
            body["description"] = description
        made = api_of(ctx).post(f"/v1/webhooks{_q(tenancy)}", body)
        if output == Format.table:
            typer.echo(f"id:     {made['id']}\nsecret: {made['secret']}")
            err_console.print("Keep the secret now: it is not shown again (docs/webhooks.md: verifying a delivery).")
        else:
            emit(made, output)

    @webhooks_app.command("list")
    def webhooks_list(ctx: typer.Context, tenancy: TenancyOpt = None, output: Output = Format.table) -> None:
        """Your webhooks."""
        emit(api_of(ctx).get("/v1/webhooks", tenancy=tenancy)["data"], output, WEBHOOK_COLUMNS, title="webhooks")

    @webhooks_app.command("delete")
    def webhooks_delete(ctx: typer.Context, webhook_id: str, tenancy: TenancyOpt = None) -> None:
        """Delete a webhook (nothing more is sent to it)."""
        api_of(ctx).delete(f"/v1/webhooks/{webhook_id}{_q(tenancy)}")
        typer.echo(webhook_id)

    @webhooks_app.command("deliveries")
    def webhooks_deliveries(
        ctx: typer.Context,
        webhook_id: str,
        status: Annotated[str | None, typer.Option(help="Only pending, delivered or failed ones.")] = None,
        limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many, newest first.")] = 50,
        tenancy: TenancyOpt = None,
        output: Output = Format.table,
    ) -> None:
        """A webhook's deliveries and their attempts (status code, error, next attempt)."""
        rows = api_of(ctx).get(f"/v1/webhooks/{webhook_id}/deliveries", status=status, limit=limit, tenancy=tenancy)[
            "data"
        ]
        emit(rows, output, DELIVERY_COLUMNS, title="deliveries")

    @webhooks_app.command("resend")
    def webhooks_resend(
        ctx: typer.Context, webhook_id: str, delivery_id: str, tenancy: TenancyOpt = None, output: Output = Format.table
    ) -> None:
        """Send a delivery again now (same event id and body)."""
        emit(
            api_of(ctx).post(f"/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/resend{_q(tenancy)}"),
            output,
            DELIVERY_COLUMNS,
        )
