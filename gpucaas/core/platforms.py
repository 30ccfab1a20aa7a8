"""HGX H100 platform layouts: which PCI address holds which Fabric Manager physical id.

On H100, Fabric Manager's partition info carries no PCI bus id or UUID: GPUs are
known by physical id, which is the GPU's module id on the baseboard (NVIDIA Fabric
Manager User Guide, "GPU Partitions" for the Shared NVSwitch model). The host must
therefore map module id -> PCI address itself; this module holds the layouts the
project ships. The DGX H100 one is also the layout of the fake sysfs board.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlatformLayout:
    """One baseboard's PCI layout: GPUs with their physical (module) ids, NVSwitches."""

    name: str
    gpu_bdfs: tuple[str, ...]
    gpu_physical_ids: tuple[int, ...]
    nvswitch_bdfs: tuple[str, ...]
    memory_controller_bdf: str | None = None

    def physical_id_to_bdf(self) -> dict[int, str]:
        return dict(zip(self.gpu_physical_ids, self.gpu_bdfs, strict=True))


#: DGX H100: GPUs on buses 18/2a/3a/5d (NUMA 0) and 9a/ab/ba/db (NUMA 1); module ids
#: do not follow bus order. Four NVSwitches and the NVSwitch memory controller.
DGX_H100 = PlatformLayout(
    name="dgx-h100",
    gpu_bdfs=(
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:3a:00.0",
        "0000:5d:00.0",
        "0000:9a:00.0",
        "0000:ab:00.0",
        "0000:ba:00.0",
        "0000:db:00.0",
    ),
    gpu_physical_ids=(2, 4, 1, 3, 7, 5, 8, 6),
    nvswitch_bdfs=("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"),
    memory_controller_bdf="0000:03:00.1",
)

PLATFORMS: dict[str, PlatformLayout] = {DGX_H100.name: DGX_H100}
