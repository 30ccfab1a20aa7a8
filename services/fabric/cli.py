"""``gpucaas fabric``: the fabric service (a privileged DaemonSet on each GPU node).

Runs the Fabric Manager service VM under libvirt, serves the node-local API on a
unix socket (partitions follow allocations) and publishes the node's
FabricState. Every option has an env var ``GPUCAAS_FABRIC_<NAME>``; unset
options fall back to the settings' defaults (see services/fabric/settings.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_E = "GPUCAAS_FABRIC_"


def command(
    node_name: Annotated[str | None, typer.Option(envvar=f"{_E}NODE_NAME", help="Node name (FabricState name).")] = None,
    socket: Annotated[Path | None, typer.Option(envvar=f"{_E}SOCKET", help="Local API unix socket.")] = None,
    state_dir: Annotated[Path | None, typer.Option(envvar=f"{_E}STATE_DIR", help="Activation records directory.")] = None,
    sysfs_root: Annotated[Path | None, typer.Option(envvar=f"{_E}SYSFS_ROOT", help="sysfs root.")] = None,
    fm_backend: Annotated[str | None, typer.Option(
        envvar=f"{_E}FM_BACKEND", help="auto | nvfm | simulator.")] = None,
    fm_address: Annotated[str | None, typer.Option(
        envvar=f"{_E}FM_ADDRESS", help="Fabric Manager API host:port inside the service VM.")] = None,
    board: Annotated[Path | None, typer.Option(
        envvar=f"{_E}BOARD", help="Simulator: board.json giving physical id -> PCI.")] = None,
    vm: Annotated[bool | None, typer.Option(
        "--vm/--no-vm", envvar=f"{_E}VM_ENABLED", help="Run the service VM under libvirt.")] = None,
    libvirt_uri: Annotated[str | None, typer.Option(envvar=f"{_E}LIBVIRT_URI", help="libvirt URI.")] = None,
    domain_name: Annotated[str | None, typer.Option(envvar=f"{_E}DOMAIN_NAME", help="Service VM domain name.")] = None,
    domain_type: Annotated[str | None, typer.Option(
        envvar=f"{_E}DOMAIN_TYPE", help="kvm | qemu (software emulation) | test.")] = None,
    disk_image: Annotated[Path | None, typer.Option(envvar=f"{_E}DISK_IMAGE", help="Service VM disk image.")] = None,
    vcpus: Annotated[int | None, typer.Option(envvar=f"{_E}VCPUS", help="Service VM vCPUs.")] = None,
    memory_mib: Annotated[int | None, typer.Option(envvar=f"{_E}MEMORY_MIB", help="Service VM memory (MiB).")] = None,
    fm_channel: Annotated[str | None, typer.Option(
        envvar=f"{_E}FM_CHANNEL", help="network | unix | none: how the host reaches the FM API.")] = None,
    nvswitches: Annotated[str | None, typer.Option(
        envvar=f"{_E}NVSWITCHES", help="Comma-separated NVSwitch PCI addresses (default: discovered).")] = None,
    memory_controller: Annotated[str | None, typer.Option(
        envvar=f"{_E}MEMORY_CONTROLLER", help="NVSwitch memory controller PCI address (default: discovered).")] = None,
    publish: Annotated[bool | None, typer.Option(
        "--publish/--no-publish", envvar=f"{_E}PUBLISH", help="Publish the FabricState resource.")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(
        envvar=f"{_E}KUBECONFIG", help="kubeconfig (default: in-cluster).")] = None,
    log_level: Annotated[str, typer.Option(envvar="GPUCAAS_LOG_LEVEL", help="Log level.")] = "INFO",
) -> None:
    """Run the node's fabric service: service VM, Fabric Manager partitions, local API."""
    import logging
    import signal
    import threading

    from pydantic import ValidationError

    from services.fabric.errors import FabricServiceError
    from services.fabric.runtime import FabricNode
    from services.fabric.settings import FabricSettings

    import os

    from services.fabric.runtime import missing_library_error

    # No silent simulator (issue 15): without libnvfm the default backend cannot run; say so in
    # one line before anything else is validated. Keep this check when the CLI is generated.
    problem = missing_library_error(fm_backend or os.environ.get(f"{_E}FM_BACKEND"), os.environ.get(f"{_E}FM_LIBRARY"))
    if problem:
        typer.echo(f"gpucaas fabric: {problem}", err=True)
        raise typer.Exit(1)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = {
        "node_name": node_name, "socket": socket, "state_dir": state_dir, "sysfs_root": sysfs_root,
        "fm_backend": fm_backend, "fm_address": fm_address, "board": board, "vm_enabled": vm,
        "libvirt_uri": libvirt_uri, "domain_name": domain_name, "domain_type": domain_type,
        "disk_image": disk_image, "vcpus": vcpus, "memory_mib": memory_mib, "fm_channel": fm_channel,
        "nvswitches": nvswitches, "memory_controller": memory_controller, "publish": publish,
        "kubeconfig": kubeconfig,
    }
    try:
        settings = FabricSettings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc

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
