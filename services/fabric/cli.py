"""``gpucaas fabric``: the fabric service (a privileged DaemonSet on each GPU node).

Runs the Fabric Manager service VM under libvirt, serves the node-local API on a
unix socket (partitions follow allocations) and publishes the node's
FabricState. Options are generated from
:class:`services.fabric.settings.FabricSettings` (env ``GPUCAAS_FABRIC_<NAME>``) and
the core's logging settings: flag > env > default; see docs/configuration.md.
"""

from __future__ import annotations

import typer

from gpucaas.core.logging import LoggingSettings, configure_logging
from gpucaas.core.settings_cli import Section, settings_command
from services.fabric.settings import FabricSettings


@settings_command(FabricSettings, Section(LoggingSettings, "log-"), name="fabric")
def command(settings: FabricSettings, logging_settings: LoggingSettings) -> None:
    """Run the node's fabric service: service VM, Fabric Manager partitions, local API."""
    import signal
    import threading

    from services.fabric.errors import FabricServiceError
    from services.fabric.runtime import FabricNode
    from services.fabric.runtime import missing_library_error

    # No silent simulator (issue 15): without libnvfm the default backend cannot run; say so
    # in one line before anything starts.
    problem = missing_library_error(settings.fm_backend, settings.fm_library)
    if problem:
        typer.echo(f"gpucaas fabric: {problem}", err=True)
        raise typer.Exit(1)

    configure_logging(logging_settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    node = FabricNode(settings)
    try:
        node.start()
    except FabricServiceError as exc:
        typer.echo(f"gpucaas fabric: {exc}", err=True)
        raise typer.Exit(1) from exc
    try:
        stop.wait()
    finally:
        node.stop()
