"""PCI identities every node-side part agrees on (PCI-SIG class codes, NVIDIA's vendor id)."""

from __future__ import annotations

#: NVIDIA's PCI vendor id.
NVIDIA_VENDOR = 0x10DE
#: PCI class 0x0302xx: display controller / 3D controller (datacenter GPUs).
GPU_CLASS_PREFIX = 0x0302
