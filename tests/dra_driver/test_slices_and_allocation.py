"""Partitions as partitionable devices: what a node publishes and what can be allocated.

The allocator is the stand-in for kube-scheduler's structured allocator
(gpucaas.devtools.dra_allocator); the oracle below is independent of both: it knows only
the partition table and which GPUs are free.
"""

from __future__ import annotations

import itertools
import random

import pytest

from gpucaas.core import dra
from gpucaas.core.platforms import DGX_H100
from gpucaas.core.topology import HGX_H100_PARTITIONS, partition_by_id
from gpucaas.devtools.dra_allocator import DeviceRef, Unsupported, allocate
from services.dra_driver.slices import PublishedGpu, build_slices, partition_of_device

NODE = "gpu-node-a"
CLASSES = {dra.device_class_name(s): dra.device_class(s) for s in (1, 2, 4, 8)}


def board(**allocatable: bool) -> list[PublishedGpu]:
    return [PublishedGpu(pid, bdf, numa_node=0 if pid <= 4 else 1,
                         allocatable=allocatable.get(f"gpu{pid}", True))
            for pid, bdf in DGX_H100.physical_id_to_bdf().items()]


def claim(gpus: int) -> dict:
    return {"spec": {"devices": {"requests": [dra.claim_request(gpus)]}}}


def gpus_of(refs) -> list[frozenset[int]]:
    return [partition_by_id(partition_of_device(r.device)).gpus for r in refs]


