"""``gpucaas device-plugin``: a GPU node's agents in one process — the device plugin and,
beside it, the GPU-lease node agent.

The two services never import each other; this composition root joins them through
the plugin's ports: the agent reads the plugin's GPU inventory (PCI address, device
id, physical id) and the kubelet's PodResources, hears every Allocate at once (a pod
gone before PodResources shows it must still end in a firmware check), and gives the
plugin a health source that withholds every GPU whose lease is not Free or Leased.
The device plugin itself holds no Kubernetes client and writes no cluster object.

Why one process and not a second container: the Allocate notification must not be
lost between two processes (it is what sends a briefly-held GPU to the check), and
the agent would otherwise repeat the plugin's sysfs discovery and PodResources
client. The agent is still its own package, settings and tests; a separate
container needs only a node-local channel for those two facts.
"""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass
from typing import Any

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from core.stop_signals import on_stop_signal
from services.device_plugin import cli as device_plugin_cli
from services.device_plugin.allocation import SOURCE_FABRIC
from services.device_plugin.main import DevicePlugin, build
from services.device_plugin.settings import DevicePluginSettings
from services.gpu_leases import cli as gpu_leases_cli, main as gpu_leases_main
from services.gpu_leases.agent import NodeGPU, NodeLeases, PodHolding
from services.gpu_leases.metrics import LeaseMetrics
from services.gpu_leases.settings import LeaseAgentSettings

logger = logging.getLogger(__name__)


@dataclass
class GpuNode:
    """The plugin and, when leases are on, the lease agent wired to it."""

    plugin: DevicePlugin
    leases: NodeLeases | None = None

    def start(self) -> None:
        self.plugin.start()
        if self.leases is not None:
            self.leases.start()

    def stop(self) -> None:
        if self.leases is not None:
            self.leases.stop()
        self.plugin.stop()


def attach_leases(plugin: DevicePlugin, settings: LeaseAgentSettings) -> NodeLeases:
    """A lease agent fed by ``plugin`` and withholding GPUs through it (before ``plugin.start``)."""
    core, ps = plugin.core, plugin.settings
    reader = plugin.usage.reader  # the plugin's kept-open PodResources channel, shared

    def gpus() -> list[NodeGPU]:
        # a lease is made once: it names a physical id only from the fabric service's map, never
        # the PCI-order guess the plugin uses until it has learnt that map
        pmap = core.physical_map
        physical = pmap.by_bdf if pmap.source == SOURCE_FABRIC else {}
        return [NodeGPU(g.bdf, f"0x{g.device_id:04x}", physical.get(g.bdf), g.model) for g in core.inventory().gpus]

    def holdings() -> list[PodHolding]:
        return [PodHolding(c.namespace, c.pod, tuple(c.device_ids)) for c in reader.list(ps.resource_name)]

    agent = gpu_leases_main.build(settings, node=ps.node_name, sysfs_root=ps.sysfs_root, gpus=gpus, holdings=holdings)
    core.add_health_source(agent.health)
    core.add_transient_source(agent.transient)  # a GPU the kubelet chose while it was released: wait, not fail
    agent.on_health_change = core.refresh_devices  # withhold a GPU at once, not at the next health check
    core.add_allocation_listener(agent.note_allocation)
    agent.on_round = LeaseMetrics(plugin.metrics.registry, ps.node_name).observe  # on the plugin's /metrics
    return agent


def build_node(plugin_settings: DevicePluginSettings, lease_settings: LeaseAgentSettings, **build_kw: Any) -> GpuNode:
    plugin = build(plugin_settings, **build_kw)
    return GpuNode(plugin, attach_leases(plugin, lease_settings) if lease_settings.leases else None)


@settings_command(
    device_plugin_cli.OPTIONS, gpu_leases_cli.NODE_AGENT, Section(LoggingSettings, "log-"), name="device-plugin"
)
def command(
    plugin_settings: DevicePluginSettings, lease_settings: LeaseAgentSettings, logging_settings: LoggingSettings
) -> None:
    """Run the vfio CDI device plugin and, with --leases, the GPU-lease node agent beside it."""
    configure_logging(logging_settings)
    node = build_node(plugin_settings, lease_settings)
    done = threading.Event()
    on_stop_signal(done.set)
    node.start()
    # Everything built so far (modules, settings, gRPC stubs) lives as long as the process:
    # out of the collector's sight, a full collection scans only what calls leave behind,
    # and no longer pauses an Allocate for milliseconds (benchmarks.device_plugin).
    gc.freeze()
    try:
        done.wait()
    finally:
        node.stop()
