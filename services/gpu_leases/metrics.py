"""Prometheus gauges of a node's GPU leases, served by the daemon the agent runs in (the device
plugin's ``/metrics``): how many GPUs are in each state, and since when each GPU that is being
released or checked, or is quarantined, has been out of service (the alerts of the chart's
PrometheusRule: quarantined GPUs, leases stuck between tenants)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from core import lease_states as states


class LeaseMetrics:
    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        self.node = node
        self.leases = Gauge(
            "gpucaas_gpu_leases", "This node's GPU leases by state.", ["node", "state"], registry=registry
        )
        self.out_of_service_since = Gauge(
            "gpucaas_gpu_lease_out_of_service_since_timestamp_seconds",
            "Unix time a GPU that is Releasing, Checking or Quarantined stopped being allocatable, by lease.",
            ["node", "lease", "state"],
            registry=registry,
        )

    def observe(self, leases: Iterable[Mapping[str, Any]]) -> None:
        """Set the gauges from the node's leases as one round of the agent left them."""
        counts = dict.fromkeys(states.LeaseState, 0)
        self.out_of_service_since.clear()
        for lease in leases:
            status = lease.get("status") or {}
            state = states.state_of(status)
            counts[state] += 1
            if state in states.ALLOCATABLE_STATES:
                continue
            since = _unallocatable_since(status)
            if since is not None:
                self.out_of_service_since.labels(self.node, lease["metadata"]["name"], str(state)).set(since)
        for state, n in counts.items():
            self.leases.labels(self.node, str(state)).set(n)


def _unallocatable_since(status: Mapping[str, Any]) -> float | None:
    """When the ``Allocatable`` condition last turned False (the lease states' own record)."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Allocatable" and condition.get("status") == "False":
            stamp = condition.get("lastTransitionTime")
            if stamp:
                return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None
