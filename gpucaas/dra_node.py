"""``gpucaas dra-driver``: a GPU node's agents in the DRA mode — the DRA kubelet plugin and,
beside it, the GPU-lease node agent following the prepared claims.

The composition root of the DRA mode, as :mod:`gpucaas.gpu_node` is the device
plugin's: the two services never import each other. The lease agent reads the node's
vfio GPUs (the core's sysfs discovery, the physical ids the fabric service reports) and
the claims the driver has prepared (its checkpoint: a GPU of a prepared claim is held,
by the pod the claim was reserved for, in the claim's namespace); it hears every
Prepare at once (a claim unprepared before the next round still ends in a firmware
check). A GPU released by Unprepare goes Releasing -> Checking -> Free, and the driver
holds it out of its ResourceSlices meanwhile (it reads the leases' phases when it
publishes).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from core import vfio_sysfs
from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from core.stop_signals import on_stop_signal
from services.dra_driver import cli as dra_driver_cli
from services.dra_driver.main import DraDriverNode, build
from services.dra_driver.settings import DraDriverSettings
from services.gpu_leases import cli as gpu_leases_cli, main as gpu_leases_main
from services.gpu_leases.agent import NodeGPU, NodeLeases, PodHolding
from services.gpu_leases.metrics import LeaseMetrics
from services.gpu_leases.settings import LeaseAgentSettings

logger = logging.getLogger(__name__)


@dataclass
class DraNode:
    driver: DraDriverNode
    leases: NodeLeases | None = None

    def start(self) -> None:
        self.driver.start()
        if self.leases is not None:
            self.leases.start()

    def stop(self) -> None:
        if self.leases is not None:
            self.leases.stop()
        self.driver.stop()


def attach_leases(driver: DraDriverNode, settings: LeaseAgentSettings) -> NodeLeases:
    ds = driver.settings

    def gpus() -> list[NodeGPU]:
        physical = {bdf: pid for pid, bdf in driver.physical_to_pci().items()}
        return [
            NodeGPU(g.bdf, f"0x{g.device_id:04x}", physical.get(g.bdf), g.model)
            for g in vfio_sysfs.scan(ds.sysfs_root, ds.dev_root).gpus
        ]

    def holdings() -> list[PodHolding]:
        return [
            PodHolding(c.namespace, c.pod or c.name, c.pci_addresses)
            for c in driver.checkpoint.all()
            if c.pci_addresses
        ]

    agent = gpu_leases_main.build(settings, node=ds.node_name, sysfs_root=ds.sysfs_root, gpus=gpus, holdings=holdings)
    if driver.metrics is not None:  # the lease gauges on the driver's /metrics
        agent.on_round = LeaseMetrics(driver.metrics.registry, ds.node_name).observe
    assert driver.driver is not None
    driver.driver.prepared_listeners.append(agent.note_allocation)
    return agent


@settings_command(
    dra_driver_cli.OPTIONS, gpu_leases_cli.NODE_AGENT_BESIDE_DRA, Section(LoggingSettings, "log-"), name="dra-driver"
)
def command(settings: DraDriverSettings, lease_settings: LeaseAgentSettings, logging_settings: LoggingSettings) -> None:
    """Run the DRA kubelet plugin (NVLink partitions as devices) and, with --lease-leases, the GPU-lease agent."""
    configure_logging(logging_settings)
    driver = build(settings)
    node = DraNode(driver, attach_leases(driver, lease_settings) if lease_settings.leases else None)
    done = threading.Event()
    on_stop_signal(done.set)
    node.start()
    logger.info(
        "DRA driver running on %s (binding conditions %s, leases %s)",
        settings.node_name,
        "on" if settings.binding_conditions else "off",
        "on" if node.leases else "off",
    )
    try:
        done.wait()
    finally:
        node.stop()
