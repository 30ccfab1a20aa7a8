"""Self-service tokens, the tenancy audit trail, revocations every replica hears.

* ``api_token.created_by``: the id of the token that minted it (``POST /v1/tokens``).
* ``audit_event``: one row per change made in a tenancy (``services.api.store.audit``), read
  newest first per tenancy (``ix_audit_event_tenancy_at``: tenancy, at, id — the keyset
  of ``GET /v1/audit``) and pruned by age (``ix_audit_event_at``).
* ``revocation_epoch`` (one row) and ``revocation_listener`` (one row per API replica):
  a revocation bumps the epoch and notifies every replica; each replica acknowledges
  the epochs it has applied to its token cache, and the revoking request waits for them
  (``services.api.security.revocations``). Used on PostgreSQL; created on SQLite too (one
  replica there: nothing to tell), so both schemas are the same.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UTC_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("api_token") as batch:
        batch.add_column(sa.Column("created_by", sa.String(32), nullable=True))
    op.create_table(
        "audit_event",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenancy", sa.String(63), nullable=False),
        sa.Column("at", UTC_TIME, nullable=False),
        sa.Column("action", sa.String(48), nullable=False),
        sa.Column("target", sa.String(255), nullable=True),
        sa.Column("token_id", sa.String(32), nullable=True),
        sa.Column("token_name", sa.String(128), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("detail", sa.String(256), nullable=True),
        sa.Column("tenancy_deleted_at", UTC_TIME, nullable=True),
    )
    op.create_index("ix_audit_event_tenancy_at", "audit_event", ["tenancy", "at", "id"])
    op.create_index("ix_audit_event_at", "audit_event", ["at"])
    op.create_table(
        "revocation_epoch",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
    )
    op.execute("INSERT INTO revocation_epoch (id, epoch) VALUES (1, 0)")
    op.create_table(
        "revocation_listener",
        sa.Column("replica", sa.String(64), primary_key=True),
        sa.Column("heard", sa.BigInteger(), nullable=False),
        sa.Column("lease_until", UTC_TIME, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("revocation_listener")
    op.drop_table("revocation_epoch")
    op.drop_index("ix_audit_event_at", table_name="audit_event")
    op.drop_index("ix_audit_event_tenancy_at", table_name="audit_event")
    op.drop_table("audit_event")
    with op.batch_alter_table("api_token") as batch:
        batch.drop_column("created_by")
