"""Data builders of the fabric tests: GPU sets by physical id, holder keys."""

from __future__ import annotations

from core.fabric_client import holder_for_gpus
from services.fabric.fabric_manager.simulator import default_gpu_map

GPU_BY_PHYSICAL = default_gpu_map()


def pcis(*physical_ids: int) -> list[str]:
    """PCI addresses of these physical GPU ids on the reference board."""
    return [GPU_BY_PHYSICAL[p] for p in physical_ids]


def holder(*physical_ids: int) -> str:
    """The device plugin's holder key for these GPUs."""
    return holder_for_gpus(pcis(*physical_ids))
