"""Webhooks: endpoints, the delivery outbox and the attempt log (services/api/webhooks/).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UTC_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(256), nullable=True),
        sa.Column("created_at", UTC_TIME, nullable=False),
    )
    op.create_index("ix_webhook_tenancy", "webhook", ["tenancy"])
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("webhook_id", sa.String(32), nullable=False),
        sa.Column("tenancy", sa.String(63), nullable=False),
        sa.Column("event_id", sa.String(32), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("container_id", sa.String(32), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC_TIME, nullable=False),
        sa.Column("next_attempt_at", UTC_TIME, nullable=False),
        sa.Column("window_start", UTC_TIME, nullable=False),
        sa.Column("claimed_until", UTC_TIME, nullable=True),
        sa.Column("delivered_at", UTC_TIME, nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(1024), nullable=True),
    )
    op.create_index("ix_webhook_delivery_webhook_id", "webhook_delivery", ["webhook_id"])
    op.create_index("ix_webhook_delivery_next_attempt_at", "webhook_delivery", ["next_attempt_at"])
    op.create_table(
        "webhook_attempt",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("delivery_id", sa.String(32), nullable=False),
        sa.Column("webhook_id", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("started_at", UTC_TIME, nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(1024), nullable=True),
        sa.Column("next_attempt_at", UTC_TIME, nullable=True),
    )
    op.create_index("ix_webhook_attempt_delivery_id", "webhook_attempt", ["delivery_id"])
    op.create_index("ix_webhook_attempt_webhook_id", "webhook_attempt", ["webhook_id"])


def downgrade() -> None:
    op.drop_table("webhook_attempt")
    op.drop_table("webhook_delivery")
    op.drop_table("webhook")
