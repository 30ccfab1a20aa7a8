"""Tables and request/response shapes (``XBase`` → ``XCreate``/``XUpdate``/``XPublic``; table ``X``).

Request shapes forbid unknown fields and validate with the pure rules in
``validation``; response shapes never expose a table model (no token hashes, no
worker bookkeeping). All timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field as PField,
    StrictBool,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from services.api.domain import (
    endpoints as endpoint_rules,
    reasons,
    sizing,
    tenant_secrets,
    validation,
    volumes as volume_rules,
)
from services.api.domain.queue import QueueSpot


def utcnow() -> datetime:
    """Now, in UTC (timezone-aware, as the columns require)."""
    return datetime.now(UTC)


def _as_utc(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


UTCDatetime = Annotated[datetime, AfterValidator(_as_utc)]


class ContainerStatus(StrEnum):
    QUEUED = "Queued"  # committed; the worker has not created the pod yet
    PENDING = "Pending"  # pod created, not running yet
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class ContainerReason(StrEnum):
    """Why a container ended when the platform, not its process, ended it."""

    PREEMPTED = reasons.PREEMPTED  # the queue (Kueue) gave its GPUs to other work


#: the Tenancy column counting its live containers of each status (migration 0009)
CONTAINER_COUNT_COLUMNS = {status: f"containers_{status.value.lower()}" for status in ContainerStatus}

ACTIVE_STATUSES = (ContainerStatus.QUEUED, ContainerStatus.PENDING, ContainerStatus.RUNNING)
TERMINAL_STATUSES = (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED, ContainerStatus.CANCELLED)

# The rule is checked by check_tenancy_name (its message says what is allowed); the
# schema states the same rule so generated clients and fuzzers know it.
TenancyName = Annotated[
    str,
    AfterValidator(validation.check_tenancy_name),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": validation.DNS_LABEL.pattern,
            "minLength": 1,
            "maxLength": validation.TENANCY_NAME_MAX,
            "description": "A DNS label: lowercase letters, digits and '-'.",
        }
    ),
]


class StrictInput(SQLModel):
    """A request shape: unknown fields are refused with the list of allowed ones."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = [f.alias or name for name, f in cls.model_fields.items()]
            accepted = set(allowed) | set(cls.model_fields)
            unknown = sorted(str(k) for k in data if k not in accepted)
            if unknown:
                raise ValueError(
                    f"unknown field(s) {', '.join(map(repr, unknown))}; allowed fields: {', '.join(allowed)}"
                )
            where = validation.find_control(data)
            if where is not None:
                raise ValueError(f"{where}: {validation.CONTROL_RULE}")
        return data


# --- tenancies -------------------------------------------------------------------


class NfsSpec(StrictInput):
    """The tenancy's networked storage (mounted at /data in its containers)."""

    server: str = PField(max_length=253, pattern=r"^[A-Za-z0-9.-]+$")
    path: str = PField(max_length=1024, pattern=r"^/[^\x00]*$")
    read_only: StrictBool = False
    capacity: str = PField("1Ti", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|Pi)?$")


#: A tenancy's fair-sharing weight: relative, from a thousandth (Kueue writes it to the
#: thousandth) to 1000 (the Tenancy CRD's bounds).
WEIGHT_MIN, WEIGHT_MAX = 0.001, 1000.0


class TenancyBase(SQLModel):
    gpu_quota: int = Field(default=8, ge=0, le=100000)
    pod_quota: int = Field(default=50, ge=1, le=100000)
    # GPUs guaranteed when the fleet is contended (at most gpu_quota) and the fair-sharing
    # weight; they take effect with queueing by Kueue (docs/queues.md); migration 0014
    guaranteed_gpus: int = Field(default=0, ge=0, le=100000, sa_column_kwargs={"server_default": "0"})
    weight: float = Field(default=1.0, ge=WEIGHT_MIN, le=WEIGHT_MAX, sa_column_kwargs={"server_default": "1"})
    allow_internet: bool = False
    # GPU-hours a calendar month (UTC) may use; None: no budget (services/api/usage/budget.py)
    gpu_hours_per_month: float | None = Field(default=None, ge=0, le=100_000_000)


#: One pod holds at most one board's GPUs; the Tenancy CRD's CEL rule says the same
#: (gpuQuota <= 8 * podQuota), so the API refuses what the cluster would refuse.
GPUS_PER_POD_MAX = 8


