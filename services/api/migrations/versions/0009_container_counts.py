"""Counts without scanning: each tenancy's containers per status, kept exact by the
triggers that already keep ``tenancy.gpus_in_use`` (migration 0006).

``GET /v1/containers`` answers ``count``, the number of the caller's containers (of one
status, with ``?status=``). Counting the rows costs what the tenancy's history holds: a
tenancy with a million finished containers read a million index entries and their rows
on every page: a count must not scan the history. The tenancy row now carries
``containers_<status>`` for its live containers (those of this tenancy, not of an
earlier tenancy of the same name, ``tenancy_deleted_at IS NULL``): a page's count reads
one row.

The counts change with the GPU counter, in the same ``UPDATE tenancy`` (the row an
admission locks anyway): on an insert, a status change, a deletion of the tenancy
(``tenancy_deleted_at`` set) and a delete (retention). On PostgreSQL 0006's row trigger
becomes three statement-level triggers over the statement's transition tables — one
``UPDATE`` per tenancy per statement, where a row trigger would update one tenancy row
once per container, which a statement changing many containers of one tenancy (its
deletion, a bulk insert) pays for quadratically. On SQLite the three row triggers of
0006 are replaced by ones that count too (an update there is in place). A tenancy's row
goes away with the tenancy, and with it the counts of its containers, which no caller
can list any more (the admin's ``history`` listing counts rows, as before).

PostgreSQL triggers: https://www.postgresql.org/docs/current/plpgsql-trigger.html ;
SQLite: https://www.sqlite.org/lang_createtrigger.html .

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_ACTIVE = "('Queued', 'Pending', 'Running')"
#: status -> column (services.api.domain.models.CONTAINER_COUNT_COLUMNS says the same)
_COLUMNS = {s: f"containers_{s.lower()}" for s in ("Queued", "Pending", "Running", "Succeeded", "Failed", "Cancelled")}


def _count_terms(old: str | None, new: str | None) -> str:
    """``col = col + (new is s) - (old is s)`` for each status; ``old``/``new`` are SQL
    expressions of the live status before and after (NULL: not counted)."""
    terms = []
    for status, column in _COLUMNS.items():
        expr = column
        if new:
            expr += f" + (CASE WHEN {new} = '{status}' THEN 1 ELSE 0 END)"
        if old:
            expr += f" - (CASE WHEN {old} = '{status}' THEN 1 ELSE 0 END)"
        terms.append(f"{column} = {expr}")
    return ",\n            ".join(terms)


def _sums(rows: str, sign: str) -> str:
    """Per tenancy, the signed GPU and per-status deltas of the rows of transition table ``rows``."""
    counts = ", ".join(
        f"{sign}(CASE WHEN tenancy_deleted_at IS NULL AND status = '{status}' THEN 1 ELSE 0 END) AS {column}"
        for status, column in _COLUMNS.items()
    )
    return f"SELECT tenancy, {sign}(CASE WHEN status IN {_ACTIVE} THEN gpus ELSE 0 END) AS gpus, {counts} FROM {rows}"


_ALL = ("gpus", *_COLUMNS.values())


# PostgreSQL: statement-level triggers over the statement's transition tables
# (https://www.postgresql.org/docs/current/sql-createtrigger.html, REFERENCING), one UPDATE per
# tenancy per statement. Row-level triggers updated the tenancy row once per changed container:
# a statement that changes many containers of one tenancy (a tenancy's deletion, a bulk
# insert) then updates one row many times in one transaction, and each update must walk the
# row's chain of versions made by the ones before it (200,000 rows: ten minutes).
def _apply(deltas: str) -> str:
    """Add the per-tenancy sums of ``deltas`` (rows of :func:`_sums`) to the tenancy rows."""
    return (
        f"UPDATE tenancy t SET gpus_in_use = t.gpus_in_use + d.gpus, "
        f"{', '.join(f'{c} = t.{c} + d.{c}' for c in _COLUMNS.values())} "
        f"FROM (SELECT tenancy, {', '.join(f'SUM({c}) AS {c}' for c in _ALL)} "
        f"FROM ({deltas}) x GROUP BY tenancy) d "
        f"WHERE t.name = d.tenancy AND ({' OR '.join(f'd.{c} <> 0' for c in _ALL)});"
    )


_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION gpucaas_container_counts() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {_apply(_sums("new_rows", "+"))}
    ELSIF TG_OP = 'DELETE' THEN
        {_apply(_sums("old_rows", "-"))}
    ELSE
        {_apply(_sums("new_rows", "+") + " UNION ALL " + _sums("old_rows", "-"))}
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""

#: (name, event, transition tables); PostgreSQL allows transition tables on one event per
#: trigger and on no column list, so there are three, and updates of any column fire one.
_PG_TRIGGERS = (
    ("container_counts_insert", "INSERT", "NEW TABLE AS new_rows"),
    ("container_counts_update", "UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
    ("container_counts_delete", "DELETE", "OLD TABLE AS old_rows"),
)


def _pg_create() -> None:
    op.execute(_PG_FUNCTION)
    for name, event, tables in _PG_TRIGGERS:
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON container REFERENCING {tables} "
            "FOR EACH STATEMENT EXECUTE FUNCTION gpucaas_container_counts()"
        )


def _live(row: str) -> str:
    return f"(CASE WHEN {row}.tenancy_deleted_at IS NULL THEN {row}.status END)"


def _gpus(row: str) -> str:
    return f"(CASE WHEN {row}.status IN {_ACTIVE} THEN {row}.gpus ELSE 0 END)"


# SQLite has no trigger functions: one trigger per event, each one UPDATE (same names as 0006).
_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER container_gpu_usage_insert AFTER INSERT ON container
    WHEN NEW.status IN {_ACTIVE} OR NEW.tenancy_deleted_at IS NULL
    BEGIN
        UPDATE tenancy SET
            gpus_in_use = gpus_in_use + {_gpus("NEW")},
            {_count_terms(None, _live("NEW"))}
         WHERE name = NEW.tenancy;
    END
    """,
    f"""
    CREATE TRIGGER container_gpu_usage_delete AFTER DELETE ON container
    WHEN OLD.status IN {_ACTIVE} OR OLD.tenancy_deleted_at IS NULL
    BEGIN
        UPDATE tenancy SET
            gpus_in_use = gpus_in_use - {_gpus("OLD")},
            {_count_terms(_live("OLD"), None)}
         WHERE name = OLD.tenancy;
    END
    """,
    f"""
    CREATE TRIGGER container_gpu_usage_update AFTER UPDATE OF status, gpus, tenancy_deleted_at ON container
    WHEN OLD.status IN {_ACTIVE} OR NEW.status IN {_ACTIVE}
         OR {_live("OLD")} IS NOT {_live("NEW")}
    BEGIN
        UPDATE tenancy SET
            gpus_in_use = gpus_in_use - {_gpus("OLD")} + {_gpus("NEW")},
            {_count_terms(_live("OLD"), _live("NEW"))}
         WHERE name = NEW.tenancy;
    END
    """,
)

