"""Prometheus metrics of the device plugin, in a registry of its own (one per plugin)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class Metrics:
    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.gpus = Gauge(
            "gpucaas_device_plugin_gpus",
            "Advertised GPUs by state (free, allocated, unhealthy).",
            ["node", "state"],
            registry=r,
        )
        self.gpu_healthy = Gauge(
            "gpucaas_device_plugin_gpu_healthy",
            "1 if the GPU is reported Healthy.",
            ["node", "gpu", "model"],
            registry=r,
        )
        self.gpu_allocation = Gauge(
            "gpucaas_device_plugin_gpu_allocation",
            "1 per GPU held by a pod (kubelet PodResources view).",
            ["node", "gpu", "physical_id", "namespace", "pod", "container"],
            registry=r,
        )
        self.gpus_by_namespace = Gauge(
            "gpucaas_device_plugin_namespace_gpus",
            "GPUs held per namespace (tenancy).",
            ["node", "namespace"],
            registry=r,
        )
        self.not_vfio = Gauge(
            "gpucaas_device_plugin_gpus_not_advertised",
            "NVIDIA GPUs seen in sysfs but not advertised (not on vfio, unusable).",
            ["node"],
            registry=r,
        )
        self.left_out = Gauge(
            "gpucaas_device_plugin_gpu_not_advertised",
            "1 per NVIDIA GPU not advertised, with its driver and reason.",
            ["node", "gpu", "driver", "reason"],
            registry=r,
        )
        self.topology_source = Gauge(
            "gpucaas_device_plugin_topology_source",
            "1 for the source of the physical id map (fabric-manager or pci-order).",
            ["node", "source"],
            registry=r,
        )
        self.fabric_reachable = Gauge(
            "gpucaas_device_plugin_fabric_reachable",
            "1 if the fabric service answered the last poll.",
            ["node"],
            registry=r,
        )
        self.allocations = Counter(
            "gpucaas_device_plugin_allocations",
            "Allocate calls answered, by NVLink (partition-shaped or not).",
            ["node", "nvlink"],
            registry=r,
        )
        self.allocate_failures = Counter(
            "gpucaas_device_plugin_allocate_failures",
            "Allocate calls failed, by reason.",
            ["node", "reason"],
            registry=r,
        )
        self.registrations = Counter(
            "gpucaas_device_plugin_registrations", "Successful registrations with the kubelet.", ["node"], registry=r
        )
        self.sysfs_problems = Gauge(
            "gpucaas_device_plugin_sysfs_problems",
            "Unusable sysfs entries seen in the last discovery.",
            ["node"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
