"""Reset a passthrough GPU through sysfs (``/sys/bus/pci/devices/<bdf>/reset``).

In the Shared NVSwitch model the hypervisor resets each GPU (a secondary bus
reset) before the GPU's partition is activated and after the guest that used it
ends (NVIDIA Fabric Manager User Guide, Shared NVSwitch Virtualization Model,
"Guest VM Life Cycle Management" / GPU reset). The fabric service resets before
activation; the GPU-lease node agent resets after release, right before the
firmware check reads the ROM, so the check sees the GPU as the next tenant will.

Kernel interface (Documentation/ABI/testing/sysfs-bus-pci): ``reset_method``
(Linux 5.15+) lists the methods the device supports in the order the kernel
tries them ("flr bus" ...); writing a method name makes it the only one used.
Writing ``1`` to ``reset`` resets the device with those methods. The helper
prefers ``bus`` (secondary bus reset) when offered, else leaves the kernel's
order. ``reset`` is opened for append: sysfs ignores the file position of an
attribute write, and a fake tree of plain files thus keeps one line per reset,
which is how tests see resets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PREFERRED_METHOD = "bus"


class GpuResetError(RuntimeError):
    """The GPU cannot be reset through sysfs (no reset attribute, or the write failed)."""


@dataclass(frozen=True)
class ResetResult:
    bdf: str
    method: str  # the method selected, or "default" (kernel's order), when reset_method is absent


def reset_gpu(sysfs_root: str | Path, bdf: str) -> ResetResult:
    """Reset one PCI function; raises GpuResetError with the path and cause."""
    dev = Path(sysfs_root) / "bus" / "pci" / "devices" / bdf
    reset = dev / "reset"
    if not reset.exists():
        raise GpuResetError(
            f"{bdf}: {reset} does not exist (the device offers no reset; "
            "check the kernel and the device's reset_method)"
        )
    method = "default"
    methods_file = dev / "reset_method"
    try:
        offered = methods_file.read_text().split()
    except OSError:
        offered = []
    if PREFERRED_METHOD in offered:
        method = PREFERRED_METHOD
        if offered[0] != PREFERRED_METHOD:
            try:
                methods_file.write_text(PREFERRED_METHOD + "\n")
            except OSError as exc:
                raise GpuResetError(f"{bdf}: cannot select the bus reset in {methods_file}: {exc}") from exc
    elif offered:
        method = offered[0]
    try:
        fd = os.open(reset, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"1\n")
        finally:
            os.close(fd)
    except OSError as exc:
        raise GpuResetError(f"{bdf}: writing {reset} failed: {exc}") from exc
    log.info("reset GPU %s (method %s)", bdf, method)
    return ResetResult(bdf, method)


def reset_gpus(sysfs_root: str | Path, bdfs: list[str] | tuple[str, ...]) -> list[ResetResult]:
    return [reset_gpu(sysfs_root, b) for b in bdfs]
