"""``gpucaas doctor``: check this node's GPU container prerequisites; exit 1 when one blocks them."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def command(
    sysfs_root: Annotated[Path, typer.Option(envvar="GPUCAAS_SYSFS_ROOT", help="sysfs mount point.")] = Path("/sys"),
    dev_root: Annotated[Path, typer.Option(envvar="GPUCAAS_DEV_ROOT", help="/dev mount point.")] = Path("/dev"),
    proc_root: Annotated[Path, typer.Option(envvar="GPUCAAS_PROC_ROOT", help="/proc mount point.")] = Path("/proc"),
    etc_root: Annotated[Path, typer.Option(envvar="GPUCAAS_ETC_ROOT", help="/etc directory.")] = Path("/etc"),
    containerd_config: Annotated[Path | None, typer.Option(
        envvar="GPUCAAS_CONTAINERD_CONFIG",
        help="containerd config (default: <etc-root>/containerd/config.toml).")] = None,
    cdi_dir: Annotated[Path, typer.Option(envvar="GPUCAAS_CDI_DIR", help="CDI spec directory.")] = Path("/var/run/cdi"),
    kubelet_dir: Annotated[Path, typer.Option(envvar="GPUCAAS_KUBELET_DIR", help="kubelet root directory.")] = Path(
        "/var/lib/kubelet"),
    libvirt_socket: Annotated[Path, typer.Option(envvar="GPUCAAS_LIBVIRT_SOCKET", help="libvirtd socket.")] = Path(
        "/var/run/libvirt/libvirt-sock"),
    fabric_socket: Annotated[Path, typer.Option(envvar="GPUCAAS_FABRIC_SOCKET", help="Fabric service socket.")] = Path(
        "/run/gpucaas/fabric.sock"),
    kubeconfig: Annotated[Path | None, typer.Option(
        envvar="GPUCAAS_DOCTOR_KUBECONFIG",
        help="kubeconfig for the Kubernetes API check (default: in-cluster when run in a pod, else skipped).")] = None,
    min_hugepages_gib: Annotated[int, typer.Option(
        envvar="GPUCAAS_DOCTOR_MIN_HUGEPAGES_GIB", min=0, help="Hugepage memory below which to warn.")] = 16,
    expect_nvswitches: Annotated[bool, typer.Option(
        envvar="GPUCAAS_DOCTOR_EXPECT_NVSWITCHES",
        help="Fail when no NVSwitch / memory controller is found (HGX boards).")] = False,
    only: Annotated[list[str] | None, typer.Option(
        "--check", help="Run only this check (repeatable); ids as in the report.")] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table or json.")] = OutputFormat.table,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every check's details.")] = False,
) -> None:
    """Check this node's prerequisites for GPU containers (run on the node); exit 1 if one blocks them."""
    import sys

    from gpucaas.programs.doctor import report
    from gpucaas.programs.doctor.checks import CHECK_IDS, Options, run_checks
    from gpucaas.programs.doctor.facts import gather
    from gpucaas.programs.doctor.paths import HostPaths

    unknown = sorted(set(only or ()) - set(CHECK_IDS))
    if unknown:
        raise typer.BadParameter(f"unknown check(s) {unknown}; choose from {', '.join(CHECK_IDS)}",
                                 param_hint="--check")
    paths = HostPaths(sysfs_root=sysfs_root, dev_root=dev_root, proc_root=proc_root, etc_root=etc_root,
                      containerd_config=containerd_config, cdi_dir=cdi_dir, kubelet_dir=kubelet_dir,
                      libvirt_socket=libvirt_socket, fabric_socket=fabric_socket, kubeconfig=kubeconfig)
    options = Options(min_hugepages_kib=min_hugepages_gib * 1024 * 1024, expect_nvswitches=expect_nvswitches)
    results = run_checks(gather(paths), options, only=set(only) if only else None)
    if output is OutputFormat.json:
        report.write_json(results, sys.stdout)
    else:
        report.write_table(results, sys.stdout, verbose=verbose)
    raise typer.Exit(report.exit_code(results))
