"""The usage record tables and their writes: one row per container run.

A container's first run is a ``usage_record`` row keyed by the container id (migration 0007),
so a run observed twice, by two replicas or after a restart, is one row. A container the queue
preempted and put back (``restart_on_preemption``) runs again under the same id: each later run
is a ``usage_run`` row keyed by the id and the run's number (migration 0015), which the pod
carries in its label ``gpucaas.dev/run`` (absent: 0, the first run). The first run stays where
the previous release writes and reads it, so a rolling upgrade serves both (the expand/contract
rule, docs/deploy.md); the readers here read both tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import or_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Field, Session, SQLModel, col, select

from core import crds
from services.api.domain import pods, validation
from services.api.domain.models import _as_utc, utcnow

#: How a run's end was learnt. ``pod``: the container's own ``finishedAt``; ``deleted``: the
#: pod was deleted before it reported one (a cancellation), ended at the deletion;
#: ``vanished``: the pod was gone when the API looked again (ended when it was found gone).
END_POD, END_DELETED, END_VANISHED = "pod", "deleted", "vanished"


class _RunColumns(SQLModel):
    """The columns of a run's record, whichever table holds it."""

    container_id: str = Field(primary_key=True, max_length=32)
    tenancy: str = Field(max_length=63)
    gpus: int
    gpu_model: str | None = Field(default=None, max_length=128)
    node_name: str | None = Field(default=None, max_length=253)
    nvlink_partition_size: int | None = None
    # the container's class (migration 0015): interruptible runs may be priced apart
    interruptible: bool = False
    started_at: datetime
    finished_at: datetime | None = None
    gpu_seconds: float | None = None  # set when the run has ended
    end_source: str | None = Field(default=None, max_length=16)
    recorded_at: datetime = Field(default_factory=utcnow)
    # set when its tenancy was deleted: the admin's history, never a new namesake's usage or budget
    tenancy_deleted_at: datetime | None = None


class UsageRecord(_RunColumns, table=True):
    """A container's first run (migration 0007_usage_records)."""

    __tablename__ = "usage_record"

    @property
    def run(self) -> int:
        return 0


class UsageRun(_RunColumns, table=True):
    """A later run of a container the queue preempted and put back (migration 0015)."""

    __tablename__ = "usage_run"

    run: int = Field(primary_key=True)


#: A run's record, in either table.
RunRecord = UsageRecord | UsageRun
TABLES: tuple[type[UsageRecord], type[UsageRun]] = (UsageRecord, UsageRun)


def _table(run: int) -> type[UsageRecord] | type[UsageRun]:
    return UsageRecord if run == 0 else UsageRun


@dataclass(frozen=True)
class Run:
    """What a pod says about its container's run."""

    container_id: str
    tenancy: str
    gpus: int | None
    node_name: str | None
    started_at: datetime | None
    finished_at: datetime | None
    #: the run's number: 0 for the first, n after n preemptions (the pod's ``gpucaas.dev/run``)
    run: int = 0


def run_of_pod(pod: Mapping[str, Any], gpu_resource: str) -> Run | None:
    """The run of the API's pod (None for pods that are not the API's)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    cid, tenancy = labels.get(crds.LABEL_CONTAINER), labels.get(crds.LABEL_TENANCY)
    if not cid or not tenancy:
        return None
    report = pods.container_status_from_pod(pod, gpu_resource)
    started = finished = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name", pods.CONTAINER_NAME) != pods.CONTAINER_NAME:
            continue
        state = cs.get("state") or {}
        running, terminated = state.get("running"), state.get("terminated")
        if terminated:
            started = pods._time(terminated.get("startedAt"))
            finished = pods._time(terminated.get("finishedAt"))
        elif running:
            started = pods._time(running.get("startedAt"))
    return Run(
        container_id=cid,
        tenancy=tenancy,
        gpus=report.gpus,
        node_name=report.node_name,
        started_at=started,
        finished_at=finished,
        run=pods.run_of(pod),
    )


def nvlink_partition_size(gpus: int) -> int | None:
    """The NVLink partition a run of ``gpus`` GPUs holds: the device plugin and the DRA driver
    give 1, 2, 4 and 8 GPUs one Fabric Manager partition of that size, other counts none."""
    return gpus if gpus in validation.NVLINK_SIZES else None


def gpu_seconds(gpus: int, start: datetime, end: datetime) -> float:
    return gpus * max(0.0, (_as_utc(end) - _as_utc(start)).total_seconds())  # type: ignore[operator]


def open_run(
    session: Session,
    *,
    run: Run,
    gpus: int,
    gpu_model: str | None,
    tenancy_deleted_at: datetime | None = None,
    interruptible: bool = False,
) -> bool:
    """Insert the run's record unless it exists (any replica, any number of times). True if new."""
    assert run.started_at is not None
    values = {
        "container_id": run.container_id,
        "tenancy": run.tenancy,
        "gpus": gpus,
        "gpu_model": gpu_model,
        "node_name": run.node_name,
        "nvlink_partition_size": nvlink_partition_size(gpus),
        "interruptible": interruptible,
        "started_at": run.started_at,
        "recorded_at": utcnow(),
        "tenancy_deleted_at": tenancy_deleted_at,
    }
    table = _table(run.run)
    keys = ["container_id"]
    if run.run:
        values["run"] = run.run
        keys.append("run")
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
    result = session.exec(stmt)
    session.commit()
    return bool(result.rowcount)


