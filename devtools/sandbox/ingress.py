"""The sandbox's ingress controller: Traefik (built from its Go module) serving container endpoints.

Traefik runs as a process on this machine, like the control plane: its Kubernetes Ingress
provider watches the cluster as the ServiceAccount ``traefik/traefik`` (the read rights
Traefik documents for that provider, and the Ingress status it writes), and it reaches the
pods' addresses on the real nodes' bridges directly. It serves HTTPS on a loopback port
(``ingress.json``'s ``address``) with the sandbox CA's wildcard certificate for the
endpoint domain as its default certificate, so any ``<id>-<port>.<domain>`` verifies with
``tls/ca.pem``. A file provider defines the two middlewares the API names on private
endpoints' Ingresses: forwardAuth to the API's ``/v1/endpoint-auth`` (verified against
the sandbox CA) and the removal of the tenant's ``Authorization`` header.

In production the operator's controller (Traefik from its Helm chart, the chart's
Middlewares) does the same in the cluster. The endpoints' CiliumNetworkPolicies are only
objects on the sandbox's default bridge network; with ``--network cilium`` Cilium enforces
them, and the sandbox admits Traefik by its address (docs/cilium.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from devtools.local_cluster.cluster import LocalCluster, free_port
from devtools.local_cluster.objects import create_all
from devtools.processes import Supervisor, http_ready
from devtools.sandbox import identities
from devtools.sandbox.tls import TLSFiles

#: the release upstream/build.sh builds (its TRAEFIK_VERSION; upstream/traefik/go.mod pins it)
TRAEFIK_VERSION = "v3.6.12"
NAMESPACE = "traefik"
SERVICE_ACCOUNT = "traefik"
INGRESS_CLASS = "traefik"
CONTROLLER = "traefik.io/ingress-controller"
AUTH_MIDDLEWARE = "gpucaas-endpoint-auth"
STRIP_MIDDLEWARE = "gpucaas-endpoint-strip"
#: what the API puts on a private endpoint's Ingress in the sandbox (the file provider's middlewares)
AUTH_ANNOTATIONS = {
    "traefik.ingress.kubernetes.io/router.middlewares": f"{AUTH_MIDDLEWARE}@file,{STRIP_MIDDLEWARE}@file"
}
LABELS = {"app.kubernetes.io/name": "traefik"}


def cluster_objects() -> list[dict[str, Any]]:
    """Traefik's namespace, identity and rights (its Ingress provider's documented RBAC), and the IngressClass."""
    name = "gpucaas-sandbox-traefik"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, "labels": LABELS},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "secrets", "nodes"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["ingresses", "ingressclasses"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses/status"], "verbs": ["update"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IngressClass",
            "metadata": {"name": INGRESS_CLASS},
            "spec": {"controller": CONTROLLER},
        },
    ]


def write_config(
    folder: Path, *, cluster: LocalCluster, token: str, tls: TLSFiles, api_url: str, https_port: int, ping_port: int
) -> Path:
    """Traefik's static configuration (and the dynamic file it names); returns the static file."""
    folder.mkdir(parents=True, exist_ok=True)
    dynamic = {
        "tls": {
            "stores": {
                "default": {
                    "defaultCertificate": {"certFile": str(tls.endpoint_cert), "keyFile": str(tls.endpoint_key)}
                }
            }
        },
        "http": {
            "middlewares": {
                AUTH_MIDDLEWARE: {
                    "forwardAuth": {
                        "address": f"{api_url}/v1/endpoint-auth",
                        "trustForwardHeader": False,
                        "tls": {"ca": str(tls.ca_cert)},
                    }
                },
                STRIP_MIDDLEWARE: {"headers": {"customRequestHeaders": {"Authorization": ""}}},
            }
        },
    }
    (folder / "dynamic.yaml").write_text(yaml.safe_dump(dynamic, sort_keys=False))
    token_path = folder / "token"
    token_path.write_text(token)
    token_path.chmod(0o600)
    static = {
        "global": {"checkNewVersion": False, "sendAnonymousUsage": False},
        "entryPoints": {
            "websecure": {"address": f"127.0.0.1:{https_port}", "http": {"tls": {}}},
            "ping": {"address": f"127.0.0.1:{ping_port}"},
        },
        "ping": {"entryPoint": "ping"},
        "log": {"level": "INFO"},
        "accessLog": {"filePath": str(folder / "access.log")},
        "providers": {
            "kubernetesIngress": {
                "endpoint": cluster.server,
                "token": token,
                "certAuthFilePath": str(cluster.pki.ca.cert),
                "ingressClass": INGRESS_CLASS,
                "throttleDuration": "0s",
            },
            "file": {"filename": str(folder / "dynamic.yaml"), "watch": False},
        },
    }
    path = folder / "traefik.yaml"
    path.write_text(yaml.safe_dump(static, sort_keys=False))
    path.chmod(0o600)  # it holds the token
    return path


class Ingress:
    """Traefik, started on a running sandbox cluster; ``address`` is where it serves HTTPS."""

    def __init__(
        self, state_dir: Path, cluster: LocalCluster, admin_kubeconfig: Path, tls: TLSFiles, api_url: str
    ) -> None:
        self.folder = state_dir / "ingress"
        self.cluster = cluster
        self.admin_kubeconfig = admin_kubeconfig
        self.tls = tls
        self.api_url = api_url
        self.https_port = free_port()
        self.ping_port = free_port()
        self.procs = Supervisor(state_dir / "logs")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.https_port}"

    def info(self) -> dict[str, Any]:
        """What ``ingress.json`` holds."""
        from devtools.sandbox.tls import ENDPOINT_DOMAIN

        return {
            "address": self.address,
            "domain": ENDPOINT_DOMAIN,
            "ca_cert": str(self.tls.ca_cert),
            "ingress_class": INGRESS_CLASS,
        }

    def start(self, binary: str, timeout: float = 120.0) -> Ingress:
        create_all(self.admin_kubeconfig, cluster_objects())
        token = identities.mint_token(self.admin_kubeconfig, NAMESPACE, SERVICE_ACCOUNT)
        config = write_config(
            self.folder,
            cluster=self.cluster,
            token=token,
            tls=self.tls,
            api_url=self.api_url,
            https_port=self.https_port,
            ping_port=self.ping_port,
        )
        self.procs.add(
            "traefik", [binary, f"--configFile={config}"], ready=http_ready(f"http://127.0.0.1:{self.ping_port}/ping")
        )
        self.procs.bring_up("traefik", timeout)
        return self

    def stop(self) -> None:
        self.procs.stop()


def write_info(path: Path, ingress: Ingress) -> None:
    path.write_text(json.dumps(ingress.info(), indent=2) + "\n")
