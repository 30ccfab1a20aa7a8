"""The HTTP ports a container declares (``[{"port", "public"}]``; null: none), its endpoints.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.add_column(sa.Column("ports", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.drop_column("ports")
