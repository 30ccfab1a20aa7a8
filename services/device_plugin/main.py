"""Wiring: the device plugin's parts built from its settings, started and stopped in order.

The process entry (``gpucaas device-plugin``) is ``gpucaas/gpu_node.py``: it runs
this plugin and, beside it, the GPU-lease node agent (``services/gpu_leases``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from core.metrics_server import MetricsServer
from services.device_plugin.fabric import FabricService, NoFabric
from services.device_plugin.metrics import Metrics
from services.device_plugin.plugin import PluginCore
from services.device_plugin.podresources import PodResourcesReader
from services.device_plugin.ports import FabricPort, HealthSource
from services.device_plugin.registration import KubeletRegistrar
from services.device_plugin.server import DevicePluginServicer
from services.device_plugin.settings import DevicePluginSettings
from services.device_plugin.usage import UsageMonitor, live_holders

logger = logging.getLogger(__name__)


@dataclass
class DevicePlugin:
    """Every part of a running plugin, wired; ``start``/``stop`` in order."""

    settings: DevicePluginSettings
    metrics: Metrics
    core: PluginCore
    registrar: KubeletRegistrar
    usage: UsageMonitor
    fabric: FabricPort
    metrics_server: MetricsServer | None = field(default=None, repr=False)

    @property
    def metrics_port(self) -> int | None:
        """Where /metrics is served, once started."""
        return self.metrics_server.port if self.metrics_server is not None else None

    def start(self) -> None:
        logger.info("node=%s starting device plugin: %s", self.settings.node_name, self.settings.summary())
        self.core.start()
        self.registrar.start()
        self.usage.start()
        if self.settings.metrics_port >= 0:
            self.metrics_server = MetricsServer(self.settings.metrics_port, self.metrics.registry)
            logger.info("node=%s metrics on :%d/metrics", self.settings.node_name, self.metrics_port)

    def stop(self) -> None:
        self.usage.stop()
        self.registrar.stop()
        self.core.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None
        self.fabric.close()
        self.usage.reader.close()
        logger.info("node=%s device plugin stopped", self.settings.node_name)


def build(
    settings: DevicePluginSettings,
    *,
    fabric: FabricPort | None = None,
    health_sources: list[HealthSource] | None = None,
) -> DevicePlugin:
    metrics = Metrics(settings.node_name)
    if fabric is None:
        fabric = (
            FabricService(settings.fabric_socket, timeout=settings.fabric_timeout)
            if settings.fabric_socket is not None
            else NoFabric()
        )
    core = PluginCore(settings, fabric, metrics, health_sources or ())
    registrar = KubeletRegistrar(
        DevicePluginServicer(core),
        plugin_dir=settings.device_plugin_dir,
        resource_name=settings.resource_name,
        metrics=metrics,
        node=settings.node_name,
        watch_interval=settings.kubelet_watch_interval,
    )
    usage = UsageMonitor(
        core,
        PodResourcesReader(settings.pod_resources_socket),
        metrics,
        resource_name=settings.resource_name,
        interval=settings.pod_resources_interval,
        grace=settings.fabric_sync_grace,
    )
    core.on_conflict = usage.sync_now
    core.live_holders = lambda: {h.holder for h in live_holders(usage.last)}
    return DevicePlugin(settings, metrics, core, registrar, usage, fabric)
