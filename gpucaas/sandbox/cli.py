"""`gpucaas sandbox`, and the sandbox-only service it starts: `node-agent`."""

from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from core.stop_signals import on_stop_signal
from gpucaas.sandbox.settings import NodeAgentSettings, SandboxSettings

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def _api_client(kubeconfig: str | None) -> ApiClient:
    from core.kube import KubeConnection, new_api_client

    return new_api_client(KubeConnection(kubeconfig=Path(kubeconfig) if kubeconfig else None))


def _cluster_ca(kubeconfig: str | None, kubelet_dir: str | Path) -> Path | None:
    """The cluster's CA from the kubeconfig, as a file: kube-apiserver's kubelet client
    certificate is signed by it (the kubelet's --client-ca-file). None without one."""
    import base64

    import yaml

    if not kubeconfig:
        return None
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = (doc.get("clusters") or [{}])[0].get("cluster") or {}
    if cluster.get("certificate-authority-data"):
        path = Path(kubelet_dir) / "pki" / "client-ca.pem"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        return path
    ca = cluster.get("certificate-authority")
    return Path(ca) if ca else None


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
    """Run the whole control plane and two simulated HGX H100 nodes on this machine."""
    from rich.console import Console

    from gpucaas.sandbox import runner
    from gpucaas.sandbox.identities import RBACRefused, check_no_refusals
    from gpucaas.sandbox.supervisor import ServiceFailed

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
    try:
        with console.status("starting the sandbox…") as status:

            def progress(msg: str) -> None:
                status.update(msg)
                console.print(f"[green]✓[/] {msg}")

            # The demo follows each step through the node agent's records (its DevicesAllocated
            # Event, its checkpoints): its nodes are simulated until it reads the real kubelet's.
            real_nodes = 0 if kubeconfig or demo else settings.real_nodes
            sandbox = runner.start(
                state_dir,
                api_port=api_port,
                kubeconfig=kubeconfig,
                progress=progress,
                allocation_mode=mode,
                real_nodes=real_nodes,
                network=settings.network,
            )
    except (ServiceFailed, RBACRefused, TimeoutError, OSError) as exc:
        console.print(f"[red]sandbox failed to start:[/] {exc}")
        raise typer.Exit(1) from exc

    if demo:
        from gpucaas.sandbox.demo import run_demo
        from gpucaas.sandbox.dra_demo import run_dra_demo

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

    console.print()
    console.print(f"[bold]gpucaas sandbox is running[/]  (state and logs in {state_dir})")
    console.print(f"  API            {sandbox.api_url}   (docs: {sandbox.api_url}/docs)")
    console.print(f"  CA certificate {sandbox.tls.ca_cert}")
    console.print(f"  admin token    {sandbox.admin_token}")
    console.print(f"  tenant token   {sandbox.tenant_token}   (tenancy '{runner.DEMO_TENANCY}')")
    console.print(f"  kubeconfig     {sandbox.kubeconfig}")
    for node in sandbox.nodes:
        real = sandbox.real_nodes.get(node.name)
        kind = (
            "real: kubelet, containerd and runc run its containers (the Kata handler runs runc: no VM)"
            + (f"; network: Cilium, at {real.node_ip}" if sandbox.network == "cilium" else "")
            if real is not None
            else "simulated by the node agent: no container runs"
        )
        console.print(f"  node           {node.name}  {kind}")
    if sandbox.registries is not None:
        console.print(f"  registry       {state_dir / 'registry.json'}  (a private image and its credentials)")
    if sandbox.ingress is not None:
        console.print(
            f"  endpoints      https://<id>-<port>.{sandbox.ingress.info()['domain']} served by Traefik at "
            f"{sandbox.ingress.address}  ({state_dir / 'ingress.json'})"
        )
    console.print()
    console.print("Try, as the tenant 'demo':")
    console.print("  " + shlex.join(runner.tenant_curl(sandbox)), soft_wrap=True, markup=False, highlight=False)
    console.print("and as the admin, with caasctl (in .venv/bin: `source .venv/bin/activate` first):")
    console.print("  " + runner.env_summary(sandbox).replace("\n", "\n  "), soft_wrap=True)
    console.print("  caasctl nodes; caasctl containers list; caasctl partitions list --node gpu-node-a; caasctl gpus")
    console.print("\nCtrl-C stops everything.")

    stopping = threading.Event()
    on_stop_signal(stopping.set)
    while not stopping.wait(1):
        # A crashed service is started again with back-off, and the console says so.
        for event in sandbox.supervisor.revive():
            console.print(f"[yellow]{event.describe()}; see {state_dir / 'logs'}[/]")
    console.print("stopping…")
    sandbox.stop()
    console.print("stopped.")


@settings_command(NodeAgentSettings, Section(LoggingSettings, "log-"), name="node-agent")
def node_agent_command(settings: NodeAgentSettings, logging_settings: LoggingSettings) -> None:
    """(sandbox) Play a GPU node's kubelet: node object, device plugin registration, pod lifecycle."""
    from gpucaas.sandbox.node_agent import NodeAgent

    configure_logging(logging_settings)
    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    api = _api_client(kubeconfig)
    dra = None
    if settings.allocation_mode == "dra":
        from core.kube import Kube
        from gpucaas.sandbox.dra_kubelet import DraKubelet

        dra = DraKubelet(
            Kube.of(api), settings.node_name, settings.kubelet_dir / "plugins_registry", settings.kubelet_dir
        )
    agent = NodeAgent(
        api,
        settings.node_name,
        settings.kubelet_dir,
        settings.resource_name,
        settings.run_seconds,
        dra=dra,
        client_ca=_cluster_ca(kubeconfig, settings.kubelet_dir),
    )
    on_stop_signal(agent.stop)
    agent.run()
