"""The lease gauges the device plugin serves: GPUs per state, and since when each GPU between
tenants or quarantined has been out of service (the PrometheusRule's quarantine and stuck-lease
alerts read them)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from prometheus_client import CollectorRegistry

from core import lease_states as states
from services.gpu_leases.metrics import LeaseMetrics

T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)
HOLDER = states.Holder(pod="p", namespace="tenant-a", tenancy="a")


def _lease(name: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"pciAddress": name}, "status": status}


def test_gauges_follow_the_leases_of_a_round() -> None:
    leased = states.allocated(states.initial(T0), HOLDER, T0)
    releasing = states.released(leased, "pod gone", T0 + dt.timedelta(minutes=5))
    # a second check attempt keeps the time the GPU left service, not the retry's
    checking = states.check_started(
        states.check_started(releasing, T0 + dt.timedelta(minutes=6)), T0 + dt.timedelta(minutes=9)
    )
    quarantined = states.check_failed(checking, "RomMismatch", "ROM differs", now=T0 + dt.timedelta(minutes=10))
    registry = CollectorRegistry()
    metrics = LeaseMetrics(registry, "node-a")

    metrics.observe(
        [
            _lease("a", states.initial(T0)),
            _lease("b", leased),
            _lease("c", releasing),
            _lease("d", checking),
            _lease("e", quarantined),
        ]
    )

    def count(state: str) -> float | None:
        return registry.get_sample_value("gpucaas_gpu_leases", {"node": "node-a", "state": state})

    def since(lease: str, state: str) -> float | None:
        return registry.get_sample_value(
            "gpucaas_gpu_lease_out_of_service_since_timestamp_seconds",
            {"node": "node-a", "lease": lease, "state": state},
        )

    assert [count(s) for s in ("Free", "Leased", "Releasing", "Checking", "Quarantined")] == [1, 1, 1, 1, 1]
    left_service = (T0 + dt.timedelta(minutes=5)).timestamp()
    assert since("c", "Releasing") == since("d", "Checking") == since("e", "Quarantined") == left_service
    assert since("a", "Free") is None and since("b", "Leased") is None

    # the next round: the quarantined GPU was released by an admin and passed; its series go
    metrics.observe([_lease("a", states.initial(T0)), _lease("e", states.initial(T0))])
    assert count("Free") == 2 and count("Quarantined") == 0
    assert since("e", "Quarantined") is None
