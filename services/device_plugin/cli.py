"""``gpucaas device-plugin``: the vfio CDI device plugin (a DaemonSet on GPU nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def command(
    sysfs_root: Annotated[Path, typer.Option(envvar="GPUCAAS_SYSFS_ROOT", help="sysfs root.")] = Path("/sys"),
    dev_root: Annotated[Path, typer.Option(envvar="GPUCAAS_DEV_ROOT", help="/dev root (vfio/, iommu).")] = Path("/dev"),
    device_plugin_dir: Annotated[Path, typer.Option(
        envvar="GPUCAAS_DEVICE_PLUGIN_DIR", help="Kubelet device plugin socket directory.")] = Path(
        "/var/lib/kubelet/device-plugins"),
    cdi_dir: Annotated[Path, typer.Option(envvar="GPUCAAS_CDI_DIR", help="CDI spec directory.")] = Path("/var/run/cdi"),
    resource_name: Annotated[str, typer.Option(envvar="GPUCAAS_RESOURCE_NAME",
                                               help="Extended resource name.")] = "nvidia.com/gpu",
    cdi_kind: Annotated[str, typer.Option(envvar="GPUCAAS_CDI_KIND", help="CDI kind vendor/class.")] = "nvidia.com/gpu",
    fabric_socket: Annotated[str, typer.Option(
        envvar="GPUCAAS_FABRIC_SOCKET", help="Fabric service unix socket ('' disables).")] = "/run/gpucaas/fabric.sock",
    fabric_required: Annotated[bool, typer.Option(
        envvar="GPUCAAS_FABRIC_REQUIRED",
        help="Fail Allocate when the partition cannot be activated (fabric service unreachable included).")] = True,
    pod_resources_socket: Annotated[Path, typer.Option(
        envvar="GPUCAAS_POD_RESOURCES_SOCKET", help="Kubelet PodResources socket.")] = Path(
        "/var/lib/kubelet/pod-resources/kubelet.sock"),
    node_name: Annotated[str | None, typer.Option(envvar="GPUCAAS_NODE_NAME", help="Node name (default hostname).")] = None,
    metrics_port: Annotated[int, typer.Option(envvar="GPUCAAS_METRICS_PORT",
                                              help="Prometheus port (-1 disables, 0 picks one).")] = 9402,
    leases: Annotated[bool, typer.Option(envvar="GPUCAAS_LEASES",
                                         help="Keep GPULeases in step and run the firmware check between tenants.")] = False,
    kubeconfig: Annotated[Path | None, typer.Option(envvar="GPUCAAS_KUBECONFIG",
                                                    help="kubeconfig for lease updates (default: in-cluster).")] = None,
    firmware_golden_file: Annotated[Path | None, typer.Option(
        envvar="GPUCAAS_FIRMWARE_GOLDEN_FILE", help="JSON of accepted ROM SHA-256s/versions per PCI device id.")] = None,
    firmware_rom_toggle: Annotated[bool, typer.Option(
        envvar="GPUCAAS_FIRMWARE_ROM_TOGGLE", help="Write 1/0 around the sysfs ROM read (off only for fake trees).")] = True,
    log_level: Annotated[str, typer.Option(envvar="GPUCAAS_LOG_LEVEL", help="Log level.")] = "INFO",
    log_json: Annotated[bool, typer.Option(envvar="GPUCAAS_LOG_JSON", help="JSON log lines.")] = False,
) -> None:
    """Run the vfio CDI device plugin: advertise vfio GPUs, write the CDI spec, serve the kubelet."""
    from pydantic import ValidationError

    from services.device_plugin.main import configure_logging, run
    from services.device_plugin.settings import DevicePluginSettings

    overrides = dict(sysfs_root=sysfs_root, dev_root=dev_root, device_plugin_dir=device_plugin_dir, cdi_dir=cdi_dir,
                     resource_name=resource_name, cdi_kind=cdi_kind, fabric_socket=fabric_socket,
                     fabric_required=fabric_required, pod_resources_socket=pod_resources_socket,
                     metrics_port=metrics_port, leases=leases, kubeconfig=kubeconfig,
                     firmware_golden_file=firmware_golden_file, firmware_rom_toggle=firmware_rom_toggle)
    if node_name:
        overrides["node_name"] = node_name
    try:
        settings = DevicePluginSettings(**overrides)
    except ValidationError as exc:
        for err in exc.errors():
            typer.echo(f"invalid --{'-'.join(str(x) for x in err['loc']).replace('_', '-')}: {err['msg']}", err=True)
        raise typer.Exit(2) from None
    configure_logging(log_level, log_json)
    run(settings)
