"""caasctl's volume commands: ``volumes create/list/delete``, and ``--volume`` of ``run``.

A volume is storage of the tenancy that outlives containers (``/v1/volumes``): create it
once with a size, mount it by name into any later container of the same tenancy with
``caasctl run --volume NAME:/path[:ro]``. A tenant token of scope ``submit`` is enough.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpucaas.caasctl.output import Format, emit

Output = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")]
TenancyOpt = Annotated[str | None, typer.Option("--tenancy", help="With an admin token: the tenancy acted on.")]
COLUMNS = [
    ("NAME", lambda r: r["name"]),
    ("SIZE", lambda r: r["size"]),
    ("STATUS", lambda r: r["status"]),
    ("CREATED", lambda r: r.get("created_at")),
]


def parse_volume(raw: str) -> dict[str, Any]:
    """``NAME:/path`` or ``NAME:/path:ro`` (``:rw`` too) → a container's volume entry."""
    name, sep, rest = raw.partition(":")
    path, read_only = rest, False
    for suffix, ro in ((":ro", True), (":rw", False)):
        if rest.endswith(suffix):
            path, read_only = rest[: -len(suffix)], ro
    if not sep or not name or not path.startswith("/"):
        raise typer.BadParameter(f"{raw!r}: expected NAME:/path or NAME:/path:ro", param_hint="--volume")
    return {"name": name, "mount_path": path, "read_only": read_only}


def _q(tenancy: str | None) -> str:
    return f"?tenancy={tenancy}" if tenancy else ""


def register(app: typer.Typer, api_of: Any) -> None:
    """Add ``volumes create/list/delete`` to caasctl; ``api_of(ctx)`` is the REST client."""
    volumes_app = typer.Typer(
        help="Volumes: storage that outlives containers, mounted with run --volume.", no_args_is_help=True
    )
    app.add_typer(volumes_app, name="volumes")

    @volumes_app.command("create")
    def create(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="The volume's name, e.g. datasets.")],
        size: Annotated[str, typer.Option("--size", help="Its size, a quantity such as 10Gi or 500Mi.")],
        tenancy: TenancyOpt = None,
        output: Output = Format.table,
    ) -> None:
        """Create a volume of SIZE; mount it with caasctl run --volume NAME:/path."""
        emit(api_of(ctx).post(f"/v1/volumes{_q(tenancy)}", {"name": name, "size": size}), output, COLUMNS)

    @volumes_app.command("list")
    def list_(ctx: typer.Context, tenancy: TenancyOpt = None, output: Output = Format.table) -> None:
        """Your volumes, and how much of the storage quota they use."""
        page = api_of(ctx).get("/v1/volumes", tenancy=tenancy)
        emit(
            page["data"],
            output,
            COLUMNS,
            title=f"volumes ({page['storage_used']} of {page['storage_quota']}, "
            f"{page['count']} of {page['max_volumes']} volumes)",
        )

    @volumes_app.command("delete")
    def delete(ctx: typer.Context, name: str, tenancy: TenancyOpt = None) -> None:
        """Delete a volume and its data (refused while a container that mounts it is active)."""
        api_of(ctx).delete(f"/v1/volumes/{name}{_q(tenancy)}")
        typer.echo(f"Deleted volume {name}")
