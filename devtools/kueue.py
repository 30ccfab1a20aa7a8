"""Kueue's manager (``sigs.k8s.io/kueue``, built pinned by ``make kueue``) as a supervised host
process against a :class:`~devtools.local_cluster.LocalCluster`, with its admission webhooks.

In a cluster Kueue is a Deployment behind a Service that its webhook configurations name, with
certificates it makes and rotates itself. Here it is a process on loopback, set up the way a
platform team runs it with certificates of their own (``internalCertManagement.enable: false``):

- its CRDs, from the same module version (``<bin>/kueue-manifests/``); those upstream's
  kustomization patches to convert between API versions by webhook convert through this one;
- its own roles (``manager-role``, ``metrics-auth-role``, and ``manager-secrets-role`` in its
  namespace ``kueue-system``), bound to the user its kubeconfig's client certificate names
  (``kueue-controller-manager``);
- a serving certificate signed by the cluster's CA for ``127.0.0.1``, and webhook configurations
  that call ``https://127.0.0.1:<port>/...`` with that CA as ``caBundle``: only the webhooks of
  Kueue's own objects and of pods (the plain-pod integration, docs/queues.md), pods only in the
  namespaces Kueue manages (tenancy namespaces by default: never kube-system);
- no leader election, metrics and the health probe on free loopback ports (``/readyz`` answers
  once the webhook server listens: the readiness check).

Kueue reads its metrics certificate from a fixed path, ``/etc/kueue/metrics/certs`` (a mounted
Secret in its Deployment). The manager therefore runs in a mount namespace of its own where
``/etc`` is the host's with that folder laid over it (a read-only overlay): nothing on the host
changes. That needs root, or unprivileged user namespaces (then it maps the caller to root in
one).
"""

from __future__ import annotations

import base64
import functools
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from core.crds import LABEL_TENANCY
from core.kueue import EXCLUDED_RESOURCE_PREFIXES
from devtools.local_cluster import LocalCluster
from devtools.local_cluster.binaries import BinariesMissing, binary
from devtools.local_cluster.objects import established
from devtools.ports import free_port
from devtools.processes import Supervisor, http_ready
from devtools.waiting import wait_for

USER = "kueue-controller-manager"
#: Kueue's own namespace (its configuration's ``namespace``; upstream's default): nothing runs in it here
NAMESPACE = "kueue-system"
#: Kueue's API group: the webhooks of its own objects are kept, with those of pods.
GROUP = "kueue.x-k8s.io"
#: Tenancy namespaces (the tenancy controller labels each): the only ones whose pods Kueue manages.
TENANCY_NAMESPACES: dict[str, Any] = {"matchExpressions": [{"key": LABEL_TENANCY, "operator": "Exists"}]}
FIELD_MANAGER = "gpucaas-devtools"
#: Where ``cmd/kueue`` reads the metrics server's certificate when it does not make its own.
METRICS_CERT_DIR = "kueue/metrics/certs"


def manifests_dir(bin_dir: Path) -> Path:
    """``<bin>/kueue-manifests``: the CRDs, webhook configurations and roles of the built Kueue."""
    folder = bin_dir / "kueue-manifests"
    if not (folder / "crd" / "bases").is_dir():
        raise BinariesMissing(f"{folder} is missing: run `make kueue`")
    return folder


