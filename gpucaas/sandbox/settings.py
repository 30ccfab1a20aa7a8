"""Settings of ``gpucaas sandbox`` and the two sandbox-only processes it starts.

Each class is the one source of its command's options (flag > env > default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

AllocationMode = Literal["device-plugin", "dra"]


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
        ge=0,
        description="How many GPU nodes are real (the first ones; both by default): "
        "containerd, runc and the kubelet run their containers "
        "(the kata-qemu-nvidia-gpu handler runs runc: no VM boots here); the others are "
        "simulated by the node agent. Needs root and Debian's runc, containernetworking-plugins, "
        "docker-registry, skopeo and apache2-utils (make install adds them).",
    )
    network: Literal["bridge", "cilium"] = Field(
        "bridge",
        description="The real nodes' network: `bridge` (a bridge per node on this machine; the tenancies' "
        "network policies are objects only) or `cilium` (each real node in a network namespace of its own, "
        "Cilium's agent enforcing the policies on packets; needs `make upstream-cilium`, clang-19 and llvm-19; "
        "the agent sets system-wide sysctls, docs/cilium.md).",
    )


class NodeAgentSettings(BaseSettings):
    """``gpucaas node-agent`` (sandbox only); each field is ``GPUCAAS_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_", extra="ignore")

    node_name: str = Field(description="Name of the Node object this agent plays.")
    kubelet_dir: Path = Field(
        description="Holds device-plugins/kubelet.sock, pod-resources/kubelet.sock and the checkpoint."
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig of the cluster (default: ~/.kube/config).")
    resource_name: str = Field("nvidia.com/gpu", description="Extended resource the node's device plugin serves.")
    run_seconds: float = Field(
        3.0,
        gt=0,
        validation_alias=AliasChoices("GPUCAAS_SANDBOX_RUN_SECONDS"),
        description="How long a simulated container runs unless its command is `sleep N`.",
    )
    allocation_mode: AllocationMode = Field(
        "device-plugin",
        description="`dra`: also play the kubelet's DRA side (plugin watcher on "
        "<kubelet-dir>/plugins_registry, NodePrepareResources per pod).",
    )
