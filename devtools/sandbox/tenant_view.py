"""The sandbox's last stage, the tenants' view: how a tenant and the admin reach what runs.

The API's TLS files and the admin token are made first (the API serves and checks them);
once the product runs: the ingress controller for containers' endpoints, the demo tenancy and
its token, and the files the sandbox leaves in its state folder for its users. Their names,
and the banner's first line, are what the docs, the tests and users' scripts read:

  ``kubeconfig``     the admin's kubeconfig of the sandbox's cluster
  ``admin-token``    the API's admin token (kept across runs)
  ``tenant-token``   a token of the demo tenancy
  ``tls/ca.pem``     the CA the API and the endpoints are served under (:mod:`.tls`)
  ``caasctl.yaml``   a caasctl config: URL, admin token, CA, fabric sockets
  ``registry.json``  the private registry's image and credentials
  ``ingress.json``   where the ingress controller serves the endpoints
"""

from __future__ import annotations

import json
import secrets
import shlex
import urllib.error
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from core.kueue import COHORT
from devtools.local_cluster.binaries import binary
from devtools.sandbox.ingress import TRAEFIK_VERSION, Ingress, write_info as write_ingress_info
from devtools.sandbox.tls import ENDPOINT_DOMAIN, TLSFiles, ensure_self_signed

if TYPE_CHECKING:
    from rich.console import Console

    from devtools.sandbox.runner import Plan, Sandbox

