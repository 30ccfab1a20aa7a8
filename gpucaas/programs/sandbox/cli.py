"""`gpucaas sandbox`, and the two sandbox-only services it starts: `node-agent`, `sandbox-scheduler`."""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _api_client(kubeconfig: str | None):  # noqa: ANN202
    from kubernetes import config

    return config.new_client_from_config(kubeconfig) if kubeconfig else config.new_client_from_config()


def _stop_on_signals(stop) -> None:  # noqa: ANN001
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop())


def command(
    demo: Annotated[bool, typer.Option("--demo", help="Run the seed's scenario, print each step, and exit (0 only if every step happened).")] = False,
    state_dir: Annotated[Path, typer.Option("--dir", envvar="GPUCAAS_SANDBOX_DIR", help="Where the sandbox keeps its state, logs, tokens and TLS files.")] = Path(".sandbox"),
    api_port: Annotated[int, typer.Option(envvar="GPUCAAS_SANDBOX_API_PORT", help="HTTPS port of the API.")] = 8443,
    kubeconfig: Annotated[Path | None, typer.Option(envvar="GPUCAAS_SANDBOX_KUBECONFIG", help="Use this real cluster instead of the emulator; only the control-plane parts run.")] = None,
) -> None:
    """Run the whole control plane and two simulated HGX H100 nodes on this machine."""
    from rich.console import Console

    from gpucaas.programs.sandbox import runner
    from gpucaas.programs.sandbox.supervisor import ServiceFailed

    console = Console(emoji=False)
    logging.basicConfig(level=logging.WARNING, format=_FORMAT)
    state_dir = state_dir.resolve()
    try:
        with console.status("starting the sandbox…") as status:
            def progress(msg: str) -> None:
                status.update(msg)
                console.print(f"[green]✓[/] {msg}")

            sandbox = runner.start(state_dir, api_port=api_port, kubeconfig=kubeconfig, progress=progress)
    except (ServiceFailed, TimeoutError, OSError) as exc:
        console.print(f"[red]sandbox failed to start:[/] {exc}")
        raise typer.Exit(1) from exc

    if demo:
        from gpucaas.programs.sandbox.demo import run_demo

        try:
            ok = run_demo(sandbox, console)
        finally:
            sandbox.stop()
        raise typer.Exit(0 if ok else 1)

    console.print()
    console.print(f"[bold]gpucaas sandbox is running[/]  (state and logs in {state_dir})")
    console.print(f"  API            {sandbox.api_url}   (docs: {sandbox.api_url}/docs)")
    console.print(f"  CA certificate {sandbox.tls.ca_cert}")
    console.print(f"  admin token    {sandbox.admin_token}")
    console.print(f"  tenant token   {sandbox.tenant_token}   (tenancy '{runner.DEMO_TENANCY}')")
    console.print(f"  kubeconfig     {sandbox.kubeconfig}")
    console.print()
    console.print("Try, as the tenant 'demo':")
    console.print("  " + shlex.join(runner.tenant_curl(sandbox)), soft_wrap=True, markup=False, highlight=False)
    console.print("and as the admin, with caasctl (in .venv/bin: `source .venv/bin/activate` first):")
    console.print("  " + runner.env_summary(sandbox).replace("\n", "\n  "), soft_wrap=True)
    console.print("  caasctl nodes; caasctl containers list; caasctl partitions list --node gpu-node-a; caasctl gpus")
    console.print("\nCtrl-C stops everything.")

    stopping = threading.Event()
    _stop_on_signals(stopping.set)
    while not stopping.wait(2):
        dead = sandbox.supervisor.check_alive()
        if dead:
            console.print(f"[red]service(s) exited: {', '.join(dead)}; see {state_dir / 'logs'}[/]")
            break
    console.print("stopping…")
    sandbox.stop()
    console.print("stopped.")


def node_agent_command(
    node_name: Annotated[str, typer.Option(envvar="GPUCAAS_NODE_NAME", help="Name of the Node object this agent plays.")],
    kubelet_dir: Annotated[Path, typer.Option(envvar="GPUCAAS_KUBELET_DIR", help="Holds device-plugins/kubelet.sock, pod-resources/kubelet.sock and the checkpoint.")],
    kubeconfig: Annotated[str | None, typer.Option(envvar="GPUCAAS_KUBECONFIG")] = None,
    resource_name: Annotated[str, typer.Option(envvar="GPUCAAS_RESOURCE_NAME")] = "nvidia.com/gpu",
    run_seconds: Annotated[float, typer.Option(envvar="GPUCAAS_SANDBOX_RUN_SECONDS", help="How long a simulated container runs unless its command is `sleep N`.")] = 3.0,
) -> None:
    """(sandbox) Play a GPU node's kubelet: node object, device plugin registration, pod lifecycle."""
    from gpucaas.programs.sandbox.node_agent import NodeAgent

    logging.basicConfig(level=logging.INFO, format=_FORMAT)
    agent = NodeAgent(_api_client(kubeconfig), node_name, kubelet_dir, resource_name, run_seconds)
    _stop_on_signals(agent.stop)
    agent.run()


def scheduler_command(
    extender_url: Annotated[str | None, typer.Option(envvar="GPUCAAS_EXTENDER_URL", help="Scheduler extender base URL (filter/prioritize).")] = None,
    kubeconfig: Annotated[str | None, typer.Option(envvar="GPUCAAS_KUBECONFIG")] = None,
    resource_name: Annotated[str, typer.Option(envvar="GPUCAAS_RESOURCE_NAME")] = "nvidia.com/gpu",
) -> None:
    """(sandbox) Bind pending pods to nodes, asking the scheduler extender, as kube-scheduler would."""
    from gpucaas.programs.sandbox.scheduler import SandboxScheduler

    logging.basicConfig(level=logging.INFO, format=_FORMAT)
    sched = SandboxScheduler(_api_client(kubeconfig), extender_url, resource_name)
    _stop_on_signals(sched.stop)
    sched.run()
