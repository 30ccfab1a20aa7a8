"""``gpucaas scheduler-extender``: serve the partition-aware kube-scheduler extender."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def command(
    host: Annotated[str, typer.Option(envvar="GPUCAAS_PLACEMENT_HOST", help="Bind address.")] = "0.0.0.0",
    port: Annotated[
        int, typer.Option(envvar="GPUCAAS_PLACEMENT_PORT", help="TCP port (0 = ephemeral).")
    ] = 8888,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            envvar=["GPUCAAS_PLACEMENT_KUBECONFIG", "GPUCAAS_KUBECONFIG"],
            help="kubeconfig (default: in-cluster, then $KUBECONFIG or ~/.kube/config).",
        ),
    ] = None,
    gpu_resource: Annotated[
        str, typer.Option(envvar="GPUCAAS_PLACEMENT_GPU_RESOURCE", help="Extended resource of GPUs.")
    ] = "nvidia.com/gpu",
    bind: Annotated[
        bool,
        typer.Option(envvar="GPUCAAS_PLACEMENT_BIND", help="Serve the bind verb (bind pods through the API)."),
    ] = True,
    log_level: Annotated[str, typer.Option(envvar="GPUCAAS_PLACEMENT_LOG_LEVEL", help="Logging level.")] = "INFO",
) -> None:
    """Serve the kube-scheduler extender that places GPU pods on whole NVLink partitions."""
    from services.placement.main import run
    from services.placement.settings import PlacementSettings

    try:
        settings = PlacementSettings(
            host=host, port=port, kubeconfig=kubeconfig, gpu_resource=gpu_resource, bind=bind, log_level=log_level
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run(settings)
