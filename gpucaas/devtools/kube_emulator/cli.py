"""``gpucaas kube-emulator``: serve the Kubernetes API emulator as a process (development only)."""

from __future__ import annotations

import typer

from gpucaas.core.logging import LoggingSettings, configure_logging
from gpucaas.core.settings_cli import Section, settings_command
from gpucaas.devtools.kube_emulator.settings import Settings


@settings_command(Settings, Section(LoggingSettings, "log-"), name="kube-emulator")
def command(settings: Settings, logging_settings: LoggingSettings) -> None:
    """Serve a Kubernetes API emulator on HOST:PORT for development and tests (never production)."""
    import asyncio
    import logging
    import signal

    from gpucaas.devtools.kube_emulator.server import KubeEmulator

    configure_logging(logging_settings)
    logging.getLogger(__name__).info("kube emulator settings: %s", settings.model_dump(mode="json"))

    async def serve() -> None:
        emu = KubeEmulator(settings.host, settings.port, settings.persist, settings.install_project_crds,
                           event_history=settings.event_history, bookmark_interval=settings.bookmark_interval,
                           pod_graceful_deletion=settings.pod_graceful_deletion,
                           token_auth_file=settings.token_auth_file, anonymous_auth=settings.anonymous_auth,
                           audit_log=settings.audit_log, tls_port=settings.tls_port,
                           admin_token=(settings.admin_token_file.read_text().strip()
                                        if settings.admin_token_file else None))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with emu:
            if settings.kubeconfig:
                emu.write_kubeconfig(settings.kubeconfig)
            served = f"{emu.url} and {emu.https_url}" if emu.tls_port is not None else emu.url
            typer.echo(f"gpucaas kube emulator (development only) serving on {served}", err=True)
            await stop.wait()

    asyncio.run(serve())
