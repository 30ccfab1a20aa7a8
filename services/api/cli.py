"""``gpucaas api``: serve the tenant/admin REST API with its submission worker.

Options are generated from :class:`services.api.settings.Settings` and the core's
logging settings (flag > env > default); see docs/configuration.md.
"""

from __future__ import annotations

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from services.api.settings import Settings


@settings_command(Settings, Section(LoggingSettings, "log-"), name="api")
def command(settings: Settings, logging_settings: LoggingSettings) -> None:
    """Serve the gpucaas REST API (tenants submit containers; admins manage tenancies)."""
    from services.api.main import run

    configure_logging(logging_settings)
    run(settings)
