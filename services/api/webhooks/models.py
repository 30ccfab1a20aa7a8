"""Webhook tables (migration 0008) and their request/response shapes.

``webhook``: an endpoint of a tenancy (URL and the events it wants). Its signing secret
is not here: it lives in a Kubernetes Secret in the tenant namespace, like the tenant's
other secrets (``secret_store``).

``webhook_delivery``: the outbox. One row per (event, endpoint), inserted in the same
transaction as the container's status change, so an accepted change is never lost to a
crash; the dispatcher sends it until a 2xx answer or until ``webhook_retry_hours`` after
``window_start`` (its creation or its last resend).

``webhook_attempt``: one row per HTTP attempt (status code or error, duration, when the
next one is due), the log behind ``GET /v1/webhooks/{id}/deliveries``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import Field as PField, field_validator
from sqlalchemy import JSON, Column, Text
from sqlmodel import Field, SQLModel

from services.api.domain.models import ContainerStatus, StrictInput, UTCDatetime, utcnow

EVENT_TYPES = (
    "container.running",
    "container.succeeded",
    "container.failed",
    "container.cancelled",
    "container.preempted",
)
EventType = Literal[
    "container.running", "container.succeeded", "container.failed", "container.cancelled", "container.preempted"
]
#: What a preemption announces, ahead of the status it leaves the container in.
PREEMPTED_EVENT = "container.preempted"

#: The event a container's new status announces (Queued and Pending announce none).
EVENT_OF_STATUS = {
    ContainerStatus.RUNNING: "container.running",
    ContainerStatus.SUCCEEDED: "container.succeeded",
    ContainerStatus.FAILED: "container.failed",
    ContainerStatus.CANCELLED: "container.cancelled",
}

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
URL_MAX = 2048
WEBHOOKS_PER_TENANCY = 20


class Webhook(SQLModel, table=True):
    id: str = Field(primary_key=True, max_length=32)
    tenancy: str = Field(index=True, max_length=63)
    url: str = Field(max_length=URL_MAX)
    events: list[str] = Field(sa_column=Column(JSON, nullable=False))
    description: str | None = Field(default=None, max_length=256)
    created_at: datetime = Field(default_factory=utcnow)


class WebhookDelivery(SQLModel, table=True):
    __tablename__ = "webhook_delivery"

    id: str = Field(primary_key=True, max_length=32)
    webhook_id: str = Field(index=True, max_length=32)
    tenancy: str = Field(max_length=63)
    event_id: str = Field(max_length=32)
    event_type: str = Field(max_length=32)
    container_id: str | None = Field(default=None, max_length=32)
    body: str = Field(sa_column=Column(Text, nullable=False))  # the exact bytes every attempt sends
    status: str = Field(default=PENDING, max_length=16)
    attempts: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    next_attempt_at: datetime = Field(default_factory=utcnow, index=True)
    window_start: datetime  # retries stop webhook_retry_hours after this (creation, or the last resend)
    claimed_until: datetime | None = None
    delivered_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, max_length=1024)


class WebhookAttempt(SQLModel, table=True):
    __tablename__ = "webhook_attempt"

    id: str = Field(primary_key=True, max_length=32)
    delivery_id: str = Field(index=True, max_length=32)
    webhook_id: str = Field(max_length=32)
    number: int
    started_at: datetime
    duration_ms: float
    status_code: int | None = None
    error: str | None = Field(default=None, max_length=1024)
    next_attempt_at: datetime | None = None  # None: no further attempt (delivered or given up)


# --- request and response shapes -------------------------------------------------


class WebhookCreate(StrictInput):
    url: str = PField(
        max_length=URL_MAX,
        description="Where events are POSTed: an http(s) URL on a public address (no user:password@).",
        examples=["https://hooks.example.com/gpucaas"],
    )
    events: list[EventType] = PField(
        min_length=1,
        max_length=len(EVENT_TYPES),
        description="The events wanted: " + ", ".join(EVENT_TYPES) + ".",
        examples=[["container.running", "container.succeeded", "container.failed"]],
    )
    description: str | None = PField(None, max_length=256, description="A note for yourself.")

    @field_validator("events")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        return sorted(set(value), key=EVENT_TYPES.index)


class WebhookPublic(SQLModel):
    id: str
    url: str
    events: list[str]
    description: str | None = None
    created_at: UTCDatetime


class WebhookCreated(WebhookPublic):
    secret: str = PField(description="The signing secret; shown only in this response.")


class WebhooksPublic(SQLModel):
    data: list[WebhookPublic]
    count: int


class AttemptPublic(SQLModel):
    number: int
    started_at: UTCDatetime
    duration_ms: float
    status_code: int | None = None
    error: str | None = None
    next_attempt_at: UTCDatetime | None = None


class DeliveryPublic(SQLModel):
    id: str
    event_id: str
    event_type: str
    container_id: str | None = None
    status: str = PField(description="pending (more attempts to come), delivered (a 2xx answer) or failed (gave up).")
    attempt_count: int
    created_at: UTCDatetime
    next_attempt_at: UTCDatetime | None = None
    give_up_at: UTCDatetime
    delivered_at: UTCDatetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    attempts: list[AttemptPublic] = PField(default_factory=list, description="Newest first.")


class DeliveriesPublic(SQLModel):
    data: list[DeliveryPublic]
    count: int


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def delivery_public(row: WebhookDelivery, attempts: list[WebhookAttempt], *, window: timedelta) -> DeliveryPublic:
    data: dict[str, Any] = {
        "id": row.id,
        "event_id": row.event_id,
        "event_type": row.event_type,
        "container_id": row.container_id,
        "status": row.status,
        "attempt_count": row.attempts,
        "created_at": row.created_at,
        "next_attempt_at": row.next_attempt_at if row.status == PENDING else None,
        "give_up_at": _utc(row.window_start) + window,
        "delivered_at": row.delivered_at,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "attempts": [AttemptPublic.model_validate(a, from_attributes=True) for a in attempts],
    }
    return DeliveryPublic.model_validate(data)
