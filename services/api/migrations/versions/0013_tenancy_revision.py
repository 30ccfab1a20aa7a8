"""A tenancy's revision and the revision its Tenancy custom resource last received.

Every create or update bumps ``revision``; a successful push to Kubernetes records it in
``pushed_revision``. The worker pushes every tenancy whose custom resource lags, so a change
made while Kubernetes did not answer (a quota lowered, internet access withdrawn) reaches the
cluster without waiting for the tenancy's next submission. Both columns have defaults: the
previous release's API keeps working against this schema (expand only).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenancy") as batch:
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="1"))
        # existing rows: pushed once more by the first worker pass (the push is idempotent)
        batch.add_column(sa.Column("pushed_revision", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    # dropped in place (SQLite 3.35+ drops a column without copying the table, so the container
    # table's triggers on tenancy, migrations 0006 and 0009, stay valid)
    op.drop_column("tenancy", "pushed_revision")
    op.drop_column("tenancy", "revision")
