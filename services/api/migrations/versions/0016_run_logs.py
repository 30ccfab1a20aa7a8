"""The kept logs of earlier runs (docs/queues.md, "Back in the queue").

The table ``container_run_log``: the tail of a run's output that the queue preempted before the
container went back in the queue (``restart_on_preemption``), keyed by the container id and the
run's number. ``container_log`` keeps the last run's, as before.

Expand only: a new table, which the previous release neither reads nor writes.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "container_run_log",
        sa.Column("container_id", sa.String(32), primary_key=True),
        sa.Column("run", sa.Integer(), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False, index=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("container_run_log")