def quota_problem(gpu_quota: int, pod_quota: int, guaranteed_gpus: int = 0) -> str | None:
    if gpu_quota > GPUS_PER_POD_MAX * pod_quota:
        return (
            f"gpu_quota {gpu_quota} needs a pod_quota of at least {-(-gpu_quota // GPUS_PER_POD_MAX)}: "
            f"one pod holds at most {GPUS_PER_POD_MAX} GPUs"
        )
    if guaranteed_gpus > gpu_quota:
        return (
            f"guaranteed_gpus {guaranteed_gpus} is above gpu_quota {gpu_quota}: the GPU quota is the tenancy's "
            "cap, so a guarantee is at most the quota"
        )
    return None


class TenancyCreate(StrictInput, TenancyBase):
    # JSON integers and booleans only: "4" or true for a number are refused, not coerced.
    gpu_quota: StrictInt = PField(default=8, ge=0, le=100000)
    pod_quota: StrictInt = PField(default=50, ge=1, le=100000)
    guaranteed_gpus: StrictInt = PField(
        default=0,
        ge=0,
        le=100000,
        description="GPUs the tenancy is guaranteed when the fleet is contended, at most gpu_quota; unused, they "
        "are lent to other tenancies (with queueing by Kueue, docs/queues.md).",
    )
    weight: StrictFloat | StrictInt = PField(
        default=1.0,
        ge=WEIGHT_MIN,
        le=WEIGHT_MAX,
        description="Fair-sharing weight against the other tenancies for the GPUs nobody is guaranteed.",
    )
    allow_internet: StrictBool = False
    gpu_hours_per_month: StrictFloat | StrictInt | None = PField(
        None,
        ge=0,
        le=100_000_000,
        examples=[1000],
        description="GPU-hours a calendar month (UTC) may use; once spent, submissions are refused until the "
        "1st of the next month. Unset: no budget.",
    )
    name: TenancyName
    nfs: NfsSpec | None = None

    @model_validator(mode="after")
    def _quotas_agree(self) -> TenancyCreate:
        problem = quota_problem(self.gpu_quota, self.pod_quota, self.guaranteed_gpus)
        if problem:
            raise ValueError(problem)
        return self


class TenancyUpdate(StrictInput):
    gpu_quota: StrictInt | None = PField(None, ge=0, le=100000)
    pod_quota: StrictInt | None = PField(None, ge=1, le=100000)
    guaranteed_gpus: StrictInt | None = PField(None, ge=0, le=100000, description="New guaranteed GPUs.")
    weight: StrictFloat | StrictInt | None = PField(
        None, ge=WEIGHT_MIN, le=WEIGHT_MAX, description="A new fair-sharing weight."
    )
    allow_internet: StrictBool | None = None
    nfs: NfsSpec | None = None
    clear_nfs: StrictBool = False
    gpu_hours_per_month: StrictFloat | StrictInt | None = PField(
        None, ge=0, le=100_000_000, description="A new monthly GPU-hour budget."
    )
    clear_gpu_hours_per_month: StrictBool = PField(False, description="Remove the monthly GPU-hour budget.")


class Tenancy(TenancyBase, table=True):
    name: str = Field(primary_key=True, max_length=63)
    # GPUs its active containers hold; kept exact by database triggers (migration 0006)
    gpus_in_use: int = Field(default=0)
    # its live containers per status, kept by the same triggers (migration 0009): a page's
    # count without counting rows (CONTAINER_COUNT_COLUMNS)
    containers_queued: int = Field(default=0)
    containers_pending: int = Field(default=0)
    containers_running: int = Field(default=0)
    containers_succeeded: int = Field(default=0)
    containers_failed: int = Field(default=0)
    containers_cancelled: int = Field(default=0)
    nfs: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # bumped by every change; the custom resource has received ``pushed_revision`` (migration 0013)
    revision: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    pushed_revision: int = Field(default=0, sa_column_kwargs={"server_default": "0"})


class TenancyPublic(TenancyBase):
    name: str
    nfs: NfsSpec | None = None
    created_at: UTCDatetime
    updated_at: UTCDatetime
    active_gpus: int = 0


class TenanciesPublic(SQLModel):
    data: list[TenancyPublic]
    count: int


