"""Entry: load settings, configure logging, wire the parts, run until signalled."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field

from services.device_plugin.fabric import FabricService, NoFabric
from services.device_plugin.firmware import GoldenTable, SysfsFirmwareCheck
from services.device_plugin.leases import LeaseNodeAgent, NodeGPU, PodHolding
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
    leases: LeaseNodeAgent | None = None
    _metrics_server: object | None = field(default=None, repr=False)
    metrics_port: int | None = None

    def start(self) -> None:
        logger.info("node=%s starting device plugin: %s", self.settings.node_name, self.settings.summary())
        self.core.start()
        self.registrar.start()
        self.usage.start()
        if self.leases is not None:
            self.leases.start()
        if self.settings.metrics_port >= 0:
            from prometheus_client import start_http_server

            server, _ = start_http_server(self.settings.metrics_port, registry=self.metrics.registry)
            self._metrics_server = server
            self.metrics_port = server.server_port
            logger.info("node=%s metrics on :%d/metrics", self.settings.node_name, self.metrics_port)

    def stop(self) -> None:
        if self.leases is not None:
            self.leases.stop()
        self.usage.stop()
        self.registrar.stop()
        self.core.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()  # type: ignore[attr-defined]
            self._metrics_server.server_close()  # type: ignore[attr-defined]
            self._metrics_server = None
        self.fabric.close()
        logger.info("node=%s device plugin stopped", self.settings.node_name)


def build(settings: DevicePluginSettings, *, fabric: FabricPort | None = None,
          health_sources: list[HealthSource] | None = None) -> DevicePlugin:
    metrics = Metrics(settings.node_name)
    if fabric is None:
        fabric = (FabricService(settings.fabric_socket, timeout=settings.fabric_timeout)
                  if settings.fabric_socket is not None else NoFabric())
    core = PluginCore(settings, fabric, metrics, health_sources or ())
    registrar = KubeletRegistrar(DevicePluginServicer(core), plugin_dir=settings.device_plugin_dir,
                                 resource_name=settings.resource_name, metrics=metrics,
                                 node=settings.node_name, watch_interval=settings.kubelet_watch_interval)
    usage = UsageMonitor(core, PodResourcesReader(settings.pod_resources_socket), metrics,
                         resource_name=settings.resource_name, interval=settings.pod_resources_interval,
                         grace=settings.fabric_sync_grace)
    core.on_conflict = usage.sync_now
    core.live_holders = lambda: {h.holder for h in live_holders(usage.last)}
    leases = build_leases(settings, core) if settings.leases else None
    return DevicePlugin(settings, metrics, core, registrar, usage, fabric, leases)


def build_leases(settings: DevicePluginSettings, core: PluginCore) -> LeaseNodeAgent:
    """The node side of GPU leases, reporting non-allocatable GPUs to ``core`` as Unhealthy."""
    from kubernetes import config

    api = (config.new_client_from_config(str(settings.kubeconfig)) if settings.kubeconfig
           else _default_kube_client())
    golden = GoldenTable.load(settings.firmware_golden_file) if settings.firmware_golden_file else GoldenTable()
    if not golden.by_device_id:
        logger.warning("node=%s no golden firmware configured: every GPU check will fail (NoGoldenFirmware)",
                       settings.node_name)
    reader = PodResourcesReader(settings.pod_resources_socket)

    def gpus() -> list[NodeGPU]:
        physical = core.physical_map.by_bdf
        return [NodeGPU(g.bdf, f"0x{g.device_id:04x}", physical.get(g.bdf), g.model) for g in core.inventory().gpus]

    def holdings() -> list[PodHolding]:
        return [PodHolding(c.namespace, c.pod, tuple(c.device_ids)) for c in reader.list(settings.resource_name)]

    agent = LeaseNodeAgent(api, settings.node_name, gpus, holdings,
                           SysfsFirmwareCheck(settings.sysfs_root, golden, toggle_rom=settings.firmware_rom_toggle),
                           interval=settings.lease_interval)
    core.add_health_source(agent.health)
    core.add_allocation_listener(agent.note_allocation)
    return agent


def _default_kube_client():  # noqa: ANN202
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def run(settings: DevicePluginSettings) -> None:
    """Run until SIGTERM/SIGINT."""
    plugin = build(settings)
    done = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        logger.info("node=%s signal %d: stopping", settings.node_name, signum)
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    plugin.start()
    try:
        done.wait()
    finally:
        plugin.stop()


def configure_logging(level: str = "INFO", json_logs: bool = False) -> None:
    if json_logs:
        fmt = '{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}'
    else:
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level.upper(), format=fmt)
