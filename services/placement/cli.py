"""``gpucaas scheduler-extender``: serve the partition-aware kube-scheduler extender.

Options are generated from :class:`services.placement.settings.PlacementSettings` and
the core's logging settings (flag > env > default); see docs/configuration.md.
"""

from __future__ import annotations

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from services.placement.settings import PlacementSettings


@settings_command(PlacementSettings, Section(LoggingSettings, "log-"), name="scheduler-extender")
def command(settings: PlacementSettings, logging_settings: LoggingSettings) -> None:
    """Serve the kube-scheduler extender that places GPU pods on whole NVLink partitions."""
    from services.placement.main import run

    configure_logging(logging_settings)
    run(settings)