# --- tokens ----------------------------------------------------------------------


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_token"

    id: str = Field(primary_key=True, max_length=32)
    tenancy: str | None = Field(default=None, index=True, max_length=63)  # None = admin
    token_hash: str = Field(unique=True, max_length=64)
    name: str | None = Field(default=None, max_length=128)
    created_at: datetime = Field(default_factory=utcnow)
    scope: str | None = Field(default=None, max_length=16)  # None: admin (all a tenant token may do)
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    # the token that minted it (None: minted before migration 0010, or the bootstrap token)
    created_by: str | None = Field(default=None, max_length=32)


def _in_future(value: datetime | None) -> datetime | None:
    if value is not None:
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        if value <= utcnow():
            raise ValueError("must be in the future (UTC, e.g. 2027-01-01T00:00:00Z)")
    return value


def _printable_name(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


class _ExpiringToken(StrictInput):
    """What both ways of minting a token share: an optional expiry, in the future."""

    expires_at: UTCDatetime | None = PField(
        None,
        description="When the token stops working (UTC, ISO 8601); unset: never.",
        examples=["2027-01-01T00:00:00Z"],
    )

    @field_validator("expires_at")
    @classmethod
    def _future(cls, value: datetime | None) -> datetime | None:
        return _in_future(value)


class TokenCreate(_ExpiringToken):
    name: str | None = PField(None, max_length=128)
    scope: Literal["read", "submit", "admin"] = PField(
        "admin",
        description="read: look only; submit: also submit and cancel containers; admin: also manage the "
        "tenancy's secrets, registry credentials, webhooks and tokens, and read its audit trail.",
        examples=["submit"],
    )


class TenantTokenCreate(_ExpiringToken):
    """A token a tenant mints for its own tenancy (``POST /v1/tokens``): named, no wider
    than the caller's own scope, optionally expiring."""

    name: Annotated[str, AfterValidator(_printable_name)] = PField(
        min_length=1,
        max_length=128,
        description="What the token is for, shown in listings and the audit trail.",
        examples=["dash"],
    )
    scope: Literal["read", "submit", "admin"] = PField(
        "read",
        description="read (default): look only; submit: also submit and cancel containers; admin: also manage "
        "the tenancy's secrets, registry credentials, webhooks, tokens and read its audit trail. No wider than "
        "the scope of the token that mints it.",
        examples=["read"],
    )


class TokenPublic(SQLModel):
    id: str
    tenancy: str | None
    name: str | None
    created_at: UTCDatetime
    created_by: str | None = PField(
        None, description="Id of the token that minted it (null: an operator's bootstrap or an older token)."
    )
    scope: str = "admin"
    expires_at: UTCDatetime | None = None
    last_used_at: UTCDatetime | None = PField(None, description="Last request made with it (to the minute).")

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, value: str | None) -> str:
        return value or "admin"


class WhoAmI(SQLModel):
    """The token in use, described to its holder (``GET /v1/whoami``): never a secret."""

    token_id: str = PField(description="The token's id (as in GET /v1/tokens and the audit trail).")
    token_name: str | None = PField(None, description="The token's name.")
    tenancy: str | None = PField(description="Its tenancy; null: an operator's admin token.")
    scope: Literal["read", "submit", "admin"] = PField(
        description="read: look only; submit: also submit and cancel containers; admin: also secrets, "
        "registry credentials, webhooks, tokens and the audit trail."
    )
    expires_at: UTCDatetime | None = PField(None, description="When it stops working; null: never.")


class TokenIssued(TokenPublic):
    token: str = PField(description="The bearer token; shown only in this response.")


class TokensPublic(SQLModel):
    data: list[TokenPublic]
    count: int


# --- audit trail -----------------------------------------------------------------


class AuditAction(StrEnum):
    """What a tenancy's audit trail records (``services.api.store.audit``)."""

    CONTAINER_SUBMIT = "container.submit"
    CONTAINER_CANCEL = "container.cancel"
    CONTAINER_EXEC = "container.exec"
    TOKEN_CREATE = "token.create"
    TOKEN_REVOKE = "token.revoke"
    SECRET_PUT = "secret.put"
    SECRET_DELETE = "secret.delete"
    REGISTRY_CREDENTIAL_PUT = "registry_credential.put"
    REGISTRY_CREDENTIAL_DELETE = "registry_credential.delete"
    WEBHOOK_CREATE = "webhook.create"
    WEBHOOK_DELETE = "webhook.delete"
    WEBHOOK_RESEND = "webhook.resend"
    VOLUME_CREATE = "volume.create"
    VOLUME_UPDATE = "volume.update"
    VOLUME_DELETE = "volume.delete"
    ENDPOINT_CREATE = "endpoint.create"
    ENDPOINT_UPDATE = "endpoint.update"
    ENDPOINT_DELETE = "endpoint.delete"


