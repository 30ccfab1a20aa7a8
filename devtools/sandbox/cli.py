"""`gpucaas sandbox`: the whole control plane and real GPU nodes on this machine."""

from __future__ import annotations

import threading
from typing import Annotated

import typer

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from core.stop_signals import on_stop_signal
from devtools.sandbox.settings import SandboxSettings


@settings_command(SandboxSettings, Section(LoggingSettings, "log-"), name="sandbox")
def command(
    settings: SandboxSettings,
    logging_settings: LoggingSettings,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo", help="Run the design's scenario, print each step, and exit (0 only if every step happened)."
        ),
    ] = False,
    allocation: Annotated[
        str | None, typer.Option("--allocation", help="Short for --allocation-mode (device-plugin | dra).")
    ] = None,
) -> None:
    """Run the whole control plane and two GPU nodes (real kubelets, fake HGX H100 boards) on this machine."""
    from rich.console import Console

    from devtools.processes import ProcessFailed
    from devtools.sandbox import chart_install, runner
    from devtools.sandbox.identities import RBACRefused, check_no_refusals
    from devtools.sandbox.nodes import node_names
    from devtools.sandbox.tenant_view import print_banner, print_install_wanted

    console = Console(emoji=False)
    # the console shows progress; the sandbox's own log lines only when something is wrong, unless asked
    configure_logging(logging_settings, level=None if "level" in logging_settings.model_fields_set else "WARNING")
    state_dir, api_port, kubeconfig = settings.dir.resolve(), settings.api_port, settings.kubeconfig
    if allocation is not None:
        if allocation not in ("device-plugin", "dra"):
            console.print(f"[red]gpucaas sandbox: invalid --allocation {allocation!r}: use device-plugin or dra[/]")
            raise typer.Exit(2)
        settings.allocation_mode = allocation  # type: ignore[assignment]
    mode = settings.allocation_mode
    settings.settle_defaults(demo)
    if demo and settings.install == "none":
        console.print("[red]gpucaas sandbox: --demo needs the product: use --install helm or processes[/]")
        raise typer.Exit(2)
    try:
        with console.status("starting the sandbox…") as status:

            def progress(msg: str) -> None:
                status.update(msg)
                console.print(f"[green]✓[/] {msg}")

            sandbox = runner.start(
                state_dir,
                api_port=api_port,
                kubeconfig=kubeconfig,
                progress=progress,
                allocation_mode=mode,
                nodes=() if kubeconfig else node_names(settings.real_nodes),
                network=settings.network,
                install=settings.install,
                queueing=settings.queueing,
            )
    except (ProcessFailed, RBACRefused, TimeoutError, OSError, ValueError) as exc:
        console.print(f"[red]sandbox failed to start:[/] {exc}")
        raise typer.Exit(1) from exc

    if demo:
        from devtools.sandbox.demo import run_demo
        from devtools.sandbox.dra_demo import run_dra_demo

        try:
            console.print(f"[bold]allocation mode: {mode}[/]")
            ok = run_dra_demo(sandbox, console) if mode == "dra" else run_demo(sandbox, console)
            if sandbox.audit_log is not None:
                try:
                    check_no_refusals(sandbox.audit_log, sandbox.identities, settle_timeout=0)
                except RBACRefused as exc:
                    console.print(f"[red]{exc}[/]")
                    ok = False
        finally:
            sandbox.stop()
        raise typer.Exit(0 if ok else 1)

    if sandbox.pending_install is not None:
        print_install_wanted(console, sandbox)
    else:
        print_banner(console, sandbox)

    stopping = threading.Event()
    on_stop_signal(stopping.set)
    while not stopping.wait(1):
        if sandbox.pending_install is not None and chart_install.release_deployed(sandbox.kubeconfig):
            # the caller's docs/deploy.md steps have installed it: the rest of the sandbox's start
            try:
                with console.status("the release is deployed: opening the sandbox…"):
                    runner.open_installed(sandbox)
            except (ProcessFailed, TimeoutError, OSError) as exc:
                console.print(f"[red]the installed product did not come up:[/] {exc}")
                break
            print_banner(console, sandbox)
        # A crashed service (or Kueue) is started again with back-off, and the console says so.
        for supervisor, event in sandbox.revive():
            console.print(f"[yellow]{event.describe()}; see {supervisor.logs_dir}[/]")
    console.print("stopping…")
    sandbox.stop()
    console.print("stopped.")
