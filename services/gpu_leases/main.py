"""Building the node agent: settings + what the node offers (GPUs, pod holdings) -> a NodeLeases.

The agent has no process of its own: the GPU node programs (``gpucaas/gpu_node.py``,
``dra_node.py``) build it here, beside their daemon, and run it with theirs. The cluster-side
timers are :func:`services.gpu_leases.controller.register`, which ``gpucaas/controller.py``
adds to the controller's operator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from core.kube import KubeAdapter, KubeConnection, connect
from services.gpu_leases.agent import NodeGPU, NodeLeases, PodHolding
from services.gpu_leases.firmware import GoldenTable, SysfsFirmwareCheck
from services.gpu_leases.settings import LeaseAgentSettings

logger = logging.getLogger(__name__)


def kube_client(kubeconfig: Path | None) -> KubeAdapter:
    """The core adapter's light path (no official client in the device plugin's process): the
    kubeconfig given, else in-cluster, else KUBECONFIG / ~/.kube/config."""
    return connect(KubeConnection(kubeconfig=kubeconfig))


def build(
    settings: LeaseAgentSettings,
    *,
    node: str,
    sysfs_root: Path,
    gpus: Callable[[], Iterable[NodeGPU]],
    holdings: Callable[[], Iterable[PodHolding]],
) -> NodeLeases:
    """The node agent for ``node``; ``gpus`` and ``holdings`` come from whoever discovers them."""
    golden = GoldenTable.load(settings.firmware_golden_file) if settings.firmware_golden_file else GoldenTable()
    if not golden.by_device_id:
        logger.warning("node=%s no golden firmware configured: every GPU check will fail (NoGoldenFirmware)", node)
    checker = SysfsFirmwareCheck(sysfs_root, golden, toggle_rom=settings.firmware_rom_toggle)
    return NodeLeases(
        kube_client(settings.kubeconfig),
        node,
        gpus,
        holdings,
        checker,
        interval=settings.lease_interval,
        reset=gpu_reset_hook(settings, sysfs_root),
    )


def gpu_reset_hook(settings: LeaseAgentSettings, sysfs_root: Path) -> Callable[[str], object] | None:
    """GPU reset after release, before the firmware check (core.gpu_reset), unless turned off."""
    if not settings.gpu_reset:
        return None
    from core.gpu_reset import reset_gpu

    return lambda bdf: reset_gpu(sysfs_root, bdf)