class AuditEvent(SQLModel, table=True):
    """One change made in a tenancy: who (the token, and its name as it was), what, to
    which object, when, from which address. Never a secret value: ``target`` is an id or
    a name, ``detail`` a short fixed description (migration 0010)."""

    __tablename__ = "audit_event"

    id: str = Field(primary_key=True, max_length=32)
    tenancy: str = Field(max_length=63)
    at: datetime = Field(default_factory=utcnow)
    action: str = Field(max_length=48)
    target: str | None = Field(default=None, max_length=255)
    token_id: str | None = Field(default=None, max_length=32)
    token_name: str | None = Field(default=None, max_length=128)
    client: str | None = Field(default=None, max_length=64)
    detail: str | None = Field(default=None, max_length=256)
    # set when its tenancy was deleted: hidden from a new tenancy of the same name, pruned by retention
    tenancy_deleted_at: datetime | None = None


class AuditEventPublic(SQLModel):
    id: str
    at: UTCDatetime
    action: AuditAction
    target: str | None = PField(
        None, description="What it acted on: a container or token id, a secret's name, a registry server, a webhook id."
    )
    token_id: str | None = PField(None, description="The token that did it.")
    token_name: str | None = PField(None, description="That token's name when it did it.")
    client: str | None = PField(None, description="The client's address, as the API saw it.")
    detail: str | None = PField(None, description="A few words more (e.g. the scope of a minted token).")


class AuditPage(SQLModel):
    data: list[AuditEventPublic]
    limit: int
    next: str | None = PField(
        None, description="Cursor of the next page: pass it as ?after= (null: this is the last page)."
    )


# --- tenant secrets and registry credentials (values live only in Kubernetes) ----


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


SecretName = Annotated[str, AfterValidator(tenant_secrets.check_secret_name)]


class SecretCreate(StrictInput):
    """A tenant secret: stored as a Kubernetes Secret in the tenancy's namespace, never returned."""

    name: SecretName = PField(
        description='Name to reference it by, e.g. from env as {"secret": "hf"}.', examples=["hf"]
    )
    value: Annotated[str, AfterValidator(_no_nul)] = PField(
        min_length=1, max_length=32768, description="The secret value; write-only.", examples=["hf_xxxxxxxx"]
    )


class SecretUpdate(StrictInput):
    value: Annotated[str, AfterValidator(_no_nul)] = PField(
        min_length=1, max_length=32768, description="The new value; write-only."
    )


class SecretPublic(SQLModel):
    name: str
    created_at: UTCDatetime | None = None


class SecretsPublic(SQLModel):
    data: list[SecretPublic]
    count: int


class SecretRef(StrictInput):
    """An environment variable whose value comes from one of the tenancy's secrets."""

    secret: SecretName = PField(description="Name of a secret created with POST /v1/secrets.", examples=["hf"])


class RegistryCredentialCreate(StrictInput):
    """Credentials for pulling private images from one registry server."""

    server: Annotated[str, AfterValidator(tenant_secrets.check_registry_server)] = PField(
        max_length=253, description="Registry host[:port], as in image references.", examples=["nvcr.io"]
    )
    username: Annotated[str, AfterValidator(_no_nul)] = PField(
        min_length=1,
        max_length=256,
        pattern=r"^[^:\s]+$",
        description="Registry user name (no ':').",
        examples=["$oauthtoken"],
    )
    password: Annotated[str, AfterValidator(_no_nul)] = PField(
        min_length=1, max_length=8192, description="Password or API key; write-only.", examples=["nvapi-xxxxxxxx"]
    )


class RegistryCredentialPublic(SQLModel):
    server: str
    username: str
    created_at: UTCDatetime | None = None


class RegistryCredentialsPublic(SQLModel):
    data: list[RegistryCredentialPublic]
    count: int


# --- tenant volumes (PersistentVolumeClaims in the tenant namespace) -------------

