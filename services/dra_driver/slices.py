"""The ResourceSlices a node publishes: partitions as devices that consume GPU counters.

Shape (``resource.k8s.io/v1``, partitionable devices, KEP-4815; the limits are those the
API server validates, see the field descriptions of ``ResourceSliceSpec``/``Device``/
``CounterSet`` in the ``kubernetes`` client's models, v1.35+):

* slice ``<node>-gpucaas-counters``: ``sharedCounters`` = one counter set ``gpus`` with one
  counter per physical GPU (``gpu-1`` … ``gpu-8``, value ``1``). A slice may carry either
  devices or shared counters, never both, so the counters get a slice of their own.
* slice ``<node>-gpucaas-partitions``: one device per Fabric Manager partition (15 on HGX
  H100) whose GPUs are present, each consuming ``1`` of the counter of every GPU in it. Two
  partitions that share a GPU would together consume 2 of a counter holding 1, so the
  scheduler can never allocate them at once, and a GPU set that is no partition cannot be
  asked for. At most 64 devices in a slice whose devices consume counters; 32 attributes +
  capacities per device; 2 counter consumptions per device; 32 counters per counter set.

A partition that may not be handed out now — one of its GPUs has a lease that is not Free
or Leased, is unhealthy, or sits in a partition that a fabric holder other than a claim keeps
busy — carries a ``NoSchedule`` device taint (KEP-5055, ``resource.k8s.io/v1``
``Device.taints``, beta and on by default from Kubernetes 1.36): the scheduler allocates no
tainted device (gpucaas' claims tolerate none), and an allocation already made is left alone.
The device itself always stays in the slice. That is what keeps allocations consistent:
kube-scheduler counts an allocated device's ``consumesCounters`` only from the device it finds
in the pool, so a device taken out of the slice while a claim holds it — or is being given it,
which no reader of the API can see before the write lands — would let the scheduler hand out
an overlapping partition. Counters cannot say it either: a counter set below what allocated
devices consume makes the scheduler refuse every device of the pool.

Both slices belong to one pool named after the node (``resourceSliceCount: 2``); the
pool's ``generation`` grows whenever what is published changes.

Device order is *buddy order*, because kube-scheduler's structured allocator is first-fit
over pools, slices and devices in the order published: quads {1-4} before {5-8}; pairs in
quad order ({1,3}, {2,4}, {5,7}, {6,8}); singles pair by pair (1, 3, 2, 4, 5, 7, 6, 8). So
single-GPU claims fill one pair, then the other pair of the same quad, before touching the
second quad, and whole quads and the whole board stay free as long as possible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.dra import BINDING_CONDITION, BINDING_FAILURE_CONDITION, COUNTER_SET, DRIVER
from core.topology import HGX_H100_PARTITIONS, Partition

STANDARD_PCI_ATTRIBUTE = "resource.kubernetes.io/pciBusID"

MAX_DEVICES_WITH_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_COUNTERS_PER_SET = 32


@dataclass(frozen=True)
class PublishedGpu:
    """What the node knows of one GPU when it publishes."""

    physical_id: int
    pci_bus_id: str
    numa_node: int = 0
    model: str = "H100-SXM5-80GB"
    #: False while the GPU's lease is not Free (checking, quarantined) or it is unhealthy:
    #: every partition containing it is tainted (not offered).
    allocatable: bool = True
    #: The fabric holder that is not a claim (``claim:<uid>``) of an active partition
    #: containing this GPU: an admin activation, another allocation path, or a partition
    #: active in Fabric Manager without a record. The fabric service refuses every partition
    #: overlapping it, so every partition containing the GPU is tainted (not offered); the GPU
    #: is healthy all the same.
    held_by: str | None = None

    @property
    def available(self) -> bool:
        """Whether partitions containing this GPU may be allocated now."""
        return self.allocatable and self.held_by is None


#: Device taints (effect NoSchedule) of a partition that may not be handed out now; the value
#: names its GPUs concerned, e.g. ``gpus-2-4``.
TAINT_NOT_ALLOCATABLE = f"{DRIVER}/gpu-not-allocatable"  # a GPU's lease is not Free or Leased, or it is unhealthy
TAINT_HELD_ON_FABRIC = f"{DRIVER}/held-on-fabric"  # a holder other than a claim keeps a partition of a GPU busy
#: Taint effects that keep the scheduler from allocating a device (the others are informational).
ALLOCATION_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def counter_name(physical_id: int) -> str:
    return f"gpu-{physical_id}"


def device_name(partition: Partition) -> str:
    """A DNS label naming the partition device, e.g. ``nvlink-2gpu-p3``, ``gpu-p9``."""
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


def _device(partition: Partition, gpus: Mapping[int, PublishedGpu], binding_conditions: bool) -> dict[str, Any]:
    members = [gpus[g] for g in partition.sorted_gpus()]
    attributes: dict[str, dict[str, Any]] = {
        "gpus": {"int": partition.size},
        "fmPartitionID": {"int": partition.id},
        "nvlink": {"bool": partition.size > 1},
        "physicalIDs": {"string": ",".join(str(g) for g in partition.sorted_gpus())},
        "model": {"string": members[0].model},
        "numaNodes": {"string": ",".join(str(n) for n in sorted({m.numa_node for m in members}))},
    }
    if partition.size <= 4:
        attributes["quad"] = {"int": _quad_of(min(partition.gpus)).id}
    if partition.size <= 2:
        attributes["pair"] = {"int": _pair_of(min(partition.gpus)).id}
    if partition.size == 1:
        attributes[STANDARD_PCI_ATTRIBUTE] = {"string": members[0].pci_bus_id}
    device: dict[str, Any] = {
        "name": device_name(partition),
        "attributes": attributes,
        "consumesCounters": [
            {
                "counterSet": COUNTER_SET,
                "counters": {counter_name(g): {"value": "1"} for g in partition.sorted_gpus()},
            }
        ],
    }
    taints = [
        {"key": key, "value": "gpus-" + "-".join(str(m.physical_id) for m in concerned), "effect": "NoSchedule"}
        for key, concerned in (
            (TAINT_NOT_ALLOCATABLE, [m for m in members if not m.allocatable]),
            (TAINT_HELD_ON_FABRIC, [m for m in members if m.held_by is not None]),
        )
        if concerned
    ]
    if taints:
        device["taints"] = taints
    if binding_conditions:
        device["bindingConditions"] = [BINDING_CONDITION]
        device["bindingFailureConditions"] = [BINDING_FAILURE_CONDITION]
        device["bindsToNode"] = True
    return device


def build_slices(
    node_name: str,
    gpus: Iterable[PublishedGpu],
    *,
    generation: int = 1,
    binding_conditions: bool = False,
    partitions: Iterable[Partition] = HGX_H100_PARTITIONS,
) -> list[dict[str, Any]]:
    """The two ResourceSlice objects of ``node_name`` (see the module docstring).

    Every partition whose GPUs are all present is a device, always; one with a GPU that is
    not :attr:`PublishedGpu.available` is tainted NoSchedule. What is published depends on
    the node alone, not on the claims: no device ever leaves the slice while a claim may
    hold it, and there is no read of the claims to race with the scheduler's allocations.
    """
    by_id = {g.physical_id: g for g in gpus}
    pool = {"name": node_name, "generation": generation, "resourceSliceCount": 2}
    counters = {counter_name(g): {"value": "1"} for g in sorted(by_id)}
    devices = [
        _device(p, by_id, binding_conditions) for p in buddy_order(partitions) if all(g in by_id for g in p.gpus)
    ]
    if len(devices) > MAX_DEVICES_WITH_COUNTERS or len(counters) > MAX_COUNTERS_PER_SET:
        raise ValueError("board too large for one slice")
    meta = {"labels": {"app.kubernetes.io/managed-by": "gpucaas-dra-driver"}}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpucaas-counters", **meta},
            "spec": {
                "driver": DRIVER,
                "nodeName": node_name,
                "pool": pool,
                "sharedCounters": [{"name": COUNTER_SET, "counters": counters}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpucaas-partitions", **meta},
            "spec": {"driver": DRIVER, "nodeName": node_name, "pool": pool, "devices": devices},
        },
    ]


def offered_devices(slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """The partition devices in these slices that the scheduler may allocate when no claim
    holds anything: those without a taint that blocks allocation."""
    return {
        d["name"]
        for s in slices
        for d in (s.get("spec") or {}).get("devices") or []
        if not any(t.get("effect") in ALLOCATION_BLOCKING_EFFECTS for t in d.get("taints") or [])
    }
