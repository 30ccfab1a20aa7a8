"""``gpucaas doctor``: check this node's GPU container prerequisites; exit 1 when one blocks them."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from core.settings_cli import settings_command
from gpucaas.doctor.settings import DoctorSettings


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


@settings_command(DoctorSettings, name="doctor")
def command(
    settings: DoctorSettings,
    only: Annotated[
        list[str] | None, typer.Option("--check", help="Run only this check (repeatable); ids as in the report.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table or json.")] = OutputFormat.table,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every check's details.")] = False,
) -> None:
    """Check this node's prerequisites for GPU containers (run on the node); exit 1 if one blocks them."""
    import sys

    from gpucaas.doctor import report
    from gpucaas.doctor.checks import CHECK_IDS, Options, run_checks
    from gpucaas.doctor.facts import gather
    from gpucaas.doctor.paths import HostPaths

    unknown = sorted(set(only or ()) - set(CHECK_IDS))
    if unknown:
        raise typer.BadParameter(
            f"unknown check(s) {unknown}; choose from {', '.join(CHECK_IDS)}", param_hint="--check"
        )
    paths = HostPaths(
        sysfs_root=settings.sysfs_root,
        dev_root=settings.dev_root,
        proc_root=settings.proc_root,
        etc_root=settings.etc_root,
        containerd_config=settings.containerd_config,
        cdi_dir=settings.cdi_dir,
        kubelet_dir=settings.kubelet_dir,
        libvirt_socket=settings.libvirt_socket,
        fabric_socket=settings.fabric_socket,
        kubeconfig=settings.kubeconfig,
    )
    options = Options(
        min_hugepages_kib=settings.min_hugepages_gib * 1024 * 1024, expect_nvswitches=settings.expect_nvswitches
    )
    results = run_checks(gather(paths), options, only=set(only) if only else None)
    if output is OutputFormat.json:
        report.write_json(results, sys.stdout)
    else:
        report.write_table(results, sys.stdout, verbose=verbose)
    raise typer.Exit(report.exit_code(results))