VolumeName = Annotated[
    str,
    AfterValidator(volume_rules.check_name),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": volume_rules.NAME.pattern,
            "minLength": 1,
            "maxLength": volume_rules.NAME_MAX,
            "description": "A DNS label: lowercase letters, digits and '-'.",
        }
    ),
]


def _volume_size(value: str) -> str:
    return sizing.format_bytes(volume_rules.parse_size(value))


class VolumeCreate(StrictInput):
    """A volume: storage that outlives containers, mounted by name (``volumes`` of a container)."""

    name: VolumeName = PField(description="Name to mount it by.", examples=["datasets"])
    size: Annotated[str, AfterValidator(_volume_size)] = PField(
        max_length=32,
        pattern=r"^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$",
        description="Capacity, a Kubernetes quantity (e.g. 10Gi, 500Mi, 1Ti); at least 1Mi and "
        "within the tenancy's storage quota.",
        examples=["10Gi"],
    )


class VolumePublic(SQLModel):
    name: str
    size: str = PField(description="Capacity asked for (a Kubernetes quantity).")
    status: str = PField(description="Pending (being provisioned), Bound (ready to mount), Lost, or Deleting.")
    storage_class: str | None = PField(None, description="The StorageClass that provisions it.")
    created_at: UTCDatetime | None = None


class VolumesPublic(SQLModel):
    data: list[VolumePublic]
    count: int
    storage_quota: str = PField(description="Storage the tenancy's volumes may ask for together.")
    storage_used: str = PField(description="Storage its volumes ask for now.")
    max_volumes: int = PField(description="Most volumes the tenancy may have.")


class VolumeMount(StrictInput):
    """One of the tenancy's volumes, mounted into a container."""

    name: VolumeName = PField(description="A volume created with POST /v1/volumes.", examples=["datasets"])
    mount_path: Annotated[str, AfterValidator(volume_rules.check_mount_path)] = PField(
        max_length=volume_rules.MOUNT_PATH_MAX,
        description="Absolute path in the container (not under /dev, /proc or /sys).",
        examples=["/datasets"],
    )
    read_only: StrictBool = PField(False, description="Mount it read-only.")


# --- endpoints (declared HTTP ports, served by the ingress controller) -------------


class PortSpec(StrictInput):
    """An HTTP port the container listens on, served at ``https://<id>-<port>.<endpoint domain>``."""

    port: StrictInt = PField(ge=1, le=65535, description="TCP port the container serves HTTP on.", examples=[8080])
    public: StrictBool = PField(
        False,
        description="false: only requests with a token of this tenancy (Authorization: Bearer) get "
        "through; true: anyone who has the URL.",
    )


class EndpointPublic(SQLModel):
    port: int
    url: str = PField(description="https://<container id>-<port>.<endpoint domain>")
    public: bool


# --- containers ------------------------------------------------------------------

MAX_TIMEOUT_SECONDS = 30 * 24 * 3600


class ContainerBase(SQLModel):
    gpus: int = Field(
        default=1,
        ge=1,
        le=8,
        description="GPUs passed through to the container's VM: 1-8 (1, 2, 4 or 8 get NVLink).",
        schema_extra={"examples": [8]},
    )
    timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description="Stop the container after this many seconds (up to 30 days); unset: no limit.",
        schema_extra={"examples": [3600]},
    )