_SQLITE_NAMES = ("container_gpu_usage_insert", "container_gpu_usage_delete", "container_gpu_usage_update")


def _fill() -> str:
    sets = ", ".join(
        f"{column} = (SELECT COUNT(*) FROM container c WHERE c.tenancy = tenancy.name "
        f"AND c.tenancy_deleted_at IS NULL AND c.status = '{status}')"
        for status, column in _COLUMNS.items()
    )
    return f"UPDATE tenancy SET {sets}"


def _drop_triggers(postgres: bool) -> None:
    if postgres:
        op.execute("DROP TRIGGER IF EXISTS container_gpu_usage ON container")
        for name, _, _ in _PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON container")
    else:
        for name in _SQLITE_NAMES:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    _drop_triggers(postgres)
    with op.batch_alter_table("tenancy") as batch:
        for column in _COLUMNS.values():
            batch.add_column(sa.Column(column, sa.Integer, nullable=False, server_default="0"))
    op.execute(_fill())
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS gpucaas_container_gpu_usage()")
        _pg_create()
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)


def _migration_0006() -> ModuleType:
    """0006's module (its file name is not an importable name): its trigger definitions."""
    path = Path(__file__).with_name("0006_tenancy_gpu_counter.py")
    spec = importlib.util.spec_from_file_location("gpucaas_migration_0006", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    _drop_triggers(postgres)
    with op.batch_alter_table("tenancy") as batch:
        for column in _COLUMNS.values():
            batch.drop_column(column)
    before = _migration_0006()
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS gpucaas_container_counts()")
        op.execute(before._PG_FUNCTION)  # 0006's own definitions, restored
        op.execute(before._PG_TRIGGER)
    else:
        for trigger in before._SQLITE_TRIGGERS:
            op.execute(trigger)
