"""``gpucaas_usage_gpu_seconds_total{tenancy}``: GPU-seconds of ended runs, read from the usage
records at each scrape. Being the database's sum, it survives API restarts and is the same on
every replica (aggregate replicas with ``max``, not ``sum``); it grows when a run ends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from services.api.usage.records import TABLES

log = logging.getLogger(__name__)

NAME = "gpucaas_usage_gpu_seconds"
HELP = "GPU-seconds of ended container runs per tenancy, from the usage records."


class UsageCollector(Collector):
    def __init__(self, engine_of: Callable[[], Engine | None]) -> None:
        self.engine_of = engine_of

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(NAME, HELP, labels=["tenancy"])

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(NAME, HELP, labels=["tenancy"])
        engine = self.engine_of()
        if engine is not None:
            try:
                totals: dict[str, float] = {}
                with Session(engine) as session:
                    for table in TABLES:
                        stmt = (
                            select(table.tenancy, func.sum(table.gpu_seconds))
                            .where(col(table.gpu_seconds).is_not(None))
                            .group_by(table.tenancy)
                        )
                        for tenancy, total in session.exec(stmt).all():
                            totals[tenancy] = totals.get(tenancy, 0.0) + float(total or 0)
                for tenancy, total in sorted(totals.items()):
                    family.add_metric([tenancy], total)
            except Exception:  # a scrape must not fail on a database hiccup
                log.warning("usage metrics unavailable", exc_info=True)
        yield family
