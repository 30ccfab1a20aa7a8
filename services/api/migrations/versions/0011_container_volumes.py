"""The tenant volumes a container mounts (``[{"name", "mount_path", "read_only"}]``; null: none).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.add_column(sa.Column("volumes", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("container") as batch:
        batch.drop_column("volumes")
