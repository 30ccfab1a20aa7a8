"""Prometheus metrics of the DRA driver, in a registry of its own, on ``/metrics`` of its
metrics port; the GPU-lease agent beside it (``gpucaas/dra_node.py``) adds its lease gauges
to the same registry, as it does to the device plugin's. The chart's node alerts (Fabric
Manager unreachable, quarantined GPUs, leases stuck) read them in either allocation mode."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge


class Metrics:
    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.fabric_reachable = Gauge(
            "gpucaas_dra_driver_fabric_reachable",
            "1 if the fabric service answered the last discovery.",
            ["node"],
            registry=r,
        )
        self.gpus = Gauge(
            "gpucaas_dra_driver_gpus",
            "GPUs of the last discovery by state (allocatable: in the published slices; withheld: "
            "unhealthy, not Free, or in a partition another holder keeps).",
            ["node", "state"],
            registry=r,
        )
        self.prepared_claims = Gauge(
            "gpucaas_dra_driver_prepared_claims",
            "ResourceClaims prepared on this node (the checkpoint).",
            ["node"],
            registry=r,
        )

    def discovered(self, *, reachable: bool, allocatable: int = 0, withheld: int = 0) -> None:
        self.fabric_reachable.labels(self.node).set(1 if reachable else 0)
        if reachable:
            self.gpus.labels(self.node, "allocatable").set(allocatable)
            self.gpus.labels(self.node, "withheld").set(withheld)
