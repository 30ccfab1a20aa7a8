"""Initial schema: tenancies, API tokens, containers (the durable submission queue).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenancy",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("gpu_quota", sa.Integer, nullable=False),
        sa.Column("pod_quota", sa.Integer, nullable=False),
        sa.Column("allow_internet", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("nfs", sa.JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_token",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=True, index=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "container",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False, index=True),
        sa.Column("image", sa.String(1024), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("timeout_seconds", sa.Integer, nullable=True),
        sa.Column("command", sa.JSON, nullable=True),
        sa.Column("args", sa.JSON, nullable=True),
        sa.Column("env", sa.JSON, nullable=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("message", sa.String(2048), nullable=True),
        sa.Column("node_name", sa.String(253), nullable=True),
        sa.Column("pod_name", sa.String(63), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pod_created", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("pod_deleted", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("tenancy", "idempotency_key", name="uq_container_idempotency"),
    )
    # the quota check sums the GPUs of a tenancy's active containers on every submission
    op.create_index("ix_container_tenancy_status", "container", ["tenancy", "status"])


def downgrade() -> None:
    op.drop_table("container")
    op.drop_table("api_token")
    op.drop_table("tenancy")
