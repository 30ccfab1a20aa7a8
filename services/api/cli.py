"""``gpucaas api``: serve the tenant/admin REST API with its submission worker."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def command(
    host: Annotated[str, typer.Option(envvar="GPUCAAS_HOST", help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="GPUCAAS_PORT", help="TCP port (0 = ephemeral).")] = 8443,
    tls_cert: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_TLS_CERT", help="PEM certificate (HTTPS with --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(envvar="GPUCAAS_TLS_KEY", help="PEM private key.")] = None,
    database_url: Annotated[
        str, typer.Option(envvar="GPUCAAS_DATABASE_URL", help="SQLAlchemy URL (SQLite file or postgresql+psycopg://).")
    ] = "sqlite:///gpucaas.db",
    kubeconfig: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_KUBECONFIG", help="kubeconfig (default: in-cluster, then ~/.kube/config).")
    ] = None,
) -> None:
    """Serve the gpucaas REST API (tenants submit containers; admins manage tenancies)."""
    from services.api.main import run
    from services.api.settings import Settings

    try:
        settings = Settings(
            host=host,
            port=port,
            tls_cert=tls_cert,
            tls_key=tls_key,
            database_url=database_url,
            kubeconfig=kubeconfig,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run(settings)
