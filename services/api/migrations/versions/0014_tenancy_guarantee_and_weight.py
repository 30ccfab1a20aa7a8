"""A tenancy's guaranteed GPUs and fair-sharing weight (queueing by Kueue, docs/queues.md).

``guaranteed_gpus`` (at most ``gpu_quota``, which stays the cap) becomes its ClusterQueue's
nominal quota, lent to others while unused; ``weight`` its fair-sharing weight. Both have
server defaults (0 and 1: no guarantee, an equal share), so the previous release's API, which
inserts tenancies without them, keeps working against this schema (expand only).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenancy") as batch:
        batch.add_column(sa.Column("guaranteed_gpus", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("weight", sa.Float, nullable=False, server_default="1"))


def downgrade() -> None:
    # dropped in place, as 0013's (SQLite 3.35+ drops a column without copying the table, so the
    # container table's triggers on tenancy, migrations 0006 and 0009, stay valid)
    op.drop_column("tenancy", "weight")
    op.drop_column("tenancy", "guaranteed_gpus")
