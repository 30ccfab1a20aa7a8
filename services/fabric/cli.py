"""``gpucaas fabric``: the fabric service (a privileged DaemonSet on each GPU node).

Runs the Fabric Manager service VM under libvirt, serves the node-local API on a
unix socket (partitions follow allocations) and publishes the node's
FabricState. Options are generated from
:class:`services.fabric.settings.FabricSettings` (env ``GPUCAAS_FABRIC_<NAME>``) and
the core's logging settings: flag > env > default; see docs/configuration.md.
"""

from __future__ import annotations

import os
from typing import Any

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from services.fabric.settings import FabricSettings


def _library_first(flags: dict[str, Any]) -> None:
    """No silent simulator: without libnvfm the default backend cannot run, and a simulated fabric
    must never pass for a real one. Said in one line, before any other setting is checked, since it
    is the first thing to fix."""
    from services.fabric.main import missing_library_error

    env = FabricSettings.model_config.get("env_prefix", "")
    backend = flags.get("fm_backend") or os.environ.get(f"{env}FM_BACKEND")
    library = flags.get("fm_library") or os.environ.get(f"{env}FM_LIBRARY")
    problem = missing_library_error(backend, library)
    if problem:
        import typer

        typer.echo(f"gpucaas fabric: {problem}", err=True)
        raise typer.Exit(1)


@settings_command(FabricSettings, Section(LoggingSettings, "log-"), name="fabric", precheck=_library_first)
def command(settings: FabricSettings, logging_settings: LoggingSettings) -> None:
    """Run the node's fabric service: service VM, Fabric Manager partitions, local API."""
    from services.fabric.errors import FabricServiceError
    from services.fabric.main import run

    configure_logging(logging_settings)
    try:
        run(settings)
    except FabricServiceError as exc:
        import typer  # here only: a plain start never loads it (core.settings_cli.SettingsCommand)

        typer.echo(f"gpucaas fabric: {exc}", err=True)
        raise typer.Exit(1) from exc