def _key(table: type[UsageRecord] | type[UsageRun], container_id: str, run: int) -> list[Any]:
    where = [col(table.container_id) == container_id]
    if table is UsageRun:
        where.append(col(UsageRun.run) == run)
    return where


def close_run(session: Session, *, container_id: str, finished_at: datetime, source: str, run: int = 0) -> float | None:
    """End an open run (or replace an estimated end by the pod's own). Returns its GPU-seconds
    when this call ended it, None when it was already ended (never counted twice)."""
    table = _table(run)
    row = session.exec(select(table).where(*_key(table, container_id, run))).first()
    if row is None:
        return None
    if row.finished_at is not None and (row.end_source == END_POD or source != END_POD):
        return None
    seconds = gpu_seconds(row.gpus, row.started_at, finished_at)
    stmt = update(table).where(*_key(table, container_id, run))
    if source == END_POD:
        stmt = stmt.where(or_(col(table.finished_at).is_(None), col(table.end_source) != END_POD))
    else:
        stmt = stmt.where(col(table.finished_at).is_(None))
    result = session.exec(stmt.values(finished_at=finished_at, gpu_seconds=seconds, end_source=source))
    session.commit()
    return seconds if result.rowcount else None


def mark_tenancy_deleted(session: Session, *, tenancy: str, when: datetime) -> None:
    """The tenancy is being deleted (in the caller's transaction): its runs become history."""
    for table in TABLES:
        session.exec(
            update(table)
            .where(col(table.tenancy) == tenancy, col(table.tenancy_deleted_at).is_(None))
            .values(tenancy_deleted_at=when)
        )


def open_runs(session: Session, container_id: str | None = None) -> list[RunRecord]:
    """The runs not ended yet (of one container: at most one, its current run)."""
    rows: list[RunRecord] = []
    for table in TABLES:
        query = select(table).where(col(table.finished_at).is_(None))
        if container_id is not None:
            query = query.where(col(table.container_id) == container_id)
        rows.extend(cast(Sequence[RunRecord], session.exec(query).all()))
    return rows


def overlapping(
    session: Session, *, start: datetime, end: datetime, tenancy: str | None, current_only: bool = False
) -> list[RunRecord]:
    """Runs that used GPUs within [start, end), of one tenancy or all; ``current_only``: not
    the runs of a deleted tenancy of the same name (a tenant's view, its budget)."""
    rows: list[RunRecord] = []
    for table in TABLES:
        conds: list[Any] = [
            col(table.started_at) < end,
            or_(col(table.finished_at).is_(None), col(table.finished_at) > start),
        ]
        if tenancy is not None:
            conds.append(col(table.tenancy) == tenancy)
        if current_only:
            conds.append(col(table.tenancy_deleted_at).is_(None))
        rows.extend(cast(Sequence[RunRecord], session.exec(select(table).where(*conds)).all()))
    for row in rows:  # SQLite hands back naive datetimes
        row.started_at = _as_utc(row.started_at)  # type: ignore[assignment]
        row.finished_at = _as_utc(row.finished_at)
    rows.sort(key=lambda r: (r.started_at, r.container_id, r.run))
    return rows
