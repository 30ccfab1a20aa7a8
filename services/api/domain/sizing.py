"""CPU, memory and /dev/shm of a tenant container, from a per-GPU share of the node.

Kata sizes the micro-VM from the pod's limits at boot (``static_sandbox_resource_mgmt``
in ``deploy/kata/``), so a container that sets only ``nvidia.com/gpu`` would get the
tenancy's LimitRange default (a few CPUs) behind eight H100s. Each container therefore
gets ``gpus × share`` of CPU and memory unless the tenant asks for something else
within the tenancy's quota, with requests equal to limits (the VM takes it all at boot).

When the node configuration backs Kata guest memory with 1 GiB hugepages
(``enable_hugepages = true`` in ``deploy/kata/configuration-qemu-nvidia-gpu.toml``;
the chart's ``sizing.kataHugepages`` → ``GPUCAAS_KATA_HUGEPAGES``), the memory is also
requested as ``hugepages-1Gi`` of the same size, as in the Kubernetes "Manage
HugePages" task's example (memory and hugepages both set), so the scheduler places the
pod only where the node has reserved enough 1 GiB pages and the kubelet charges them;
the amount is rounded up to whole GiB. The RuntimeClass's ``overhead`` (QEMU, shim)
is added to the pod by the API server's RuntimeClass admission (Kubernetes "Pod
Overhead"), not here; ``tenancy_quota`` counts it.

``/dev/shm`` is a memory-backed ``emptyDir`` (``sizeLimit``), since a container's
default 64 MiB breaks PyTorch data loaders; it lives in the guest's memory, so it can
be at most the container's memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
GIB = 2**30
# Ordinary memory a hugepage-backed guest still needs on the host side (page tables, I/O buffers).
HUGEPAGES_MEMORY_REQUEST = GIB
# Least memory a container may ask for: a Kata guest with the NVIDIA driver does not come up in less.
MIN_MEMORY = 4 * GIB
CPU_RULE = "a CPU count such as 16, 12.5 or 500m"
MEMORY_RULE = "a byte quantity such as 64Gi, 512Mi or 1Ti"


def parse_cpu(value: str | int | float) -> int:
    """CPU quantity → millicores (``"16"`` → 16000, ``"500m"`` → 500)."""
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if m is None or m.group(2) not in (None, "m"):
        raise ValueError(f"{value!r} is not a CPU quantity; allowed: {CPU_RULE}")
    number = Decimal(m.group(1))
    milli = number if m.group(2) == "m" else number * 1000
    if milli != milli.to_integral_value() or milli <= 0:
        raise ValueError(f"{value!r} is not a CPU quantity; allowed: {CPU_RULE} (at least 1m, in whole millicores)")
    return int(milli)


def parse_bytes(value: str | int) -> int:
    """Memory quantity → bytes (``"64Gi"``, ``"1Ti"``, ``"500M"``)."""
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if m is None or m.group(2) == "m":
        raise ValueError(f"{value!r} is not a memory quantity; allowed: {MEMORY_RULE}")
    number = Decimal(m.group(1)) * _UNITS[m.group(2) or ""]
    if number != number.to_integral_value() or number <= 0:
        raise ValueError(f"{value!r} is not a memory quantity; allowed: {MEMORY_RULE}")
    return int(number)


def format_cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_bytes(n: int) -> str:
    """Canonical Kubernetes form, largest binary unit that divides exactly (``1024Gi`` → ``1Ti``)."""
    for unit in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        if n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return str(n)


@dataclass(frozen=True)
class Share:
    """What one GPU brings with it, and the Kata VM overhead of one pod."""

    cpu_milli: int
    memory_bytes: int
    shm_bytes: int
    hugepages: bool
    overhead_cpu_milli: int = 0
    overhead_memory_bytes: int = 0


@dataclass(frozen=True)
class Size:
    cpu_milli: int
    memory_bytes: int
    shm_bytes: int
    hugepages: bool

    def resources(self, gpu_resource: str | None, gpus: int) -> dict[str, dict[str, str]]:
        """The container's ``resources`` (``gpu_resource`` None: the GPUs come from a DRA claim).

        Without hugepages, requests equal limits (the VM takes all of it at boot). With
        hugepages the guest's memory comes from the node's 1 GiB page pool, which
        Kubernetes accounts apart from ordinary memory: ``hugepages-1Gi`` is requested in
        full (hugepage requests must equal limits), while ordinary memory is requested
        only for what stays outside the pages (``HUGEPAGES_MEMORY_REQUEST``) and its
        *limit* stays the guest size, the figure Kata sizes the VM from.
        """
        cpu, memory = format_cpu(self.cpu_milli), format_bytes(self.memory_bytes)
        limits = {gpu_resource: str(gpus)} if gpu_resource else {}
        limits.update(cpu=cpu, memory=memory)
        requests = {"cpu": cpu, "memory": memory}
        if self.hugepages:
            limits["hugepages-1Gi"] = requests["hugepages-1Gi"] = memory
            requests["memory"] = format_bytes(min(self.memory_bytes, HUGEPAGES_MEMORY_REQUEST))
        return {"limits": limits, "requests": requests}


def size_for(
    share: Share, gpus: int, *, cpu: str | None = None, memory: str | None = None, shm_size: str | None = None
) -> Size:
    """The container's size: ``gpus × share`` unless overridden (validated by the caller)."""
    cpu_milli = parse_cpu(cpu) if cpu is not None else gpus * share.cpu_milli
    memory_bytes = parse_bytes(memory) if memory is not None else gpus * share.memory_bytes
    if share.hugepages:  # whole 1 GiB pages
        memory_bytes = math.ceil(memory_bytes / GIB) * GIB
    shm = parse_bytes(shm_size) if shm_size is not None else min(gpus * share.shm_bytes, memory_bytes)
    return Size(cpu_milli=cpu_milli, memory_bytes=memory_bytes, shm_bytes=shm, hugepages=share.hugepages)


def tenancy_quota(share: Share, gpu_quota: int) -> dict[str, int]:
    """CPU and memory a tenancy may hold: its GPU quota's worth of shares, plus the Kata
    overhead of as many pods as it can run with GPUs (one per GPU at most)."""
    return {
        "cpu_milli": gpu_quota * (share.cpu_milli + share.overhead_cpu_milli),
        "memory_bytes": gpu_quota * (share.memory_bytes + share.overhead_memory_bytes),
    }
