"""The ResourceSlice a node publishes: its GPUs as devices, each naming its NVLink pair and quad.

Shape (``resource.k8s.io/v1``; the limits are those the API server validates, see the field
descriptions of ``ResourceSliceSpec``/``Device`` in the ``kubernetes`` client's models):

* one slice ``<node>-gpucaas-gpus``, pool named after the node, ``resourceSliceCount: 1``;
* one device per GPU present, ``gpu-p<id>`` (``id``: the GPU's single-GPU Fabric Manager
  partition), with attributes ``gpus`` (1), ``pair`` and ``quad`` (the Fabric Manager partition
  ids of the NVLink pair and quad it belongs to), ``fmPartitionID``, ``physicalIDs``,
  ``model``, ``numaNodes`` and the standard ``resource.kubernetes.io/pciBusID``.

A claim for a whole partition asks for its GPUs with a ``matchAttribute`` constraint (core/dra.py):
two GPUs of one ``pair``, four of one ``quad``, the node's eight. kube-scheduler's structured
allocator searches every combination of the node's free devices, so it allocates such a claim
exactly when a whole free partition of that size exists, and a GPU is in one claim at most:
partitions never overlap. No device consumes shared counters: a slice of shared counters is
read by kube-scheduler for every node it filters, not only its own (the allocator takes such
slices as relevant to every node and rebuilds their pools each time), which made a pod's
filtering grow with the square of the fleet (docs/dra.md, "Slices").

A GPU that may not be handed out now — its lease is not Free or Leased, it is unhealthy, or a
fabric holder other than a claim keeps a partition containing it busy — carries a
``NoSchedule`` device taint (KEP-5055, ``resource.k8s.io/v1`` ``Device.taints``, beta and on by
default from Kubernetes 1.36): the scheduler allocates no tainted device (gpucaas' claims
tolerate none), so no partition containing it is handed out either, and an allocation already
made is left alone. The device itself always stays in the slice: what is published depends on
the node alone, never on the claims (kube-scheduler knows a device is allocated from the claims,
by its name).

Device order is *buddy order*, because the allocator is first-fit over the devices in the
order published: GPUs pair by pair, quad by quad (1, 3, 2, 4, 5, 7, 6, 8). So single-GPU claims
fill one pair, then the other pair of the same quad, before touching the second quad; a pair
claim takes the first whole free pair in that order, a quad claim the first whole free quad;
whole quads and the whole board stay free as long as possible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.dra import BINDING_CONDITION, BINDING_FAILURE_CONDITION, DRIVER
from core.topology import HGX_H100_PARTITIONS, Partition, partition_by_id

STANDARD_PCI_ATTRIBUTE = "resource.kubernetes.io/pciBusID"

#: A slice without shared counters holds at most 128 devices; a device at most 32 attributes and capacities.
MAX_DEVICES = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32


@dataclass(frozen=True)
class PublishedGpu:
    """What the node knows of one GPU when it publishes."""

    physical_id: int
    pci_bus_id: str
    numa_node: int = 0
    model: str = "H100-SXM5-80GB"
    #: False while the GPU's lease is not Free (checking, quarantined) or it is unhealthy:
    #: its device is tainted (not offered), and so no partition containing it is.
    allocatable: bool = True
    #: The fabric holder that is not a claim (``claim:<uid>``) of an active partition
    #: containing this GPU: an admin activation, another allocation path, or a partition
    #: active in Fabric Manager without a record. The fabric service refuses every partition
    #: overlapping it, so the GPU's device is tainted (not offered); the GPU is healthy all the
    #: same.
    held_by: str | None = None

    @property
    def available(self) -> bool:
        """Whether partitions containing this GPU may be allocated now."""
        return self.allocatable and self.held_by is None


#: Device taints (effect NoSchedule) of a GPU that may not be handed out now; the value names
#: it, e.g. ``gpus-4``.
TAINT_NOT_ALLOCATABLE = f"{DRIVER}/gpu-not-allocatable"  # a GPU's lease is not Free or Leased, or it is unhealthy
TAINT_HELD_ON_FABRIC = f"{DRIVER}/held-on-fabric"  # a holder other than a claim keeps a partition of a GPU busy
#: Taint effects that keep the scheduler from allocating a device (the others are informational).
ALLOCATION_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def device_name(partition: Partition) -> str:
    """A DNS label naming a partition's device, e.g. ``gpu-p9`` (the GPU of single-GPU partition
    9, as published); ``nvlink-2gpu-p3`` names a whole partition, as slices published partitions
    before (claims allocated then still name them)."""
    if partition.size == 1:
        return f"gpu-p{partition.id}"
    return f"nvlink-{partition.size}gpu-p{partition.id}"


def partition_of_device(name: str) -> int:
    """The Fabric Manager partition id a device name stands for (inverse of device_name)."""
    _, _, tail = name.rpartition("-p")
    if not tail.isdigit():
        raise ValueError(f"{name!r} is not a gpucaas partition device name")
    return int(tail)


def _pair_of(gpu: int) -> Partition:
    return next(p for p in HGX_H100_PARTITIONS if p.size == 2 and gpu in p.gpus)


def _quad_of(gpu: int) -> Partition:
    return next(p for p in HGX_H100_PARTITIONS if p.size == 4 and gpu in p.gpus)


def buddy_order(partitions: Iterable[Partition] = HGX_H100_PARTITIONS) -> list[Partition]:
    """Partitions in the order first-fit allocation packs best (module docstring)."""
    pairs_in_order = sorted(
        (p for p in HGX_H100_PARTITIONS if p.size == 2), key=lambda p: (_quad_of(min(p.gpus)).id, p.id)
    )
    single_rank = {g: (i, g) for i, pair in enumerate(pairs_in_order) for g in pair.sorted_gpus()}

    def key(p: Partition) -> tuple[int, tuple[int, int], int]:
        size_rank = -p.size  # 8, 4, 2, 1: the order only matters within a size
        if p.size == 1:
            return (size_rank, single_rank[min(p.gpus)], p.id)
        if p.size == 2:
            return (size_rank, (pairs_in_order.index(p), 0), p.id)
        return (size_rank, (min(p.gpus), 0), p.id)

    return sorted(partitions, key=key)


def _device(gpu: PublishedGpu, binding_conditions: bool) -> dict[str, Any]:
    single = next(p for p in HGX_H100_PARTITIONS if p.gpus == {gpu.physical_id})
    attributes: dict[str, dict[str, Any]] = {
        "gpus": {"int": 1},
        "fmPartitionID": {"int": single.id},
        "pair": {"int": _pair_of(gpu.physical_id).id},
        "quad": {"int": _quad_of(gpu.physical_id).id},
        "nvlink": {"bool": False},
        "physicalIDs": {"string": str(gpu.physical_id)},
        "model": {"string": gpu.model},
        "numaNodes": {"string": str(gpu.numa_node)},
        STANDARD_PCI_ATTRIBUTE: {"string": gpu.pci_bus_id},
    }
    device: dict[str, Any] = {"name": device_name(single), "attributes": attributes}
    concerned = f"gpus-{gpu.physical_id}"
    reasons = ((TAINT_NOT_ALLOCATABLE, not gpu.allocatable), (TAINT_HELD_ON_FABRIC, gpu.held_by is not None))
    taints = [{"key": key, "value": concerned, "effect": "NoSchedule"} for key, applies in reasons if applies]
    if taints:
        device["taints"] = taints
    if binding_conditions:
        device["bindingConditions"] = [BINDING_CONDITION]
        device["bindingFailureConditions"] = [BINDING_FAILURE_CONDITION]
        device["bindsToNode"] = True
    return device


MANAGED_BY = "gpucaas-dra-driver"


def slice_name(node_name: str) -> str:
    return f"{node_name}-gpucaas-gpus"


def build_slices(
    node_name: str,
    gpus: Iterable[PublishedGpu],
    *,
    generation: int = 1,
    binding_conditions: bool = False,
) -> list[dict[str, Any]]:
    """The node's ResourceSlices (one; see the module docstring): every GPU present is a
    device, always, in buddy order; one that is not :attr:`PublishedGpu.available` is tainted
    NoSchedule. What is published depends on the node alone, not on the claims: there is no
    read of the claims to race with the scheduler's allocations."""
    by_id = {g.physical_id: g for g in gpus}
    order = [min(p.gpus) for p in buddy_order() if p.size == 1]
    devices = [_device(by_id[g], binding_conditions) for g in order if g in by_id]
    if len(devices) > MAX_DEVICES or len(by_id) > len(devices):
        raise ValueError(f"GPUs {sorted(set(by_id) - set(order))} are not on the HGX H100 board")
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node_name), "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
            "spec": {
                "driver": DRIVER,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    ]


def offered_devices(slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """The devices in these slices that the scheduler may allocate when no claim holds
    anything: those without a taint that blocks allocation."""
    return {
        d["name"]
        for s in slices
        for d in (s.get("spec") or {}).get("devices") or []
        if not any(t.get("effect") in ALLOCATION_BLOCKING_EFFECTS for t in d.get("taints") or [])
    }


def gpus_of_devices(names: Iterable[str]) -> frozenset[int]:
    """The physical GPU ids of devices by name (a GPU's device, or a whole partition's)."""
    return frozenset(g for n in names for g in partition_by_id(partition_of_device(n)).gpus)