KUBECONFIG = "kubeconfig"
ADMIN_TOKEN = "admin-token"
TENANT_TOKEN = "tenant-token"
TLS_DIR = "tls"
CAASCTL_CONFIG = "caasctl.yaml"
REGISTRY_INFO = "registry.json"
INGRESS_INFO = "ingress.json"
DEMO_TENANCY = "demo"


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads: tokens, kubeconfigs, registry passwords."""
    path.write_text(text)
    path.chmod(0o600)


def credentials(state_dir: Path, admin_token: str | None) -> tuple[TLSFiles, str]:
    """The API's TLS files (``tls/``) and its admin token: ``admin_token``, else the one kept
    in ``admin-token``, else a new one; written back to ``admin-token``."""
    tls = ensure_self_signed(state_dir / TLS_DIR)
    token_file = state_dir / ADMIN_TOKEN
    admin_token = admin_token or (token_file.read_text().strip() if token_file.exists() else None)
    admin_token = admin_token or f"gca_{secrets.token_urlsafe(32)}"
    write_private(token_file, admin_token + "\n")
    return tls, admin_token


def publish_kubeconfig(sandbox: Sandbox) -> None:
    """``kubeconfig``: the admin's, once the sandbox's own cluster runs (later stages use it too)."""
    assert sandbox.cluster is not None
    write_private(sandbox.state_dir / KUBECONFIG, sandbox.cluster.admin_kubeconfig.read_text())


def open_tenant_view(sandbox: Sandbox, plan: Plan) -> None:
    """The ingress controller and the registry's credentials (own cluster), the demo tenancy's
    token and the caasctl config."""
    say, state_dir = plan.say, sandbox.state_dir
    if sandbox.cluster is not None:
        say(
            f"starting the ingress controller (Traefik {TRAEFIK_VERSION}) for container endpoints "
            f"https://<id>-<port>.{ENDPOINT_DOMAIN}"
        )
        ingress = sandbox.ingress = Ingress(
            state_dir, sandbox.cluster, sandbox.kubeconfig, sandbox.tls, sandbox.api_url
        )
        ingress.start(binary("traefik"))
        write_ingress_info(state_dir / INGRESS_INFO, ingress)
    if sandbox.registries is not None:
        write_private(state_dir / REGISTRY_INFO, json.dumps(sandbox.registries.info(), indent=2) + "\n")
    say(f"creating the tenancy {DEMO_TENANCY!r} and a tenant token")
    sandbox.tenant_token = ensure_demo_tenant(sandbox)
    write_private(state_dir / TENANT_TOKEN, sandbox.tenant_token + "\n")
    write_caasctl_config(sandbox)


def ensure_demo_tenant(sandbox: Sandbox) -> str:
    """The demo tenancy (made once) and a new token of it."""
    try:
        sandbox.api("POST", "/v1/admin/tenancies", {"name": DEMO_TENANCY, "gpu_quota": 16})
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
    token: str = sandbox.api("POST", f"/v1/admin/tenancies/{DEMO_TENANCY}/tokens", {})["token"]
    return token


def caasctl_config_path(sandbox: Sandbox) -> Path:
    return sandbox.state_dir / CAASCTL_CONFIG


def write_caasctl_config(sandbox: Sandbox) -> Path:
    """A caasctl config for this sandbox: `export GPUCAAS_CONFIG=<this file>` and caasctl just works."""
    path = caasctl_config_path(sandbox)
    write_private(
        path,
        yaml.safe_dump(
            {
                "url": sandbox.api_url,
                "token": sandbox.admin_token,
                "ca_cert": str(sandbox.tls.ca_cert),
                "nodes": {n.name: {"fabric_socket": str(n.fabric_socket)} for n in sandbox.nodes},
            },
            sort_keys=False,
        ),
    )
    return path


def env_summary(sandbox: Sandbox) -> str:
    return "\n".join(
        [
            f"export GPUCAAS_CONFIG={caasctl_config_path(sandbox)}   # caasctl: URL, admin token, CA, fabric sockets",
            f"export KUBECONFIG={sandbox.kubeconfig}   # kubectl/the kubernetes client: the sandbox's cluster (admin)",
        ]
    )


def tenant_curl(sandbox: Sandbox) -> list[str]:
    """The first request a tenant makes (the sandbox prints it; tests run it): submit a 2-GPU
    container. JSON needs its Content-Type, or the API answers 422."""
    body = '{"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "gpus": 2}'
    return [
        "curl",
        "-sS",
        "--fail-with-body",
        "--cacert",
        str(sandbox.tls.ca_cert),
        "-H",
        f"Authorization: Bearer {sandbox.tenant_token}",
        "-H",
        "Content-Type: application/json",
        "-d",
        body,
        f"{sandbox.api_url}/v1/containers",
    ]


def print_install_wanted(console: Console, sandbox: Sandbox) -> None:
    """What ``gpucaas sandbox --install none`` prints once its cluster is ready for the chart:
    how to install the product with docs/deploy.md's steps."""
    settings = sandbox.state_dir / "helm" / "deploy-settings.sh"
    console.print()
    console.print(f"[bold]gpucaas sandbox is ready for the product[/]  (state and logs in {sandbox.state_dir})")
    console.print(f"  kubeconfig     {sandbox.kubeconfig}")
    console.print(f"  settings       {settings}  (docs/deploy.md's step 1, for this sandbox)")
    console.print()
    console.print(
        "Install it with docs/deploy.md's steps 2 to 6, from this repository's root, in a shell that has run:"
    )
    console.print(
        f"  export KUBECONFIG={sandbox.kubeconfig} PATH={shlex.quote(str(Path(binary('helm')).parent))}:$PATH; "
        f". {shlex.quote(str(settings))}",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    console.print("Once the release is deployed the sandbox opens the API and the tenants' view, and says so.")
    console.print("\nCtrl-C stops everything.")


def print_banner(console: Console, sandbox: Sandbox) -> None:
    """What ``gpucaas sandbox`` prints once everything runs: where each part is, and a first try."""
    state_dir = sandbox.state_dir
    console.print()
    console.print(f"[bold]gpucaas sandbox is running[/]  (state and logs in {state_dir})")
    console.print(f"  API            {sandbox.api_url}   (docs: {sandbox.api_url}/docs)")
    console.print(f"  CA certificate {sandbox.tls.ca_cert}")
    console.print(f"  admin token    {sandbox.admin_token}")
    console.print(f"  tenant token   {sandbox.tenant_token}   (tenancy '{DEMO_TENANCY}')")
    console.print(f"  kubeconfig     {sandbox.kubeconfig}")
    if sandbox.installed is not None:
        console.print(f"  product        installed with the chart: {sandbox.installed}")
    else:
        console.print(
            f"  product        the gpucaas services as processes on this machine  ({sandbox.supervisor.logs_dir})"
        )
    for node in sandbox.nodes:
        real = sandbox.real_nodes[node.name]
        kind = "real: kubelet, containerd and runc run its containers (the Kata handler runs runc: no VM)" + (
            f"; network: Cilium, at {real.node_ip}" if sandbox.network == "cilium" else ""
        )
        console.print(f"  node           {node.name}  {kind}")
    if sandbox.kueue is not None:
        console.print(
            f"  queues         Kueue queues the containers: a ClusterQueue per tenancy in the cohort {COHORT}, "
            f"its guarantee as nominal quota  ({sandbox.kueue.folder / 'logs'})"
        )
    if sandbox.registries is not None:
        console.print(f"  registry       {state_dir / REGISTRY_INFO}  (a private image and its credentials)")
    if sandbox.ingress is not None:
        console.print(
            f"  endpoints      https://<id>-<port>.{sandbox.ingress.info()['domain']} served by Traefik at "
            f"{sandbox.ingress.address}  ({state_dir / INGRESS_INFO})"
        )
    console.print()
    console.print("Try, as the tenant 'demo':")
    console.print("  " + shlex.join(tenant_curl(sandbox)), soft_wrap=True, markup=False, highlight=False)
    console.print("and as the admin, with caasctl (in .venv/bin: `source .venv/bin/activate` first):")
    console.print("  " + env_summary(sandbox).replace("\n", "\n  "), soft_wrap=True)
    console.print("  caasctl nodes; caasctl containers list; caasctl partitions list --node gpu-node-a; caasctl gpus")
    console.print("\nCtrl-C stops everything.")
