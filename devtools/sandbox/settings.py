"""Settings of ``gpucaas sandbox``.

Each class is the one source of its command's options (flag > env > default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.kueue import Queueing

AllocationMode = Literal["device-plugin", "dra"]
Install = Literal["processes", "helm", "none"]


class SandboxSettings(BaseSettings):
    """``gpucaas sandbox``; each field is ``GPUCAAS_SANDBOX_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_SANDBOX_", extra="ignore")

    dir: Path = Field(Path(".sandbox"), description="Where the sandbox keeps its state, logs, tokens and TLS files.")
    api_port: int = Field(8443, ge=0, le=65535, description="HTTPS port of the API.")
    kubeconfig: Path | None = Field(
        None, description="Use this existing cluster instead of starting one; only the control-plane parts run."
    )
    allocation_mode: AllocationMode = Field(
        "device-plugin",
        description="How GPUs reach pods: the device plugin with the scheduler extender, or DRA (the DRA driver on "
        "each node, ResourceClaims allocated by kube-scheduler's structured allocator).",
    )

    real_nodes: int = Field(
        2,
        ge=1,
        le=8,
        description="How many GPU nodes to run, each a real node with a fake HGX H100 board: "
        "containerd, runc and the kubelet run their containers "
        "(the kata-qemu-nvidia-gpu handler runs runc: no VM boots here). Needs root and Debian's runc, "
        "containernetworking-plugins, docker-registry, skopeo and apache2-utils (make install adds them).",
    )
    network: Literal["bridge", "cilium"] = Field(
        "bridge",
        description="The real nodes' network: `bridge` (a bridge per node on this machine; the tenancies' "
        "network policies are objects only) or `cilium` (each real node in a network namespace of its own, "
        "Cilium's agent enforcing the policies on packets; needs `make upstream-cilium`, clang-19 and llvm-19; "
        "the agent sets system-wide sysctls, docs/cilium.md).",
    )
    install: Install = Field(
        "helm",
        description="How the product runs: `helm` (the default on the sandbox's own cluster and bridge network: "
        "the image built from this work tree pushed to the sandbox's registry and the chart installed with "
        "deploy/helm/values-sandbox.yaml by docs/deploy.md's own steps, run with bash, as a platform team installs "
        "it: Deployments and DaemonSets on the sandbox's own cluster; needs make helm, make image's tools and make "
        "postgres), `none` (the same cluster, nodes, registry and pushed image, made ready for the chart, and no "
        "product: install it yourself with docs/deploy.md's steps, their settings for this sandbox in "
        "<dir>/helm/deploy-settings.sh; once the release is deployed the sandbox opens the tenants' view and prints "
        "its banner) or `processes` (each gpucaas service a process on this machine, as its chart's ServiceAccount: "
        "a developer's option, and the default with --kubeconfig, --network cilium or --demo).",
    )
    queueing: Queueing = Field(
        "kueue",
        description="Who decides which waiting container gets the next free GPUs: `kueue` (the default on the "
        "sandbox's own cluster: Kueue's manager, built by make kueue, runs against it with its webhooks, and the "
        "controller and the API queue each container's pod by it: a ClusterQueue per tenancy in one cohort; "
        "docs/queues.md) or `none` (kube-scheduler's queue; each tenancy's ResourceQuota caps its GPUs; the "
        "default with --kubeconfig or --demo).",
    )

    def settle_defaults(self, demo: bool) -> None:
        """The defaults that depend on other options, where the option was not given: the chart
        is installed, and Kueue runs, on the sandbox's own cluster only; the chart install is on the
        bridge network only; the demo's steps read the services as processes, with no queue."""
        own_cluster = self.kubeconfig is None
        if "queueing" not in self.model_fields_set and (not own_cluster or demo):
            self.queueing = "none"
        if "install" not in self.model_fields_set and (not own_cluster or demo or self.network != "bridge"):
            self.install = "processes"
