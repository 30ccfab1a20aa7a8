"""Tables and request/response shapes (``XBase`` → ``XCreate``/``XUpdate``/``XPublic``; table ``X``).

Request shapes forbid unknown fields and validate with the pure rules in
``validation``; response shapes never expose a table model (no token hashes, no
worker bookkeeping). All timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field as PField,
    StrictBool,
    StrictInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from services.api import validation


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


ACTIVE_STATUSES = (ContainerStatus.QUEUED, ContainerStatus.PENDING, ContainerStatus.RUNNING)
TERMINAL_STATUSES = (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED, ContainerStatus.CANCELLED)

# The rule is checked by check_tenancy_name (its message says what is allowed); the
# schema states the same rule so generated clients and fuzzers know it.
TenancyName = Annotated[
    str,
    AfterValidator(validation.check_tenancy_name),
    WithJsonSchema({
        "type": "string",
        "pattern": validation.DNS_LABEL.pattern,
        "minLength": 1,
        "maxLength": validation.TENANCY_NAME_MAX,
        "description": "A DNS label: lowercase letters, digits and '-'.",
    }),
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


class TenancyBase(SQLModel):
    gpu_quota: int = Field(default=8, ge=0, le=100000)
    pod_quota: int = Field(default=50, ge=1, le=100000)
    allow_internet: bool = False


#: One pod holds at most one board's GPUs; the Tenancy CRD's CEL rule says the same
#: (gpuQuota <= 8 * podQuota), so the API refuses what the cluster would refuse.
GPUS_PER_POD_MAX = 8


def quota_problem(gpu_quota: int, pod_quota: int) -> str | None:
    if gpu_quota > GPUS_PER_POD_MAX * pod_quota:
        return (f"gpu_quota {gpu_quota} needs a pod_quota of at least {-(-gpu_quota // GPUS_PER_POD_MAX)}: "
                f"one pod holds at most {GPUS_PER_POD_MAX} GPUs")
    return None


class TenancyCreate(StrictInput, TenancyBase):
    # JSON integers and booleans only: "4" or true for a number are refused, not coerced.
    gpu_quota: StrictInt = PField(default=8, ge=0, le=100000)
    pod_quota: StrictInt = PField(default=50, ge=1, le=100000)
    allow_internet: StrictBool = False
    name: TenancyName
    nfs: NfsSpec | None = None

    @model_validator(mode="after")
    def _quotas_agree(self) -> TenancyCreate:
        problem = quota_problem(self.gpu_quota, self.pod_quota)
        if problem:
            raise ValueError(problem)
        return self


class TenancyUpdate(StrictInput):
    gpu_quota: StrictInt | None = PField(None, ge=0, le=100000)
    pod_quota: StrictInt | None = PField(None, ge=1, le=100000)
    allow_internet: StrictBool | None = None
    nfs: NfsSpec | None = None
    clear_nfs: StrictBool = False


class Tenancy(TenancyBase, table=True):
    name: str = Field(primary_key=True, max_length=63)
    nfs: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


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
    __tablename__ = "api_token"  # type: ignore[assignment]

    id: str = Field(primary_key=True, max_length=32)
    tenancy: str | None = Field(default=None, index=True, max_length=63)  # None = admin
    token_hash: str = Field(unique=True, max_length=64)
    name: str | None = Field(default=None, max_length=128)
    created_at: datetime = Field(default_factory=utcnow)


class TokenCreate(StrictInput):
    name: str | None = PField(None, max_length=128)


class TokenPublic(SQLModel):
    id: str
    tenancy: str | None
    name: str | None
    created_at: UTCDatetime


class TokenIssued(TokenPublic):
    token: str = PField(description="The bearer token; shown only in this response.")


class TokensPublic(SQLModel):
    data: list[TokenPublic]
    count: int


# --- containers ------------------------------------------------------------------

MAX_TIMEOUT_SECONDS = 30 * 24 * 3600


class ContainerBase(SQLModel):
    gpus: int = Field(default=1, ge=1, le=8)
    timeout_seconds: int | None = Field(default=None, ge=1, le=MAX_TIMEOUT_SECONDS)


class ContainerCreate(StrictInput, ContainerBase):
    """A submission: ``image`` (or the design's ``container-url``) and what to run it with."""

    gpus: StrictInt = PField(default=1, ge=1, le=8)
    timeout_seconds: StrictInt | None = PField(default=None, ge=1, le=MAX_TIMEOUT_SECONDS)

    image: str | None = PField(None, max_length=1024)
    container_url: str | None = PField(None, alias="container-url", max_length=1024)
    tenancy: TenancyName | None = None
    command: list[Annotated[str, PField(max_length=4096)]] | None = PField(None, max_length=256)
    args: list[Annotated[str, PField(max_length=4096)]] | None = PField(None, max_length=256)
    env: dict[str, Annotated[str, PField(max_length=32768)]] | None = PField(None, max_length=256)

    @field_validator("image", "container_url")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else validation.check_image(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            validation.check_env_names(value)
        return value

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
    env: dict[str, str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    status: str = Field(default=ContainerStatus.QUEUED, index=True, max_length=16)
    message: str | None = Field(default=None, max_length=2048)
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


class ContainerPublic(ContainerBase):
    id: str
    tenancy: str
    image: str
    command: list[str] | None
    args: list[str] | None
    env: dict[str, str] | None
    status: ContainerStatus
    message: str | None
    node_name: str | None
    namespace: str
    pod_name: str
    created_at: UTCDatetime
    updated_at: UTCDatetime
    started_at: UTCDatetime | None
    finished_at: UTCDatetime | None


class ContainersPublic(SQLModel):
    data: list[ContainerPublic]
    count: int
    limit: int
    offset: int
