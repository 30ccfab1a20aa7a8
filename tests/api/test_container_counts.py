"""A page's ``count`` comes from the tenancy rows' counters (migration 0009), on both
databases: after every kind of change a container goes through — admission, status
changes (one row and many), a tenancy's deletion, a new tenancy of the same name,
retention's deletes, a downgrade and upgrade — the counters equal a count of the rows."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

import pytest
from sqlalchemy import Engine, func, update
from sqlmodel import Session, col, delete, select

from services.api.db import engines
from services.api.domain.models import Container, ContainerCreate, ContainerStatus, TenancyCreate
from services.api.store import admission, containers as container_store, tenancies as tenancy_store

IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = engines.make_engine(database_url)
    engines.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def submit(engine: Engine, tenancy: str, n: int) -> list[str]:
    ids = []
    with Session(engine) as session:
        for _ in range(n):
            row, created = admission.submit_container(
                session, tenancy_name=tenancy, data=ContainerCreate(image=IMAGE, gpus=1), idempotency_key=None
            )
            assert created
            ids.append(row.id)
    return ids


def set_status(engine: Engine, ids: list[str], status: ContainerStatus) -> None:
    with Session(engine) as session:
        session.exec(update(Container).where(col(Container.id).in_(ids)).values(status=status))
        session.commit()


def rows(session: Session, tenancy: str | None, status: ContainerStatus | None) -> int:
    conds = [col(Container.tenancy_deleted_at).is_(None)]
    if tenancy is not None:
        conds.append(Container.tenancy == tenancy)
    if status is not None:
        conds.append(Container.status == status)
    return int(session.exec(select(func.count()).select_from(Container).where(*conds)).one())


def assert_counts_exact(engine: Engine) -> None:
    with Session(engine) as session:
        for tenancy, status in product(("a", "b", None), (None, *ContainerStatus)):
            _, total, _ = container_store.list_containers(session, tenancy=tenancy, status=status, limit=1)
            assert total == rows(session, tenancy, status), (tenancy, status)


def test_counts_follow_every_change_of_a_container(engine: Engine) -> None:
    with Session(engine) as session:
        for name in ("a", "b"):
            tenancy_store.create_tenancy(session, data=TenancyCreate(name=name, gpu_quota=64))
    a = submit(engine, "a", 6)
    b = submit(engine, "b", 3)
    assert_counts_exact(engine)

    set_status(engine, a[:4], ContainerStatus.PENDING)  # many rows in one statement
    set_status(engine, a[:2], ContainerStatus.RUNNING)
    set_status(engine, a[:1], ContainerStatus.SUCCEEDED)
    set_status(engine, b[:1], ContainerStatus.FAILED)
    with Session(engine) as session:
        container_store.cancel_container(session, container=session.get(Container, a[5]))
    assert_counts_exact(engine)
    with Session(engine) as session:
        _, total, _ = container_store.list_containers(session, tenancy="a", status=ContainerStatus.RUNNING, limit=10)
        assert total == 1

    with Session(engine) as session:  # the tenancy goes; its containers stay as history
        tenancy_store.delete_tenancy(session, name="a")
        tenancy_store.create_tenancy(session, data=TenancyCreate(name="a", gpu_quota=8))  # a new owner of the name
    assert_counts_exact(engine)
    with Session(engine) as session:
        _, total, _ = container_store.list_containers(session, tenancy="a", status=None, limit=10)
        assert total == 0  # the old tenancy's containers are not the new one's
        _, history, _ = container_store.list_containers(session, tenancy="a", status=None, limit=10, history=True)
        assert history == 6  # the admin's history listing still counts them
    submit(engine, "a", 2)

    with Session(engine) as session:  # retention deletes finished rows, of live tenancies too
        session.exec(delete(Container).where(col(Container.id).in_([b[0], *a])))
        session.commit()
    assert_counts_exact(engine)


def test_counts_survive_a_downgrade_and_upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    with Session(engine) as session:
        tenancy_store.create_tenancy(session, data=TenancyCreate(name="a", gpu_quota=64))
    ids = submit(engine, "a", 4)
    set_status(engine, ids[:1], ContainerStatus.RUNNING)
    cfg = Config()
    cfg.set_main_option("script_location", str(engines.MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0008")
    set_status(engine, ids[1:2], ContainerStatus.SUCCEEDED)  # under 0008's triggers: no counters
    engines.upgrade(engine)  # 0009 counts the rows as they are
    assert_counts_exact(engine)
    with Session(engine) as session:
        assert tenancy_store.active_gpus(session, tenancy="a") == 3