class Kueue(Supervisor):
    """Kueue's manager for ``cluster``, with its files under ``folder``; ``start()`` returns once it
    is ready and its webhooks are registered."""

    def __init__(
        self,
        cluster: LocalCluster,
        folder: Path,
        *,
        namespace_selector: dict[str, Any] | None = None,
        frameworks: tuple[str, ...] = ("pod",),
    ) -> None:
        self.cluster = cluster
        self.folder = folder.resolve()
        self.namespace_selector = namespace_selector or TENANCY_NAMESPACES
        self.frameworks = frameworks
        super().__init__(self.folder / "logs")
        self.webhook_port = self.metrics_port = self.health_port = 0

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self, timeout: float = 120.0) -> Kueue:
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)
        if not self.webhook_port:
            self.webhook_port, self.metrics_port, self.health_port = free_port(), free_port(), free_port()
        exe = binary("kueue", self.cluster.bin_dir)
        manifests = manifests_dir(self.cluster.bin_dir)
        ca_bundle = base64.b64encode(self.cluster.pki.ca.cert.read_bytes()).decode()
        apply_all(self.cluster.admin_kubeconfig, [*self.crds(manifests, ca_bundle), *self.rbac(manifests)])
        certs = self._certificates()
        kubeconfig = self.cluster.kubeconfig_for(self.folder / "kueue.kubeconfig", USER)
        config = self.folder / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self.configuration(certs), sort_keys=False))
        args: list[object] = [exe, "--config", config, "--zap-log-level", "info"]
        self.add(
            "kueue",
            [*_with_etc_overlay(self.folder / "etc"), *args],
            http_ready(f"http://127.0.0.1:{self.health_port}/readyz"),
            env={"KUBECONFIG": str(kubeconfig)},
        )
        self.start_all(timeout)
        apply_all(self.cluster.admin_kubeconfig, self.webhook_configurations(manifests, ca_bundle))
        return self

    # --- what is written and applied --------------------------------------------------

    def configuration(self, cert_dir: Path) -> dict[str, Any]:
        """Kueue's ``Configuration`` (config.kueue.x-k8s.io/v1beta2, ``apis/config/v1beta2``)."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            # only pods labelled kueue.x-k8s.io/queue-name, and only in these namespaces
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": self.namespace_selector,
            "integrations": {"frameworks": list(self.frameworks)},
            # GPUs only: a tenancy's ClusterQueue covers nvidia.com/gpu, its ResourceQuota the rest
            "resources": {"excludeResourcePrefixes": list(EXCLUDED_RESOURCE_PREFIXES)},
            # tenancies' weights share what nobody is guaranteed (Kueue's default strategies)
            "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
            # the visibility API server (queue positions) reads its certificate from a fixed
            # /visibility and registers as an aggregated API: not run yet
            "featureGates": {"VisibilityOnDemand": False},
        }

    def crds(self, manifests: Path, ca_bundle: str) -> list[dict[str, Any]]:
        """Kueue's CRDs; those its kustomization patches with a conversion webhook convert through ours."""
        crd = manifests / "crd"
        kustomization = yaml.safe_load((crd / "kustomization.yaml").read_text())
        converted = set()
        for patch in kustomization.get("patches") or []:
            doc = yaml.safe_load((crd / patch["path"]).read_text())
            if (doc.get("spec") or {}).get("conversion", {}).get("strategy") == "Webhook":
                converted.add(doc["metadata"]["name"])
        out = []
        for path in sorted((crd / "bases").glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            if doc["metadata"]["name"] in converted:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{self.webhook_url}/convert", "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            out.append(doc)
        return out

    def rbac(self, manifests: Path) -> list[dict[str, Any]]:
        """Kueue's namespace and its own roles (renamed ``kueue-*``, as its release does), bound to :data:`USER`:
        the cluster-wide ``manager-role`` and ``metrics-auth-role``, and ``manager-secrets-role`` in
        its namespace (its informer on Secrets there must sync before its controllers start)."""
        out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
        for name in ("role.yaml", "metrics_auth_role.yaml", "manager_secrets_role.yaml"):
            for role in yaml.safe_load_all((manifests / "rbac" / name).read_text()):
                if not role:
                    continue
                meta = role["metadata"]
                meta["name"] = f"kueue-{meta['name']}"
                binding: dict[str, Any] = {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": meta["name"]},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": meta["name"]},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
                }
                if role["kind"] == "Role":
                    meta["namespace"] = NAMESPACE
                    binding["kind"] = "RoleBinding"
                    binding["metadata"]["namespace"] = NAMESPACE
                out += [role, binding]
        return out

    def webhook_configurations(self, manifests: Path, ca_bundle: str) -> list[dict[str, Any]]:
        """Kueue's Mutating/ValidatingWebhookConfigurations, cut to the webhooks of its own objects
        and of pods, calling this process."""
        out = []
        for doc in yaml.safe_load_all((manifests / "webhook" / "manifests.yaml").read_text()):
            if not doc:
                continue
            kept = []
            for hook in doc["webhooks"]:
                groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
                if not groups <= {"", GROUP}:
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{self.webhook_url}{path}", "caBundle": ca_bundle}
                if "" in groups:  # pods: only where Kueue manages them
                    hook["namespaceSelector"] = self.namespace_selector
                kept.append(hook)
            doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
            doc["webhooks"] = kept
            out.append(doc)
        return out

    def _certificates(self) -> Path:
        """The serving pair as Kueue reads it (``tls.crt``/``tls.key``), for the webhook server,
        and laid over ``/etc`` for the metrics server."""
        pair = self.cluster.pki.issue("kueue-webhook", "kueue-webhook", server_names=("127.0.0.1",), client=False)
        serving = self.folder / "serving-certs"
        for folder in (serving, self.folder / "etc" / METRICS_CERT_DIR):
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pair.cert, folder / "tls.crt")
            shutil.copyfile(pair.key, folder / "tls.key")
            (folder / "tls.key").chmod(0o600)
        return serving


def _with_etc_overlay(layer: Path) -> list[str]:
    """The command prefix that runs what follows with ``layer`` laid over ``/etc`` in a mount
    namespace of its own (exec'd in place: it stays the supervised process)."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    mount = f"mount -t overlay kueue-etc -o lowerdir='{layer}':/etc /etc"
    return ["unshare", *user, "--mount", "--propagation", "private", "sh", "-c", f'{mount} && exec "$@"', "kueue"]


def apply_all(kubeconfig: Path, manifests: list[dict[str, Any]], *, timeout: float = 60.0) -> None:
    """Server-side apply each object (what this process applied before is replaced); a CRD is
    waited for until Established, so that objects of its kinds may follow."""
    from kubernetes import dynamic

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        dyn = dynamic.DynamicClient(api)
        for m in manifests:
            res = dyn.resources.get(api_version=m["apiVersion"], kind=m["kind"])
            res.server_side_apply(
                body=m,
                name=m["metadata"]["name"],
                namespace=m["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )
        crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")

        def served(name: str) -> bool:
            return established(crds.get(name=name).to_dict())

        for m in manifests:
            if m["kind"] == "CustomResourceDefinition":
                name = m["metadata"]["name"]
                wait_for(functools.partial(served, name), timeout, what=f"CRD {name} Established")


__all__ = ["TENANCY_NAMESPACES", "Kueue", "apply_all", "manifests_dir"]
