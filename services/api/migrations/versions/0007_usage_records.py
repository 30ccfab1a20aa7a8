"""Usage records (one per container run) and monthly GPU-hour budgets on tenancies.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_record",
        sa.Column("container_id", sa.String(32), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(128), nullable=True),
        sa.Column("node_name", sa.String(253), nullable=True),
        sa.Column("nvlink_partition_size", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=True),
        sa.Column("end_source", sa.String(16), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenancy_deleted_at", sa.DateTime(timezone=True), nullable=True),
    )
    # reports and budgets read a tenancy's runs in a time window; the admin's, all of them
    op.create_index("ix_usage_record_tenancy_started_at", "usage_record", ["tenancy", "started_at"])
    op.create_index("ix_usage_record_started_at", "usage_record", ["started_at"])
    with op.batch_alter_table("tenancy") as batch:
        batch.add_column(sa.Column("gpu_hours_per_month", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenancy") as batch:
        batch.drop_column("gpu_hours_per_month")
    op.drop_index("ix_usage_record_started_at", table_name="usage_record")
    op.drop_index("ix_usage_record_tenancy_started_at", table_name="usage_record")
    op.drop_table("usage_record")
