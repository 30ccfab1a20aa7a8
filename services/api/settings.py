"""Configuration of the API service: one pydantic-settings class, env prefix ``GPUCAAS_``."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from pydantic import Field, IPvAnyNetwork, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.dra import AllocationMode
from core.kueue import Queueing
from services.api.domain import endpoints, sizing, volumes

PLACEHOLDER_SECRETS = frozenset({"changeme", "changethis", "change-me", "secret", "password", "admin", "token"})
# The limits library's Redis storages (services/api/edge/limits.py uses their asyncio variants).
RATE_LIMIT_STORAGE_SCHEMES = ("redis", "rediss", "redis+unix", "redis+sentinel", "redis+cluster")


class Settings(BaseSettings):
    """Every knob of ``gpucaas api``; each field maps to ``GPUCAAS_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the HTTP(S) server binds to.")
    port: int = Field(8443, ge=0, le=65535, description="TCP port (0 = ephemeral).")
    tls_cert: Path | None = Field(None, description="PEM certificate; HTTPS when given with tls_key.")
    tls_key: Path | None = Field(None, description="PEM private key for tls_cert.")
    database_url: str = Field(
        "sqlite:///gpucaas.db",
        description="SQLAlchemy URL: a SQLite file by default, postgresql+psycopg://... in production.",
    )
    migrate_on_start: bool = Field(
        True,
        description="Bring the database schema to head at start-up (alembic upgrade head, under the "
        "database's migration lock). Off: leave it to `gpucaas api migrate` (the chart's hook Job) and wait "
        "until the schema is at head before serving.",
    )
    schema_wait_seconds: float = Field(
        300.0, gt=0, description="With migrate_on_start off, how long to wait for the schema before giving up."
    )
    kubeconfig: Path | None = Field(
        None, description="kubeconfig file; unset = in-cluster config, else ~/.kube/config."
    )
    admin_token: SecretStr | None = Field(
        None, description="The first admin token; generated and printed once when unset."
    )
    admin_token_file: Path | None = Field(
        None, description="Where a generated admin token is also written (mode 0600)."
    )
    gpu_resource: str = Field("nvidia.com/gpu", description="Extended resource name pods request GPUs by.")
    allocation_mode: AllocationMode = Field(
        "device-plugin",
        description="How pods get GPUs: device-plugin (the extended resource gpu_resource) or "
        "dra (a ResourceClaim from the tenant namespace's template gpucaas-gpus-N; Kubernetes 1.34+, docs/dra.md).",
    )
    queueing: Queueing = Field(
        "none",
        description="Who decides which waiting container gets the next free GPUs: none (kube-scheduler's queue) "
        "or kueue (each pod is labelled kueue.x-k8s.io/queue-name: default, its tenancy's LocalQueue, and waits "
        "gated until Kueue admits it; the tenancy controller's GPUCAAS_CONTROLLER_QUEUEING must agree; "
        "docs/queues.md).",
    )
    runtime_class: str = Field("kata-qemu-nvidia-gpu", description="RuntimeClass of tenant pods.")
    tenant_run_as_user: int = Field(
        1000,
        ge=0,
        description="UID/GID tenant containers run as inside their VM (Pod Security restricted); "
        "0 = the image's own user, root allowed (tenant namespaces must then enforce baseline).",
    )
    default_gpu_quota: int = Field(8, ge=0, description="GPU quota of tenancies created on the fly.")
    default_pod_quota: int = Field(50, ge=1, description="Pod quota of tenancies created on the fly.")
    volume_storage_class: str = Field(
        "gpucaas-volumes",
        min_length=1,
        max_length=200,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="StorageClass of tenant volumes (POST /v1/volumes); production: one of the NFS CSI driver "
        "nfs.csi.k8s.io, so that every volume is an NFS export (docs/deploy.md).",
    )
    volume_storage_quota: str = Field(
        "100Gi",
        description="Storage a tenancy's volumes may ask for together (a quantity); the tenancy's "
        "ResourceQuota caps the storage class's requests.storage at the same figure.",
    )
    max_volumes: int = Field(
        10,
        ge=0,
        le=1000,
        description="Most volumes a tenancy may have (0: no volumes); the ResourceQuota "
        "counts the storage class's claims against the same figure.",
    )
    endpoint_domain: str = Field(
        "endpoints.gpucaas.internal",
        min_length=1,
        max_length=200,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="DNS domain of container endpoints: a declared port is served at "
        "https://<container id>-<port>.<domain> (a wildcard DNS record and certificate for *.<domain> point at "
        "the ingress controller, docs/endpoints.md).",
    )
    endpoint_ingress_class: str = Field(
        "traefik", min_length=1, max_length=253, description="IngressClass of the endpoints' Ingresses."
    )
    endpoint_annotations: dict[str, str] = Field(
        default_factory=lambda: {"traefik.ingress.kubernetes.io/router.tls": "true"},
        description="Annotations of every endpoint Ingress (JSON object in the environment).",
    )
    endpoint_auth_annotations: dict[str, str] = Field(
        default_factory=lambda: {
            "traefik.ingress.kubernetes.io/router.middlewares": "gpucaas-system-gpucaas-endpoint-auth@kubernetescrd"
        },
        description="Annotations that make the ingress controller ask GET /v1/endpoint-auth before serving a "
        "private endpoint (the chart's Traefik Middleware by default; JSON object in the environment). Without "
        "them a private endpoint would answer anyone: the API refuses to start with an empty value.",
    )
    endpoint_ingress_namespace: str = Field(
        "traefik",
        min_length=1,
        max_length=63,
        description="Namespace of the ingress controller's pods: the only peers an endpoint's network policy admits.",
    )
    endpoint_ingress_labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "traefik"},
        description="Labels of the ingress controller's pods (JSON object in the environment).",
    )
    endpoint_ingress_cidrs: list[IPvAnyNetwork] = Field(
        default_factory=list,
        max_length=32,
        description="Addresses (CIDRs) of an ingress controller that runs outside the cluster's pod network "
        '(JSON list in the environment, e.g. `["10.0.0.5/32"]`): admitted to declared ports beside its pods. '
        "Empty by default; the sandbox's Traefik runs on the host and sets it when Cilium is the network.",
    )
    max_body_bytes: int = Field(65536, ge=1024, description="Largest accepted request body.")
    run_worker: bool = Field(True, description="Run the submission worker in this process.")
    worker_poll_seconds: float = Field(1.0, gt=0, description="Queue poll interval of the worker.")
    worker_concurrency: int = Field(
        8,
        ge=1,
        le=64,
        description="Tenancies whose queued submissions the worker moves on at once, one thread each "
        "(a tenancy's own submissions stay in order).",
    )
    admission_retry_seconds: float = Field(
        3.0,
        gt=0,
        description="Wait before the next pod of a container whose node refused it at admission, doubling per "
        "attempt (3, 6, 12 s): what refused it, a device plugin registering again with a restarted kubelet, "
        "takes a few seconds to pass.",
    )
    worker_claim_seconds: float = Field(
        60.0, gt=0, description="How long a replica owns a claimed submission before others may retry it."
    )
    retry_max_seconds: float = Field(30.0, gt=0, description="Cap of the exponential retry backoff.")
    kube_timeout_seconds: float = Field(10.0, gt=0, description="Timeout of one Kubernetes request.")

    # --- abuse limits (docs/abuse-and-limits.md) ---
    image_registry_allowlist: list[str] = Field(
        default_factory=list,
        description="Registries (host or host:port) tenants may pull from even though they are internal "
        "addresses, e.g. a private registry at 10.0.0.5:5000. JSON list in the environment.",
    )
    rate_limit_token: str = Field(
        "50/second;1500/minute", description="Request rate per token (limits syntax; '' = none)."
    )
    rate_limit_tenancy: str = Field(
        "100/second;3000/minute", description="Request rate per tenancy, all its tokens together ('' = none)."
    )
    rate_limit_bad_tokens: str = Field(
        "20/minute", description="Invalid tokens per client address before it is answered 429 ('' = none)."
    )
    rate_limit_storage_url: str = Field(
        "",
        description="Redis where all the replicas count the rates together, as a limits storage URI "
        "(redis://[:password@]host:6379/0; rediss, redis+unix, redis+sentinel, redis+cluster). Empty: each "
        "replica counts alone, so N replicas allow N times each rate; so does a replica while the Redis "
        "does not answer.",
    )
    max_streams_per_token: int = Field(100, ge=1, description="Concurrent log follows per token.")
    max_streams_per_tenancy: int = Field(100, ge=1, description="Concurrent log follows per tenancy.")
    max_requests_per_client: int = Field(
        256, ge=1, description="Requests in flight at once per client address (streams included)."
    )
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="A connection must send a complete request head within this time."
    )
    body_timeout_seconds: float = Field(
        10.0, gt=0, description="Longest wait for the next part of a request body before answering 408."
    )
    retention_days: float = Field(
        30.0, gt=0, description="Days finished containers (and their pods and logs) are kept before pruning."
    )
    retention_interval_seconds: float = Field(3600.0, gt=0, description="How often the worker prunes.")
    audit_retention_days: float = Field(
        90.0, gt=0, description="Days a tenancy's audit events (GET /v1/audit) are kept before pruning."
    )
    database_pool_size: int = Field(
        20,
        ge=1,
        description="Database connections kept for requests (as many again may open under bursts); "
        "sized to the request worker threads (40) so that a request thread never waits for one.",
    )
    token_cache_seconds: float = Field(
        5.0,
        ge=0,
        description="How long a verified token is remembered in-process (0: ask the database on "
        "every request). A revocation holds on the next request on every replica regardless (PostgreSQL: each "
        "replica acknowledges it before it is answered).",
    )
    service_pool_size: int = Field(
        2, ge=1, description="Database connections kept apart for the worker and the health endpoints."
    )
    cpu_per_gpu: str = Field(
        "24", description="CPUs a container gets per GPU (HGX H100: 2 x 56 cores, 224 threads, less the host's share)."
    )
    memory_per_gpu: str = Field(
        "224Gi", description="Memory a container gets per GPU (HGX H100: 2 TiB, less 256 GiB for the host)."
    )
    shm_per_gpu: str = Field("32Gi", description="Size of /dev/shm per GPU (a memory-backed emptyDir).")
    kata_hugepages: bool = Field(
        True,
        description="Kata backs guest memory with 1 GiB hugepages (enable_hugepages in deploy/kata/): "
        "pods then request hugepages-1Gi.",
    )
    kata_overhead_cpu: str = Field("500m", description="The RuntimeClass's overhead.podFixed cpu (counted in quotas).")
    kata_overhead_memory: str = Field("1Gi", description="The RuntimeClass's overhead.podFixed memory.")
    log_archive_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description="How much of each finished container's log (its last bytes) the API keeps in its database.",
    )

    # --- webhooks (docs/webhooks.md) ---
    webhook_allow_loopback: bool = Field(
        False,
        description="Webhook URLs may reach loopback addresses (127.0.0.0/8, ::1, localhost): for the "
        "sandbox and tests only. Private, link-local and cluster addresses are always refused.",
    )
    webhook_allow_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        max_length=32,
        description="Address ranges (CIDRs) where webhook receivers may be besides public addresses (JSON list "
        'in the environment, e.g. `["10.20.0.0/16"]` for receivers on a private network of the operator\'s). '
        "Cluster and local names are refused still. Empty by default.",
    )
    webhook_retry_hours: float = Field(
        24.0, gt=0, le=24 * 30, description="How long a webhook delivery is retried (from its creation or resend)."
    )
    webhook_retry_first_seconds: float = Field(
        10.0, gt=0, description="Wait before a webhook delivery's second attempt; doubles after each failure."
    )
    webhook_retry_max_seconds: float = Field(3600.0, gt=0, description="Longest wait between two webhook attempts.")
    webhook_timeout_seconds: float = Field(
        5.0, gt=0, le=60, description="Timeout of one webhook POST (connect, then each read)."
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        return self

    @model_validator(mode="after")
    def _rate_limit_storage(self) -> Settings:
        url = self.rate_limit_storage_url
        if url and url.split("://", 1)[0] not in RATE_LIMIT_STORAGE_SCHEMES:
            raise ValueError(
                "rate_limit_storage_url (GPUCAAS_RATE_LIMIT_STORAGE_URL) must be a Redis URI ("
                + ", ".join(f"{s}://" for s in RATE_LIMIT_STORAGE_SCHEMES)
                + "), or empty to count in each replica"
            )
        return self

    @model_validator(mode="after")
    def _real_admin_token(self) -> Settings:
        if self.admin_token is not None:
            secret = self.admin_token.get_secret_value()
            if len(secret) < 16 or secret.lower() in PLACEHOLDER_SECRETS:
                raise ValueError(
                    "admin_token (GPUCAAS_ADMIN_TOKEN) must be a random secret of at least 16 characters; "
                    "leave it unset to have one generated"
                )
        return self

    @model_validator(mode="after")
    def _endpoint_auth(self) -> Settings:
        if not self.endpoint_auth_annotations:
            raise ValueError(
                "endpoint_auth_annotations (GPUCAAS_ENDPOINT_AUTH_ANNOTATIONS) may not be empty: they make the "
                "ingress controller ask the API before serving a private endpoint (docs/endpoints.md)"
            )
        return self

    @model_validator(mode="after")
    def _sizes(self) -> Settings:
        self.share  # noqa: B018 - parses every quantity: a bad one stops start-up with its name
        self.volume_quota_bytes  # noqa: B018
        return self

    @property
    def endpoint_config(self) -> endpoints.Config:
        return endpoints.Config(
            self.endpoint_domain,
            self.endpoint_ingress_class,
            self.endpoint_annotations,
            self.endpoint_auth_annotations,
            self.endpoint_ingress_namespace,
            self.endpoint_ingress_labels,
            tuple(str(c) for c in self.endpoint_ingress_cidrs),
        )

    @property
    def volume_quota(self) -> volumes.Quota:
        """Each tenancy's volume allowance (the API's checks and the Tenancy's ``spec.volumes``)."""
        return volumes.Quota(self.volume_storage_class, self.volume_quota_bytes, self.max_volumes)

    @property
    def volume_quota_bytes(self) -> int:
        """``volume_storage_quota`` in bytes."""
        try:
            return sizing.parse_bytes(self.volume_storage_quota)
        except ValueError as exc:
            raise ValueError(f"volume_storage_quota (GPUCAAS_VOLUME_STORAGE_QUOTA): {exc}") from None

    @property
    def share(self) -> sizing.Share:
        """What one GPU brings with it (CPU, memory, /dev/shm) and the Kata overhead of a pod."""

        def parse(field: str, fn: Callable[[str], int]) -> int:
            try:
                return fn(getattr(self, field))
            except ValueError as exc:
                raise ValueError(f"{field} (GPUCAAS_{field.upper()}): {exc}") from None

        return sizing.Share(
            cpu_milli=parse("cpu_per_gpu", sizing.parse_cpu),
            memory_bytes=parse("memory_per_gpu", sizing.parse_bytes),
            shm_bytes=parse("shm_per_gpu", sizing.parse_bytes),
            hugepages=self.kata_hugepages,
            overhead_cpu_milli=parse("kata_overhead_cpu", sizing.parse_cpu),
            overhead_memory_bytes=parse("kata_overhead_memory", sizing.parse_bytes),
        )

    def redacted(self) -> dict[str, object]:
        """The effective configuration for the start-up log line (secrets hidden)."""
        data = self.model_dump()
        data["admin_token"] = "***" if self.admin_token else None
        data["database_url"] = _hide_password(self.database_url)
        data["rate_limit_storage_url"] = _hide_password(self.rate_limit_storage_url)
        return data


def _hide_password(url: str) -> str:
    """``scheme://user:***@host...`` for a URL that carries a password; others as they are."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
