"""Settings of the tenancy controller (``gpucaas controller``), env prefix ``GPUCAAS_CONTROLLER_``.

Precedence: command-line flag > environment variable > default. The kubeconfig
also honours the conventional ``KUBECONFIG``; without either, the in-cluster
service account is used.
"""

from __future__ import annotations

import ipaddress
from functools import cache
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.dra import AllocationMode
from core.kueue import Queueing


class ControllerSettings(BaseSettings):
    """Everything ``gpucaas controller`` can be told."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_CONTROLLER_", extra="ignore")

    kubeconfig: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("GPUCAAS_CONTROLLER_KUBECONFIG", "GPUCAAS_KUBECONFIG", "KUBECONFIG"),
        description="kubeconfig file; unset = in-cluster service account.",
    )
    context: str | None = Field(default=None, description="kubeconfig context; unset = current context.")
    peering: str = Field(
        default="gpucaas-controller",
        description="Name of the ClusterKopfPeering object through which replicas elect the one active instance.",
    )
    standalone: bool = Field(default=False, description="Run without peering (a single replica; tests, development).")
    priority: int = Field(
        default=0, description="Peering priority; the highest-priority live replica acts, the others pause."
    )
    liveness: str | None = Field(
        default=None, description="Liveness endpoint served by Kopf, e.g. http://0.0.0.0:8080/healthz; unset = none."
    )
    resync_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="Every Tenancy is compared this often with its children as the watches show them; "
        "a full reconcile (with reads) follows only on a difference (drift repair).",
    )
    retry_delay_s: float = Field(
        default=5.0, gt=0, description="Delay before retrying a reconcile that hit a transient error."
    )
    workers: int = Field(default=16, ge=1, description="Threads running the (synchronous) reconciles.")
    request_timeout_s: float = Field(default=30.0, gt=0, description="Timeout of one Kubernetes API request.")
    watch_timeout_s: int = Field(
        default=300, ge=1, description="Server-side timeout of a watch request, after which it is renewed."
    )
    post_events: bool = Field(
        default=True, description="Post Kubernetes Events for warnings and errors about Tenancies."
    )
    dns_namespace: str = Field(default="kube-system", description="Namespace of the cluster DNS pods.")
    dns_labels: dict[str, str] = Field(
        default_factory=lambda: {"k8s-app": "kube-dns"}, description="Labels selecting the cluster DNS pods."
    )
    node_cidrs: list[str] = Field(
        default_factory=list,
        description="Node address ranges to exclude from internet egress when they are public "
        "(private ranges are always excluded).",
    )
    pod_security_level: str = Field(
        default="restricted",
        description="Pod Security admission level enforced in tenant namespaces (restricted|baseline; "
        "baseline only for tenants that run as root in their VM, see docs/pod-security.md).",
    )
    allocation_mode: AllocationMode = Field(
        default="device-plugin",
        description="How tenant pods get GPUs: device-plugin (the extended resource) or dra (the controller keeps a "
        "ResourceClaimTemplate per GPU count and a quota per DeviceClass in each tenant namespace; docs/dra.md).",
    )
    queueing: Queueing = Field(
        default="none",
        description="Who decides which waiting container gets the next free GPUs: none (kube-scheduler's queue; "
        "the ResourceQuota caps GPUs) or kueue (the controller keeps a ClusterQueue per tenancy in the cohort "
        "gpucaas, with guaranteedGpus as nominal quota, and a LocalQueue in its namespace, the Cohort gpucaas "
        "holding the GPUs nobody is guaranteed, and the container classes' WorkloadPriorityClasses; Kueue must "
        "be installed; docs/queues.md). The API's queueing (GPUCAAS_QUEUEING) must agree.",
    )
    gpu_instance_type: str = Field(
        default="hgx-h100-8",
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="With queueing=kueue: the node.kubernetes.io/instance-type of the GPU nodes; the Kueue "
        "ResourceFlavor of that name selects them, every tenancy's ClusterQueue counts GPUs of it, and the "
        "cohort's pool sums their nvidia.com/gpu.count labels.",
    )
    partition_check: bool = Field(
        default=False,
        description="With queueing=kueue: keep the AdmissionCheck gpucaas-nvlink-partition and list it in every "
        "tenancy's ClusterQueue, so that Kueue admits a container only when a whole free NVLink partition of its "
        "size exists for it; the scheduler extender answers it (GPUCAAS_PLACEMENT_PARTITION_CHECK, which must "
        "be on too, or the ClusterQueues admit nothing; docs/queues.md).",
    )
    api_service_account: str | None = Field(
        default=None,
        description="The API's ServiceAccount as <namespace>/<name>; with api_secrets_cluster_role, it is bound in "
        "every tenant namespace so that the API can keep tenant secrets there (unset = no binding).",
    )
    api_secrets_cluster_role: str | None = Field(
        default=None,
        description="ClusterRole (from the chart) granting the API its rights on Secrets in a tenant namespace.",
    )

    @field_validator("api_service_account")
    @classmethod
    def _sa(cls, value: str | None) -> str | None:
        if value is not None and (value.count("/") != 1 or not all(value.split("/"))):
            raise ValueError(f"api_service_account: {value!r} must be <namespace>/<name>")
        return value

    @field_validator("node_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"node_cidrs: {cidr!r} is not a CIDR such as 203.0.113.0/24") from exc
        return value

    @field_validator("pod_security_level")
    @classmethod
    def _psa(cls, value: str) -> str:
        if value not in ("baseline", "restricted"):
            raise ValueError("pod_security_level: must be 'baseline' or 'restricted'")
        return value


@cache
def get_settings() -> ControllerSettings:
    return ControllerSettings()
