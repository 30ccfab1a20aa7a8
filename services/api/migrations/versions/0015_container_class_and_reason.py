"""A container's class and the platform's reason for ending it; the class on its usage record.

``container.interruptible`` is the class the tenant picked (``"interruptible": true``: preempted
first, docs/queues.md); ``container.reason`` says why the platform ended a container
(``Preempted``), null otherwise; ``usage_record.interruptible`` carries the class onto the run's
record. All three have server defaults, so the previous release's API, which inserts neither,
keeps working against this schema (expand only). Added in place (``ALTER TABLE ... ADD
COLUMN``, which SQLite does without copying the table): the container table's triggers
(migrations 0006 and 0009) stay as they are.

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
    op.add_column("usage_record", sa.Column("interruptible", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("usage_record", "interruptible")
    op.drop_column("container", "reason")
    op.drop_column("container", "interruptible")
