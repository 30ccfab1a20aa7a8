"""Kept logs: the tail of each finished container's output, served after its pod is gone.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "container_log",
        sa.Column("container_id", sa.String(32), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False, index=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("truncated", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("container_log")
