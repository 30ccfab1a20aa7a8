"""``gpucaas dra-driver``: the DRA kubelet plugin (second allocation mode).

Options are generated from :class:`services.dra_driver.settings.DraDriverSettings` and the
core's logging settings (flag > env > default); see docs/configuration.md.
"""

from __future__ import annotations

from gpucaas.core.logging import LoggingSettings, configure_logging
from gpucaas.core.settings_cli import Section, settings_command
from services.dra_driver.settings import DraDriverSettings


@settings_command(DraDriverSettings, Section(LoggingSettings, "log-"), name="dra-driver")
def command(settings: DraDriverSettings, logging_settings: LoggingSettings) -> None:
    """Run the DRA kubelet plugin: NVLink partitions as devices, prepared with their partition active."""
    from services.dra_driver.main import run

    configure_logging(logging_settings)
    run(settings)
