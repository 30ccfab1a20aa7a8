"""Containers outlive their tenancy as history: ``tenancy_deleted_at`` marks the rows of
a deleted tenancy (hidden from a new tenancy of the same name, kept for the admin until
retention prunes them).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.add_column(sa.Column("tenancy_deleted_at", sa.DateTime(timezone=True), nullable=True))
    # retention prunes by finish time
    op.create_index("ix_container_finished_at", "container", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_container_finished_at", table_name="container")
    with op.batch_alter_table("container") as batch:
        batch.drop_column("tenancy_deleted_at")