def test_a_board_publishes_counters_and_fifteen_partitions_in_buddy_order() -> None:
    counters, parts = build_slices(NODE, board())
    assert "devices" not in counters["spec"]  # a slice carries counters or devices, not both
    (cset,) = counters["spec"]["sharedCounters"]
    assert cset["counters"] == {f"gpu-{g}": {"value": "1"} for g in range(1, 9)}
    devices = parts["spec"]["devices"]
    assert len(devices) == 15
    for d in devices:
        pid = d["attributes"]["fmPartitionID"]["int"]
        consumed = set(d["consumesCounters"][0]["counters"])
        assert consumed == {f"gpu-{g}" for g in partition_by_id(pid).gpus}
        assert len(d["attributes"]) <= 32 and len(d["consumesCounters"]) <= 2
    singles = [d["attributes"]["physicalIDs"]["string"] for d in devices if d["attributes"]["gpus"]["int"] == 1]
    assert singles == ["1", "3", "2", "4", "5", "7", "6", "8"]
    single = next(d for d in devices if d["attributes"]["gpus"]["int"] == 1)
    assert single["attributes"]["resource.kubernetes.io/pciBusID"]["string"] == DGX_H100.physical_id_to_bdf()[1]
    for s in (counters, parts):
        assert s["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 2}


def test_a_gpu_that_is_not_free_holds_every_partition_containing_it_out() -> None:
    _, parts = build_slices(NODE, board(gpu3=False))
    published = {partition_of_device(d["name"]) for d in parts["spec"]["devices"]}
    assert published == {p.id for p in HGX_H100_PARTITIONS if 3 not in p.gpus}


def test_a_partition_still_allocated_stays_published_while_its_gpus_are_checked() -> None:
    """The seed scenario's overlap: an 8-GPU claim outlives its pod while GPUs 1 and 3 are
    Free again and the others are still checked. Were the 8-GPU device dropped, the
    allocator would no longer count its counters and hand out the pair {1, 3} beside it."""
    whole = next(p for p in HGX_H100_PARTITIONS if p.size == 8)
    checking = {f"gpu{g}": False for g in whole.gpus if g not in (1, 3)}
    held = next(d["name"] for d in build_slices(NODE, board())[1]["spec"]["devices"]
                if partition_of_device(d["name"]) == whole.id)
    slices = build_slices(NODE, board(**checking), allocated={held})
    published = {partition_of_device(d["name"]) for d in slices[1]["spec"]["devices"]}
    assert whole.id in published
    assert allocate(claim(2), NODE, slices, CLASSES, [DeviceRef(dra.DRIVER, NODE, held)]) is None
    # once the claim is deallocated the device goes (its GPUs are not all Free) and the pair is offered
    slices = build_slices(NODE, board(**checking))
    assert whole.id not in {partition_of_device(d["name"]) for d in slices[1]["spec"]["devices"]}
    (pair,) = allocate(claim(2), NODE, slices, CLASSES, [])
    assert partition_by_id(partition_of_device(pair.ref.device)).gpus == frozenset({1, 3})


def test_binding_conditions_are_carried_when_enabled() -> None:
    _, parts = build_slices(NODE, board(), binding_conditions=True)
    for d in parts["spec"]["devices"]:
        assert d["bindingConditions"] == [dra.BINDING_CONDITION]
        assert d["bindingFailureConditions"] == [dra.BINDING_FAILURE_CONDITION]
        assert d["bindsToNode"] is True
    slices = build_slices(NODE, board(), binding_conditions=True)
    (got,) = allocate(claim(2), NODE, slices, CLASSES, [])
    assert got.as_result()["bindingConditions"] == [dra.BINDING_CONDITION]


def oracle_can_place(size: int, free: frozenset[int]) -> bool:
    if size in (1, 2, 4, 8):
        return any(p.size == size and p.gpus <= free for p in HGX_H100_PARTITIONS)
    return len(free) >= size


def test_every_sequence_of_partition_claims_allocates_exactly_when_a_free_partition_exists() -> None:
    """Every order of 1/2/4/8-GPU claims until the board is full, walked as a tree.

    After each allocation every size is tried again; a refused claim changes nothing, so
    the walk goes on only below the claims that were allocated.
    """
    slices = build_slices(NODE, board())
    checked = 0

    def walk(allocated: list[DeviceRef], free: frozenset[int], depth: int) -> None:
        nonlocal checked
        for size in (1, 2, 4, 8):
            got = allocate(claim(size), NODE, slices, CLASSES, allocated)
            checked += 1
            assert (got is not None) == oracle_can_place(size, free), (size, sorted(free))
            if got is None:
                continue
            (dev,) = got
            (gset,) = gpus_of([dev.ref])
            assert len(gset) == size and gset <= free  # a whole partition of free GPUs
            held = gpus_of([*allocated, dev.ref])
            assert sum(len(g) for g in held) == len(frozenset().union(*held))  # never overlapping
            walk([*allocated, dev.ref], free - gset, depth + 1)

    walk([], frozenset(range(1, 9)), 0)
    assert checked > 400  # the walk really went down the tree


def test_first_fit_in_buddy_order_packs_singles_into_one_quad() -> None:
    slices = build_slices(NODE, board())
    allocated: list[DeviceRef] = []
    for _ in range(4):
        (dev,) = allocate(claim(1), NODE, slices, CLASSES, allocated)
        allocated.append(dev.ref)
    assert frozenset().union(*gpus_of(allocated)) == frozenset({1, 2, 3, 4})
    (quad,) = allocate(claim(4), NODE, slices, CLASSES, allocated)
    assert gpus_of([quad.ref]) == [frozenset({5, 6, 7, 8})]


def test_counts_without_a_partition_take_single_gpus_and_release_frees_them() -> None:
    slices = build_slices(NODE, board())
    three = allocate(claim(3), NODE, slices, CLASSES, [])
    assert three is not None and len(three) == 3
    assert all(len(g) == 1 for g in gpus_of(d.ref for d in three))
    assert allocate(claim(8), NODE, slices, CLASSES, [d.ref for d in three]) is None
    assert allocate(claim(8), NODE, slices, CLASSES, []) is not None


def test_random_allocate_and_release_never_overlaps() -> None:
    rng = random.Random(20261122)
    slices = build_slices(NODE, board())
    holding: dict[int, list[DeviceRef]] = {}
    for step in range(3000):
        if holding and rng.random() < 0.4:
            holding.pop(rng.choice(list(holding)))
            continue
        size = rng.choice((1, 1, 2, 2, 3, 4, 8))
        current = [r for refs in holding.values() for r in refs]
        free = frozenset(range(1, 9)) - frozenset().union(*gpus_of(current)) if current else frozenset(range(1, 9))
        got = allocate(claim(size), NODE, slices, CLASSES, current)
        assert (got is not None) == oracle_can_place(size, free)
        if got:
            holding[step] = [d.ref for d in got]
        held = gpus_of(r for refs in holding.values() for r in refs)
        assert sum(len(g) for g in held) == len(frozenset().union(*held)) if held else True


def test_an_incomplete_pool_is_not_used() -> None:
    counters, parts = build_slices(NODE, board())
    assert allocate(claim(1), NODE, [parts], CLASSES, []) is None
    newer = build_slices(NODE, board(), generation=2)
    assert allocate(claim(1), NODE, [counters, parts, newer[1]], CLASSES, []) is None
    assert allocate(claim(1), NODE, [counters, parts, *newer], CLASSES, []) is not None


def test_unmodelled_features_are_refused_not_ignored() -> None:
    slices = build_slices(NODE, board())
    c = claim(2)
    c["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.gpucaas.dev/quad"}]
    with pytest.raises(Unsupported):
        allocate(c, NODE, slices, CLASSES, [])
