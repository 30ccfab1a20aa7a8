"""Container classes, preemption and runs (docs/queues.md, "The two classes and preemption").

- ``container.interruptible``: the class the tenant picked (``"interruptible": true``);
- ``container.reason``: why the platform ended the container, or its last run (``Preempted``);
- ``container.restart_on_preemption`` and ``container.preemptions``: whether a preemption puts
  it back in the queue, and how many times one did (its run is ``preemptions + 1``);
- ``usage_record.interruptible``: the class on the run's record;
- the table ``usage_run``: the records of the runs after the first of a container put back in
  the queue, keyed by the container id and the run's number. The first run stays in
  ``usage_record``, keyed by the container id alone, where the previous release writes it.

All expand: the new columns have server defaults or are nullable, and the previous release's
API, which writes none of them and only first runs, keeps working against this schema. The
columns are added in place (``ALTER TABLE ... ADD COLUMN``, which SQLite does without copying
the table): the container table's triggers (migrations 0006 and 0009) stay as they are.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("container", sa.Column("interruptible", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("container", sa.Column("reason", sa.String(32), nullable=True))
    op.add_column(
        "container", sa.Column("restart_on_preemption", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.add_column("container", sa.Column("preemptions", sa.Integer, nullable=False, server_default="0"))
    op.add_column("usage_record", sa.Column("interruptible", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_table(
        "usage_run",
        sa.Column("container_id", sa.String(32), primary_key=True),
        sa.Column("run", sa.Integer(), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(128), nullable=True),
        sa.Column("node_name", sa.String(253), nullable=True),
        sa.Column("nvlink_partition_size", sa.Integer(), nullable=True),
        sa.Column("interruptible", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=True),
        sa.Column("end_source", sa.String(16), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenancy_deleted_at", sa.DateTime(timezone=True), nullable=True),
    )
    # as usage_record's: reports and budgets read a tenancy's runs in a time window
    op.create_index("ix_usage_run_tenancy_started_at", "usage_run", ["tenancy", "started_at"])
    op.create_index("ix_usage_run_started_at", "usage_run", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_usage_run_started_at", table_name="usage_run")
    op.drop_index("ix_usage_run_tenancy_started_at", table_name="usage_run")
    op.drop_table("usage_run")
    op.drop_column("usage_record", "interruptible")
    for column in ("preemptions", "restart_on_preemption", "reason", "interruptible"):
        op.drop_column("container", column)
