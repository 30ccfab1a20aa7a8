"""``gpucaas controller``: run the tenancy controller (a Kopf operator).

Options are generated from :class:`services.tenancy_controller.settings.ControllerSettings`
(env ``GPUCAAS_CONTROLLER_<NAME>``) and the core's logging settings: flag > env >
default; see docs/configuration.md.
"""

from __future__ import annotations

from gpucaas.core.logging import LoggingSettings, configure_logging
from gpucaas.core.settings_cli import Section, settings_command
from services.tenancy_controller.settings import ControllerSettings


@settings_command(ControllerSettings, Section(LoggingSettings, "log-"), name="controller")
def command(settings: ControllerSettings, logging_settings: LoggingSettings) -> None:
    """Run the tenancy controller: Tenancy -> namespace, Cilium policy, quota, NFS storage, status."""
    import asyncio
    import logging

    from services.tenancy_controller.operator import serve

    configure_logging(logging_settings)
    if logging_settings.level != "DEBUG":
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("kopf._core.engines.peering").setLevel(logging.INFO)  # pause/resume matter
    logging.getLogger(__name__).info("effective settings: %s", settings.model_dump_json())
    asyncio.run(serve(settings))
