"""What discovery found on the node: GPUs to advertise and devices left out (pure data).

Device ids (towards the kubelet) and CDI device names are the GPU's PCI address
(``0000:18:00.0``); the model name comes from the PCI device id table below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.pci import GPU_CLASS_PREFIX as GPU_CLASS_PREFIX, NVIDIA_VENDOR as NVIDIA_VENDOR

#: PCI device id -> model name, for the GPUs this plugin is meant for.
MODEL_NAMES: dict[int, str] = {
    0x2330: "NVIDIA H100 80GB HBM3 SXM5",
    0x2331: "NVIDIA H100 PCIe",
    0x2321: "NVIDIA H100 NVL",
    0x2324: "NVIDIA H800 SXM5",
    0x2322: "NVIDIA H800 PCIe",
    0x2335: "NVIDIA H200 141GB HBM3e SXM5",
    0x233B: "NVIDIA H200 NVL",
    0x20B0: "NVIDIA A100-SXM4-40GB",
    0x20B2: "NVIDIA A100-SXM4-80GB",
    0x20B5: "NVIDIA A100 80GB PCIe",
    0x20F1: "NVIDIA A100-PCIE-40GB",
    0x2901: "NVIDIA B200",
}


def model_name(device_id: int) -> str:
    return MODEL_NAMES.get(device_id, f"NVIDIA GPU (device 0x{device_id:04x})")


@dataclass(frozen=True)
class GPU:
    """A GPU bound to a vfio driver: advertised to the kubelet and listed in the CDI spec."""

    bdf: str
    device_id: int
    model: str
    driver: str
    iommu_group: int
    numa_node: int | None  # None when the firmware reports -1 / nothing
    vfio_device: str | None = None  # "vfio3" when the kernel exposes the iommufd cdev
    iommufd: bool = False  # use /dev/vfio/devices/<vfio_device> + /dev/iommu

    def device_nodes(self) -> tuple[str, ...]:
        """Container paths of the device nodes a VM needs for this GPU."""
        if self.iommufd and self.vfio_device:
            return (f"/dev/vfio/devices/{self.vfio_device}", "/dev/iommu")
        return (f"/dev/vfio/{self.iommu_group}",)


@dataclass(frozen=True)
class LeftOut:
    """An NVIDIA GPU found in sysfs but not advertised, and why."""

    bdf: str
    driver: str | None
    reason: str


@dataclass(frozen=True)
class Inventory:
    """One discovery pass."""

    gpus: tuple[GPU, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    #: Every NVIDIA 3D controller seen (vfio or not), in PCI order: the basis of the
    #: PCI-order physical-id fallback, stable when one GPU is rebound.
    all_gpu_bdfs: tuple[str, ...] = ()
    #: Readable explanations of sysfs content that could not be used.
    problems: tuple[str, ...] = field(default=())

    def by_bdf(self) -> dict[str, GPU]:
        return {g.bdf: g for g in self.gpus}
