"""``gpucaas api``: serve the tenant/admin REST API with its submission worker;
``gpucaas api migrate``: bring the database schema to head and exit (the chart's hook Job).

Options are generated from :class:`services.api.settings.Settings` and the core's
logging settings (flag > env > default); see docs/configuration.md.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from services.api.settings import Settings


class Action(StrEnum):
    serve = "serve"
    migrate = "migrate"


@settings_command(Settings, Section(LoggingSettings, "log-"), name="api")
def command(
    settings: Settings,
    logging_settings: LoggingSettings,
    action: Annotated[
        Action,
        typer.Argument(
            help="serve (the default), or migrate: alembic upgrade head under the database's migration "
            "lock, once however many run it, then exit."
        ),
    ] = Action.serve,
) -> None:
    """Serve the gpucaas REST API (tenants submit containers; admins manage tenancies)."""
    configure_logging(logging_settings)
    if action is Action.migrate:
        from services.api.db import engines

        engine = engines.make_engine(settings.database_url, pool_size=1)
        try:
            engines.upgrade(engine)
        finally:
            engine.dispose()
        return
    from services.api.main import run

    run(settings)