class ContainerCreate(StrictInput, ContainerBase):
    """A submission: ``image`` (or the design's ``container-url``) and what to run it with."""

    gpus: StrictInt = PField(
        default=1,
        ge=1,
        le=8,
        examples=[8],
        description="GPUs passed through to the container's VM: 1-8 (1, 2, 4 or 8 get NVLink); a JSON integer.",
    )
    timeout_seconds: StrictInt | None = PField(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        examples=[3600],
        description="Stop the container after this many seconds (up to 30 days); unset: no limit.",
    )

    image: str | None = PField(
        None,
        max_length=1024,
        description="OCI image reference; private registries need a credential (POST /v1/registry-credentials).",
        examples=["nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"],
    )
    container_url: str | None = PField(
        None,
        alias="container-url",
        max_length=1024,
        description="Same as image (the original payload's name).",
        examples=["nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"],
    )
    tenancy: TenancyName | None = PField(
        None,
        description="Tenant tokens: your own tenancy (may be left out). Admin tokens: required.",
        examples=["landon"],
    )
    nvlink: bool = PField(
        True,
        description=(
            "Ask for GPUs joined by NVLink (a Fabric Manager partition): only 1, 2, 4 or 8 GPUs. "
            "Send false to run 3, 5, 6 or 7 GPUs without NVLink between them."
        ),
        examples=[True],
    )
    interruptible: StrictBool = PField(
        False,
        description=(
            "Run it in the interruptible class: on GPUs nobody is guaranteed at the moment, preempted "
            "before any standard container when a tenancy claims its guarantee or standard work needs "
            "the room (SIGTERM, then SIGKILL after the grace period; its reason becomes Preempted). "
            "Without queueing by Kueue nothing preempts it. Default false: the standard class."
        ),
        examples=[False],
    )
    restart_on_preemption: StrictBool = PField(
        False,
        description=(
            "When the queue preempts it, put it back in the queue under the same id rather than end it "
            "Failed: each run is an attempt (attempt 1, 2, ...), with a usage record of its own. "
            "Default false."
        ),
        examples=[False],
    )
    cpu: str | None = PField(
        None,
        max_length=32,
        description="CPUs for the container's VM; default: the GPU count times the per-GPU share of the node.",
        examples=["96"],
    )
    memory: str | None = PField(
        None,
        max_length=32,
        description="Memory of the container's VM; default: the GPU count times the per-GPU share of the node.",
        examples=["512Gi"],
    )
    shm_size: str | None = PField(
        None,
        max_length=32,
        description="Size of /dev/shm; default: the GPU count times the per-GPU share.",
        examples=["64Gi"],
    )
    command: list[Annotated[str, PField(max_length=4096)]] | None = PField(
        None, max_length=256, description="Replaces the image's ENTRYPOINT.", examples=[["python", "train.py"]]
    )
    args: list[Annotated[str, PField(max_length=4096)]] | None = PField(
        None,
        max_length=256,
        description="Replaces the image's CMD (arguments to command).",
        examples=[["--epochs", "3"]],
    )
    env: dict[str, Annotated[str, PField(max_length=32768)] | SecretRef] | None = PField(
        None,
        max_length=256,
        description=(
            'Environment variables: a plain string value, or {"secret": "<name>"} to take the value from a '
            "secret created with POST /v1/secrets. Values are never shown back (names only)."
        ),
        examples=[{"EPOCHS": "3", "HF_TOKEN": {"secret": "hf"}}],
    )
    volumes: list[VolumeMount] | None = PField(
        None,
        max_length=volume_rules.MAX_MOUNTS,
        description=f"Volumes to mount (at most {volume_rules.MAX_MOUNTS}), each created first with POST /v1/volumes.",
        examples=[[{"name": "datasets", "mount_path": "/datasets", "read_only": True}]],
    )

    ports: list[PortSpec] | None = PField(
        None,
        max_length=endpoint_rules.MAX_PORTS,
        description=f"HTTP ports to serve (at most {endpoint_rules.MAX_PORTS}, each once): each becomes an endpoint "
        "https://<container id>-<port>.<endpoint domain> while the container runs.",
        examples=[[{"port": 8080, "public": False}]],
    )

    @field_validator("ports")
    @classmethod
    def _distinct_ports(cls, value: list[PortSpec] | None) -> list[PortSpec] | None:
        seen = [p.port for p in value or ()]
        twice = sorted({x for x in seen if seen.count(x) > 1})
        if twice:
            raise ValueError(f"port {twice[0]} is given twice; declare each port once")
        return value

    @property
    def ports_wire(self) -> list[dict[str, Any]] | None:
        """``ports`` as stored (``[{"port", "public"}]``)."""
        return None if not self.ports else [p.model_dump() for p in self.ports]

    @field_validator("volumes")
    @classmethod
    def _distinct_mounts(cls, value: list[VolumeMount] | None) -> list[VolumeMount] | None:
        mounts = value or []
        for what, seen in (("name", [m.name for m in mounts]), ("mount_path", [m.mount_path for m in mounts])):
            twice = sorted({x for x in seen if seen.count(x) > 1})
            if twice:
                raise ValueError(f"{what} {twice[0]!r} is given twice; mount each volume once, at its own path")
        return value

    @property
    def volumes_wire(self) -> list[dict[str, Any]] | None:
        """``volumes`` as stored (and as the pod builder reads them)."""
        return None if not self.volumes else [m.model_dump() for m in self.volumes]

    @field_validator("image", "container_url")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else validation.check_image(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            validation.check_env_names(value)
        return value

    @property
    def env_wire(self) -> dict[str, Any] | None:
        """``env`` as stored: plain strings, and ``{"secret": name}`` for secret references."""
        if self.env is None:
            return None
        return {k: v if isinstance(v, str) else {"secret": v.secret} for k, v in self.env.items()}

    @property
    def secret_refs(self) -> dict[str, str]:
        """Variable name → secret name, for the variables that come from secrets."""
        return {k: v.secret for k, v in (self.env or {}).items() if isinstance(v, SecretRef)}

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: str | None) -> str | None:
        return None if value is None else sizing.format_cpu(sizing.parse_cpu(value))

    @field_validator("memory", "shm_size")
    @classmethod
    def _bytes(cls, value: str | None) -> str | None:
        return None if value is None else sizing.format_bytes(sizing.parse_bytes(value))

    @field_validator("memory")
    @classmethod
    def _memory_floor(cls, value: str | None) -> str | None:
        if value is not None and sizing.parse_bytes(value) < sizing.MIN_MEMORY:
            raise ValueError(f"{value} is too little; a GPU VM needs at least {sizing.format_bytes(sizing.MIN_MEMORY)}")
        return value

    @model_validator(mode="after")
    def _shm_within_memory(self) -> ContainerCreate:
        if self.shm_size and self.memory and sizing.parse_bytes(self.shm_size) > sizing.parse_bytes(self.memory):
            raise ValueError(
                f"shm_size: {self.shm_size} is more than the container's memory ({self.memory}); "
                "/dev/shm lives in the VM's memory"
            )
        return self

    @model_validator(mode="after")
    def _restart_without_ports(self) -> ContainerCreate:
        if self.restart_on_preemption and self.ports:
            raise ValueError(
                "restart_on_preemption: not with ports yet (each run would need its endpoints made again); "
                "leave out one of them"
            )
        return self

    @model_validator(mode="after")
    def _nvlink_sizes(self) -> ContainerCreate:
        if self.nvlink and self.gpus not in validation.NVLINK_SIZES:
            raise ValueError(validation.nvlink_refusal(self.gpus))
        return self

    @model_validator(mode="after")
    def _one_image(self) -> ContainerCreate:
        if self.image and self.container_url and self.image != self.container_url:
            raise ValueError("give the image once: either 'image' or 'container-url', not both")
        if not (self.image or self.container_url):
            raise ValueError("image: field required (an OCI image reference; 'container-url' is accepted too)")
        return self

    @property
    def image_ref(self) -> str:
        return self.image or self.container_url or ""


