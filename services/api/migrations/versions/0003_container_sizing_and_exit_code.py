"""Sizing overrides of a container (CPU, memory, /dev/shm; null means the per-GPU share) and its exit code.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.add_column(sa.Column("cpu", sa.String(32), nullable=True))
        batch.add_column(sa.Column("memory", sa.String(32), nullable=True))
        batch.add_column(sa.Column("shm_size", sa.String(32), nullable=True))
        batch.add_column(sa.Column("exit_code", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.drop_column("exit_code")
        batch.drop_column("shm_size")
        batch.drop_column("memory")
        batch.drop_column("cpu")
