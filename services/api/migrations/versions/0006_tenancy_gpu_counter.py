"""Quota admission at database speed: a per-tenancy counter of the GPUs its active
containers hold, kept exact by triggers, and the indexes of keyset pages.

``tenancy.gpus_in_use`` is the sum of ``gpus`` over the tenancy's containers whose
status is Queued, Pending or Running. Database triggers on ``container`` keep it
exact on every path that changes a row — an insert, a status change (the worker, a
cancel, a tenancy deletion), a change of ``gpus`` from the pod's report, a delete
(retention) — so no code path can forget a release. Admission then reads one row
instead of summing the tenancy's active containers under a lock held for the whole
transaction (see ``store.admission.admit_container``).

PostgreSQL triggers: https://www.postgresql.org/docs/current/plpgsql-trigger.html ;
SQLite: https://www.sqlite.org/lang_createtrigger.html . The counter is filled from
the existing rows here; ``store.tenancies.reconcile_gpu_usage`` recomputes it at start-up.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ACTIVE = "('Queued', 'Pending', 'Running')"

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION gpucaas_container_gpu_usage() RETURNS trigger AS $$
DECLARE
    delta integer := 0;
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN {_ACTIVE} THEN
        delta := delta - OLD.gpus;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status IN {_ACTIVE} THEN
        delta := delta + NEW.gpus;
    END IF;
    IF delta <> 0 THEN
        UPDATE tenancy SET gpus_in_use = gpus_in_use + delta
         WHERE name = CASE WHEN TG_OP = 'DELETE' THEN OLD.tenancy ELSE NEW.tenancy END;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""

_PG_TRIGGER = """
CREATE TRIGGER container_gpu_usage
AFTER INSERT OR DELETE OR UPDATE OF status, gpus ON container
FOR EACH ROW EXECUTE FUNCTION gpucaas_container_gpu_usage()
"""

# SQLite has no trigger functions: one trigger per event, each a plain UPDATE.
_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER container_gpu_usage_insert AFTER INSERT ON container
    WHEN NEW.status IN {_ACTIVE}
    BEGIN
        UPDATE tenancy SET gpus_in_use = gpus_in_use + NEW.gpus WHERE name = NEW.tenancy;
    END
    """,
    f"""
    CREATE TRIGGER container_gpu_usage_delete AFTER DELETE ON container
    WHEN OLD.status IN {_ACTIVE}
    BEGIN
        UPDATE tenancy SET gpus_in_use = gpus_in_use - OLD.gpus WHERE name = OLD.tenancy;
    END
    """,
    f"""
    CREATE TRIGGER container_gpu_usage_update AFTER UPDATE OF status, gpus ON container
    WHEN (OLD.status IN {_ACTIVE}) OR (NEW.status IN {_ACTIVE})
    BEGIN
        UPDATE tenancy SET gpus_in_use = gpus_in_use
            - (CASE WHEN OLD.status IN {_ACTIVE} THEN OLD.gpus ELSE 0 END)
            + (CASE WHEN NEW.status IN {_ACTIVE} THEN NEW.gpus ELSE 0 END)
         WHERE name = NEW.tenancy;
    END
    """,
)

_FILL = f"""
UPDATE tenancy SET gpus_in_use = COALESCE(
    (SELECT SUM(c.gpus) FROM container c WHERE c.tenancy = tenancy.name AND c.status IN {_ACTIVE}), 0)
"""


def upgrade() -> None:
    with op.batch_alter_table("tenancy") as batch:
        batch.add_column(sa.Column("gpus_in_use", sa.Integer, nullable=False, server_default="0"))
    op.execute(_FILL)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)
    # keyset pages: a tenancy's containers newest first, and everyone's (admin)
    op.create_index("ix_container_tenancy_created", "container", ["tenancy", "created_at", "id"])
    op.create_index("ix_container_created_id", "container", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_container_created_id", table_name="container")
    op.drop_index("ix_container_tenancy_created", table_name="container")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS container_gpu_usage ON container")
        op.execute("DROP FUNCTION IF EXISTS gpucaas_container_gpu_usage()")
    else:
        for event in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS container_gpu_usage_{event}")
    with op.batch_alter_table("tenancy") as batch:
        batch.drop_column("gpus_in_use")