class Container(ContainerBase, table=True):
    __table_args__ = (UniqueConstraint("tenancy", "idempotency_key", name="uq_container_idempotency"),)

    id: str = Field(primary_key=True, max_length=32)
    tenancy: str = Field(index=True, max_length=63)
    image: str = Field(max_length=1024)
    command: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    args: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    env: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # the tenant volumes it mounts, [{"name", "mount_path", "read_only"}] (migration 0011)
    volumes: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # its declared HTTP ports, [{"port", "public"}] (migration 0012)
    ports: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    cpu: str | None = Field(default=None, max_length=32)  # tenant overrides of the per-GPU sizing
    memory: str | None = Field(default=None, max_length=32)
    shm_size: str | None = Field(default=None, max_length=32)
    exit_code: int | None = None
    status: str = Field(default=ContainerStatus.QUEUED, index=True, max_length=16)
    message: str | None = Field(default=None, max_length=2048)
    # its class and why it ended when that is not the process's own doing (migration 0015)
    interruptible: bool = False
    reason: str | None = Field(default=None, max_length=32)
    # put back in the queue when preempted; how many times it was (its run is preemptions + 1)
    restart_on_preemption: bool = False
    preemptions: int = 0
    node_name: str | None = Field(default=None, max_length=253)
    pod_name: str = Field(max_length=63)
    idempotency_key: str | None = Field(default=None, max_length=255)
    request_hash: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, index=True)
    updated_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # set when its tenancy was deleted: history for the admin, invisible to a new
    # tenancy of the same name (migration 0002_container_history)
    tenancy_deleted_at: datetime | None = None
    # worker bookkeeping
    pod_created: bool = False
    pod_deleted: bool = False
    attempts: int = 0
    next_attempt_at: datetime = Field(default_factory=utcnow, index=True)
    claimed_by: str | None = Field(default=None, max_length=64)
    claimed_until: datetime | None = None


