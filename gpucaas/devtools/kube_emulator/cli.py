"""``gpucaas kube-emulator``: serve the Kubernetes API emulator as a process (development only)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def command(
    host: Annotated[str, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_HOST", help="Bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_PORT", help="TCP port (0 = ephemeral).")] = 6443,
    tls_port: Annotated[
        int | None, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_TLS_PORT",
                                 help="Also serve HTTPS here (0 = ephemeral); the kubeconfig then points at it.")
    ] = 0,
    kubeconfig: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_KUBECONFIG", help="Write a kubeconfig for it here.")
    ] = None,
    persist: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_PERSIST", help="Load/save the objects in this JSON file.")
    ] = None,
    install_project_crds: Annotated[
        bool, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_INSTALL_PROJECT_CRDS", help="Create the gpucaas CRDs.")
    ] = True,
    event_history: Annotated[
        int, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_EVENT_HISTORY", help="Watch events kept (older: 410 Gone).")
    ] = 10000,
    pod_graceful_deletion: Annotated[
        bool, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_POD_GRACEFUL_DELETION",
                           help="Keep deleted node-bound pods Terminating until deleted with grace 0.")
    ] = False,
    token_auth_file: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_TOKEN_AUTH_FILE",
                                  help='Static tokens as kube-apiserver reads them: token,user,uid,"g1,g2".')
    ] = None,
    anonymous_auth: Annotated[
        bool, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_ANONYMOUS_AUTH",
                           help="Treat requests without a token as system:anonymous instead of answering 401.")
    ] = False,
    audit_log: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_AUDIT_LOG",
                                  help="Append each authorisation decision here (JSON lines).")
    ] = None,
    admin_token_file: Annotated[
        Path | None, typer.Option(envvar="GPUCAAS_KUBE_EMULATOR_ADMIN_TOKEN_FILE",
                                  help="Read the cluster-admin bearer token from this file.")
    ] = None,
) -> None:
    """Serve a Kubernetes API emulator on HOST:PORT for development and tests (never production)."""
    import asyncio
    import logging
    import signal

    from gpucaas.devtools.kube_emulator.server import KubeEmulator
    from gpucaas.devtools.kube_emulator.settings import Settings

    try:
        settings = Settings(host=host, port=port, tls_port=tls_port, kubeconfig=kubeconfig, persist=persist,
                            install_project_crds=install_project_crds, event_history=event_history,
                            pod_graceful_deletion=pod_graceful_deletion, token_auth_file=token_auth_file,
                            anonymous_auth=anonymous_auth, audit_log=audit_log, admin_token_file=admin_token_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
