"""``gpucaas controller``: run the tenancy controller (a Kopf operator)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def command(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(envvar=["GPUCAAS_CONTROLLER_KUBECONFIG", "GPUCAAS_KUBECONFIG", "KUBECONFIG"],
                     help="kubeconfig file; unset = in-cluster service account."),
    ] = None,
    context: Annotated[str | None, typer.Option(envvar="GPUCAAS_CONTROLLER_CONTEXT", help="kubeconfig context.")] = None,
    peering: Annotated[
        str, typer.Option("--peering", "--namespace", envvar="GPUCAAS_CONTROLLER_PEERING",
                          help="ClusterKopfPeering name shared by the replicas; the highest priority one acts.")
    ] = "gpucaas-controller",
    standalone: Annotated[
        bool, typer.Option(envvar="GPUCAAS_CONTROLLER_STANDALONE", help="Run without peering (single replica).")
    ] = False,
    priority: Annotated[int, typer.Option(envvar="GPUCAAS_CONTROLLER_PRIORITY", help="Peering priority.")] = 0,
    liveness: Annotated[
        str | None, typer.Option(envvar="GPUCAAS_CONTROLLER_LIVENESS", help="Liveness endpoint, e.g. http://0.0.0.0:8080/healthz.")
    ] = None,
    resync_interval: Annotated[
        float, typer.Option(envvar="GPUCAAS_CONTROLLER_RESYNC_INTERVAL_S", help="Seconds between full re-reconciles of a Tenancy.")
    ] = 60.0,
    retry_delay: Annotated[
        float, typer.Option(envvar="GPUCAAS_CONTROLLER_RETRY_DELAY_S", help="Seconds before retrying after a transient error.")
    ] = 5.0,
    workers: Annotated[int, typer.Option(envvar="GPUCAAS_CONTROLLER_WORKERS", help="Reconcile threads.")] = 16,
    log_json: Annotated[bool, typer.Option(envvar="GPUCAAS_LOG_JSON", help="Log JSON lines (in a cluster).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", envvar="GPUCAAS_CONTROLLER_VERBOSE", help="Debug logging.")] = False,
) -> None:
    """Run the tenancy controller: Tenancy -> namespace, Cilium policy, quota, NFS storage, status."""
    import asyncio
    import json
    import logging

    from .operator import serve
    from .settings import ControllerSettings

    settings = ControllerSettings(
        kubeconfig=kubeconfig,
        context=context,
        peering=peering,
        standalone=standalone,
        priority=priority,
        liveness=liveness,
        resync_interval_s=resync_interval,
        retry_delay_s=retry_delay,
        workers=workers,
    )
    if log_json:
        class _Json(logging.Formatter):
            def format(self, record: logging.LogRecord) -> str:
                return json.dumps({"time": self.formatTime(record), "level": record.levelname,
                                   "logger": record.name, "message": record.getMessage()})
        handler = logging.StreamHandler()
        handler.setFormatter(_Json())
        logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    else:
        logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("kopf._core.engines.peering").setLevel(logging.INFO)  # pause/resume matter
    logging.getLogger(__name__).info("effective settings: %s", settings.model_dump_json())
    asyncio.run(serve(settings))