REDACTED = "<redacted>"


def redacted_env(env: dict[str, Any] | None) -> dict[str, Any] | None:
    """Names only: plain values become ``<redacted>``; secret references stay (they hold no value)."""
    if env is None:
        return None
    return {k: dict(v) if isinstance(v, dict) else REDACTED for k, v in env.items()}


class ContainerPublic(ContainerBase):
    id: str
    tenancy: str
    image: str
    command: list[str] | None
    args: list[str] | None
    env: dict[str, str | dict[str, str]] | None = PField(
        None, description="Variable names; plain values are redacted, secret references are shown as given."
    )
    cpu: str | None = PField(None, description="CPUs asked for (null: the GPU count times the per-GPU share).")
    memory: str | None = PField(None, description="Memory asked for (null: the per-GPU share).")
    shm_size: str | None = PField(None, description="/dev/shm size asked for (null: the per-GPU share).")
    volumes: list[dict[str, Any]] | None = PField(
        None, description="The tenant volumes it mounts: name, mount_path, read_only."
    )
    ports: list[dict[str, Any]] | None = PField(None, description="Its declared HTTP ports: port, public.")
    endpoints: list[EndpointPublic] = PField(
        default_factory=list,
        description="Where its ports are served while it is queued, pending or running "
        "(empty once it has ended): port, url, public.",
    )
    status: ContainerStatus
    message: str | None = PField(
        None, description="Why it waits (scheduler, tenancy, quota, image pull) or how it ended, in plain words."
    )
    exit_code: int | None = PField(None, description="The main process's exit code once it has finished.")
    reason: ContainerReason | None = PField(
        None,
        description="Why the platform ended it, or its last run: Preempted (the queue gave its GPUs to other "
        "work; docs/queues.md). A container put back in the queue keeps it until its next run starts. Null "
        "otherwise.",
    )
    interruptible: bool = PField(False, description="Its class: true for interruptible, false for standard.")
    restart_on_preemption: bool = PField(
        False, description="Whether a preemption puts it back in the queue (true) or ends it Failed (false)."
    )
    attempt: int = PField(
        1,
        description="Which run it is on: 1, then n + 1 after the queue preempted it n times and put it back "
        "(restart_on_preemption).",
    )
    node_name: str | None
    namespace: str
    pod_name: str
    created_at: UTCDatetime
    updated_at: UTCDatetime
    started_at: UTCDatetime | None
    finished_at: UTCDatetime | None
    queue: QueueSpot | None = PField(
        None,
        description="Where it stands while it waits with queueing by Kueue (null otherwise, and before "
        "its pod is made): position in its tenancy's queue (1: next), the GPUs of the tenancy's "
        "containers ahead of it, and why it waits: over_share (the tenancy's guarantee is in use "
        "and nothing may be borrowed now), waiting_for_partition (admitted, waiting for a node "
        "with a whole free partition) or preempted.",
    )


class ContainersPublic(SQLModel):
    data: list[ContainerPublic]
    count: int
    limit: int
    offset: int
    next: str | None = PField(
        None, description="Cursor of the next page: pass it as ?after= (null: this is the last page)."
    )


# --- kept logs -------------------------------------------------------------------


class _KeptLogColumns(SQLModel):
    """The columns of a kept log, whichever table holds it."""

    container_id: str = Field(primary_key=True, max_length=32)
    tenancy: str = Field(index=True, max_length=63)
    text: str
    truncated: bool = False
    captured_at: datetime = Field(default_factory=utcnow)


class ContainerLog(_KeptLogColumns, table=True):
    """The last part of a finished container's output, kept after its pod is gone."""

    __tablename__ = "container_log"


class ContainerRunLog(_KeptLogColumns, table=True):
    """The last part of an earlier run's output: a run the queue preempted before the container
    went back in the queue (``restart_on_preemption``). ``container_log`` keeps the last run's."""

    __tablename__ = "container_run_log"

    #: the run's number, as the container's ``attempt`` counts: 1 for the first
    run: int = Field(primary_key=True)
