"""Partitions as partitionable devices: what a node publishes and what can be allocated.

The allocator is kube-scheduler's (its DynamicResources plugin, the chart's DRA
configuration, tests/dra_driver/conftest.py), working from the slices the driver's
publisher writes for a fake GPU node; the oracle below is independent of it: it knows only
the partition table and which GPUs are free.
"""

from __future__ import annotations

import random
from typing import Any

from core.platforms import DGX_H100
from core.topology import HGX_H100_PARTITIONS, partition_by_id
from services.dra_driver.publisher import SlicePublisher, foreign_holders, gpus_from
from services.dra_driver.slices import PublishedGpu, build_slices, offered_devices, partition_of_device
from tests.dra_driver.scheduling import Scheduling, gpus_of_claim, results

NODE = "gpu-node-a"
ALL = frozenset(range(1, 9))


def board(**allocatable: bool) -> list[PublishedGpu]:
    return [
        PublishedGpu(pid, bdf, numa_node=0 if pid <= 4 else 1, allocatable=allocatable.get(f"gpu{pid}", True))
        for pid, bdf in DGX_H100.physical_id_to_bdf().items()
    ]


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
    """Every partition containing it is tainted NoSchedule, so none can be allocated; every
    partition stays a device (a claim may still hold one, and the scheduler counts it from
    there), and every counter stays."""
    slices = build_slices(NODE, board(gpu3=False))
    counters, parts = slices
    assert counters == build_slices(NODE, board())[0]
    assert len(parts["spec"]["devices"]) == 15
    pair = next(d for d in parts["spec"]["devices"] if d["attributes"]["physicalIDs"]["string"] == "1,3")
    assert pair["taints"] == [{"key": "gpu.gpucaas.dev/gpu-not-allocatable", "value": "gpus-3", "effect": "NoSchedule"}]
    offered = {partition_of_device(d) for d in offered_devices(slices)}
    assert offered == {p.id for p in HGX_H100_PARTITIONS if 3 not in p.gpus}


def test_a_partition_busy_for_another_holder_holds_every_partition_overlapping_it_out() -> None:
    """The fabric service refuses a partition overlapping one that a holder other than a claim
    keeps busy (active, or named by its record); the claims' own are left to the counters."""

    def part(pid: int, holder: str | None, active: bool = True) -> dict[str, Any]:
        gpus = [{"physical_id": g, "pci_bus_id": f"bdf-{g}"} for g in partition_by_id(pid).sorted_gpus()]
        return {"id": pid, "gpus": gpus, "active": active, "holder": holder}

    single = {g: next(p.id for p in HGX_H100_PARTITIONS if p.gpus == {g}) for g in ALL}
    pair_57 = next(p.id for p in HGX_H100_PARTITIONS if p.gpus == {5, 7})
    held = foreign_holders(
        [
            part(single[1], "admin:partition-x"),  # an admin's activation
            part(single[2], "claim:0d2c", active=False),  # a claim's, being activated: counters
            part(single[3], None),  # active in Fabric Manager, unrecorded
            part(single[4], None, active=False),  # idle
            part(pair_57, "gpus:0000:1b:00.0+0000:43:00.0", active=False),  # recorded, being activated
        ]
    )
    assert set(held) == {1, 3, 5, 7} and held[1] == "admin:partition-x"

    gpus = [
        PublishedGpu(g.physical_id, g.pci_bus_id, allocatable=g.allocatable, held_by=held.get(g.physical_id))
        for g in board()
    ]
    slices = build_slices(NODE, gpus)
    assert len(slices[1]["spec"]["devices"]) == 15  # all stay devices: a claim's counters keep counting
    quad = next(d for d in slices[1]["spec"]["devices"] if d["attributes"]["physicalIDs"]["string"] == "1,2,3,4")
    assert quad["taints"] == [{"key": "gpu.gpucaas.dev/held-on-fabric", "value": "gpus-1-3", "effect": "NoSchedule"}]
    offered = {partition_of_device(d) for d in offered_devices(slices)}
    assert offered == {p.id for p in HGX_H100_PARTITIONS if not p.gpus & {1, 3, 5, 7}}


def oracle_can_place(size: int, free: frozenset[int]) -> bool:
    if size in (1, 2, 4, 8):
        return any(p.size == size and p.gpus <= free for p in HGX_H100_PARTITIONS)
    return len(free) >= size


class Holdings:
    """Pods asking kube-scheduler for GPUs on the test's node, each answer checked against the
    oracle: allocated exactly when it can place the claim, then as whole partitions of free
    GPUs (one for 1, 2, 4 or 8 GPUs, single GPUs for other counts) that no other claim holds."""

    def __init__(self, dra: Scheduling) -> None:
        self.dra = dra
        self.held: dict[str, frozenset[int]] = {}  # pod -> its GPUs
        self.asked = 0

    @property
    def free(self) -> frozenset[int]:
        return ALL.difference(*self.held.values())

    def ask(self, size: int) -> str | None:
        """A pod asking for ``size`` GPUs; its name while it holds them, None when refused (it is gone)."""
        self.asked += 1
        free = self.free
        pod = self.dra.create_pod(f"c{self.asked}-{size}gpu", gpus=size)
        if not oracle_can_place(size, free):
            self.dra.unschedulable(pod)
            self.dra.delete_pod(pod)
            return None
        sets = gpus_of_claim(self.dra.scheduled(pod))
        assert [len(g) for g in sets] == ([size] if size in (1, 2, 4, 8) else [1] * size), sets
        got = frozenset().union(*sets)
        assert len(got) == size and got <= free, (size, sorted(free), sets)
        self.held[pod] = got
        self.assert_no_overlap()
        return pod

    def release(self, pod: str) -> None:
        self.dra.delete_pod(pod)
        del self.held[pod]

    def assert_no_overlap(self) -> None:
        """What the cluster's claims hold, not this bookkeeping: no GPU in two allocations."""
        claims = self.dra.custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", self.dra.namespace, "resourceclaims"
        )["items"]
        held = [g for c in claims for g in gpus_of_claim(c)]
        assert sum(len(g) for g in held) == len(frozenset().union(*held)), held
        assert frozenset().union(*held) == ALL - self.free


def publish(dra: Scheduling, **allocatable: bool) -> SlicePublisher:
    pub = SlicePublisher(dra.kube, dra.node, lambda: board(**allocatable))
    assert pub.publish() is True
    return pub


def offered_partitions(dra: Scheduling) -> set[int]:
    """The partitions the node's slices offer: devices without a taint that blocks allocation."""
    slices = dra.custom.list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={dra.node}"
    )["items"]
    return {partition_of_device(d) for d in offered_devices(slices)}


def test_a_partition_still_allocated_keeps_counting_while_its_gpus_are_checked(dra: Scheduling) -> None:
    """The seed scenario's overlap: an 8-GPU claim is still allocated while GPUs 1 and 3 are
    Free again and the others are being checked. Its device stays in the slice, so
    kube-scheduler still counts its counters and refuses the pair {1, 3} beside it."""
    whole = next(p for p in HGX_H100_PARTITIONS if p.size == 8)
    checking: dict[str, bool] = {}
    pub = SlicePublisher(dra.kube, dra.node, lambda: board(**checking))
    pub.publish()
    dra.create_claim("whole", 8)
    dra.create_pod("trainer", claim="whole")
    assert gpus_of_claim(dra.scheduled("trainer")) == [whole.gpus]

    checking.update({f"gpu{g}": False for g in whole.gpus if g not in (1, 3)})
    assert pub.publish() is True
    assert offered_partitions(dra) == {p.id for p in HGX_H100_PARTITIONS if p.gpus <= {1, 3}}
    dra.create_pod("pair", gpus=2)
    dra.unschedulable("pair")

    # once the claim is deallocated (its pod gone) its counters are free again; the slices need
    # no change (they never depended on the claim), and kube-scheduler hands the waiting pod the pair
    dra.delete_pod("trainer")
    assert pub.publish() is False
    assert gpus_of_claim(dra.scheduled("pair")) == [frozenset({1, 3})]


def test_without_the_allocated_device_kube_scheduler_would_hand_out_an_overlapping_pair(dra: Scheduling) -> None:
    """Why the publisher never takes a device out of the slice: kube-scheduler counts an
    allocated device's counters only from the device it finds in the pool, so slices that
    dropped the 8-GPU device still held by a claim let it allocate {1, 3} beside it."""
    slices = build_slices(dra.node, board())
    for s in slices:
        dra.custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", s)
    dra.create_pod("trainer", gpus=8)
    dra.scheduled("trainer")
    for s in build_slices(dra.node, board(), generation=2):
        if "devices" in s["spec"]:  # the board's devices without the whole board: the old hold-out
            s["spec"]["devices"] = [d for d in s["spec"]["devices"] if d["attributes"]["gpus"]["int"] != 8]
        s["metadata"]["resourceVersion"] = dra.custom.get_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", s["metadata"]["name"]
        )["metadata"]["resourceVersion"]
        dra.custom.replace_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", s["metadata"]["name"], s)
    dra.create_pod("pair", gpus=2)
    assert gpus_of_claim(dra.scheduled("pair")) == [frozenset({1, 3})]


def test_every_state_of_partition_claims_allocates_exactly_when_a_free_partition_exists(dra: Scheduling) -> None:
    """Every free-GPU set that 1/2/4/8-GPU claims reach from an empty board, walked depth first.

    In each state every size is asked for: kube-scheduler must allocate it exactly when the
    oracle finds a free partition of that size, as a whole partition of free GPUs; a refused
    pod changes nothing. An allocation leads to the state below (walked once), then is released.
    """
    publish(dra)
    h = Holdings(dra)
    seen: set[frozenset[int]] = set()

    def walk() -> None:
        seen.add(h.free)
        for size in (1, 2, 4, 8):
            pod = h.ask(size)
            if pod is None:
                continue
            if h.free not in seen:
                walk()
            h.release(pod)

    walk()
    assert h.free == ALL
    # first fit in buddy order reaches 17 free sets (the stand-in's 512-claim tree walk visited
    # the same 17 over and over): each asked for in all four sizes
    assert len(seen) == 17 and h.asked == 4 * len(seen)


def test_claims_of_each_size_fill_a_node_and_an_over_ask_stays_unallocated(dra: Scheduling) -> None:
    publish(dra)
    h = Holdings(dra)
    for size in (1, 2, 4, 1):
        assert h.ask(size) is not None
    assert h.free == frozenset()
    assert [sorted(g) for g in h.held.values()] == [[1], [2, 4], [5, 6, 7, 8], [3]]
    for size in (1, 2, 4, 8):
        assert h.ask(size) is None


def test_first_fit_in_buddy_order_packs_singles_into_one_quad(dra: Scheduling) -> None:
    publish(dra)
    h = Holdings(dra)
    singles = [h.ask(1) for _ in range(4)]
    assert [h.held[p] for p in singles if p] == [frozenset({g}) for g in (1, 3, 2, 4)]
    quad = h.ask(4)
    assert quad and h.held[quad] == frozenset({5, 6, 7, 8})


def test_counts_without_a_partition_take_single_gpus_and_release_frees_them(dra: Scheduling) -> None:
    publish(dra)
    dra.create_pod("three", gpus=3)
    three = dra.scheduled("three")
    assert len(results(three)) == 3 and all(len(g) == 1 for g in gpus_of_claim(three))
    dra.create_pod("eight", gpus=8)
    dra.unschedulable("eight")
    dra.delete_pod("three")
    assert gpus_of_claim(dra.scheduled("eight")) == [ALL]  # the waiting pod, once the singles are free


def test_random_allocate_and_release_never_overlaps(dra: Scheduling) -> None:
    rng = random.Random(20261122)
    publish(dra)
    h = Holdings(dra)
    for _ in range(60):
        if h.held and rng.random() < 0.4:
            h.release(rng.choice(sorted(h.held)))
        else:
            h.ask(rng.choice((1, 1, 2, 2, 3, 4, 8)))
    assert h.asked > 30


def _put(dra: Scheduling, *slices: dict[str, Any]) -> None:
    for s in slices:
        dra.custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", s)


def test_an_incomplete_pool_is_not_used(dra: Scheduling) -> None:
    counters, parts = build_slices(dra.node, board())
    _put(dra, parts)  # one slice of two
    dra.create_pod("first", gpus=1)
    dra.unschedulable("first")
    newer = build_slices(dra.node, board(), generation=2)
    for s in newer:
        s["metadata"]["name"] += "-g2"
    _put(dra, counters, newer[1])  # generation 1 complete, but generation 2 is newest and one short
    dra.create_pod("second", gpus=1)
    dra.unschedulable("second")
    _put(dra, newer[0])
    assert {g for p in ("first", "second") for g in frozenset().union(*gpus_of_claim(dra.scheduled(p)))} == {1, 3}


class _SchedulerAllocatesBeforeTheWrite:
    """The publisher's Kube, except that ``allocate`` (kube-scheduler allocating a claim)
    happens once, just before the first slice write of the next round reaches the API
    server: after everything the publisher read to build that round."""

    def __init__(self, kube: Any) -> None:
        self._kube = kube
        self.allocate: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kube, name)

    def call(self, fn: Any, *args: Any, what: str = "", **kwargs: Any) -> Any:
        if self.allocate is not None and what.startswith(("update ResourceSlice", "create ResourceSlice")):
            allocate, self.allocate = self.allocate, None
            allocate()
        return self._kube.call(fn, *args, what=what, **kwargs)


def test_a_claim_allocated_while_the_slices_are_written_stays_counted(dra: Scheduling) -> None:
    """The publisher race: GPU 4's lease leaves Free (its firmware check starts) just as
    kube-scheduler allocates the quad {1-4} from the slices still published. Whatever the
    publisher read before its write, the quad's counters must keep counting afterwards:
    a pair asked for next may not be {1, 3} or {2, 4}."""
    checking: dict[str, bool] = {}
    kube = _SchedulerAllocatesBeforeTheWrite(dra.kube)
    pub = SlicePublisher(kube, dra.node, lambda: board(**checking))  # type: ignore[arg-type]
    assert pub.publish() is True

    def allocate_the_quad() -> None:
        dra.create_pod("quad", gpus=4)
        assert gpus_of_claim(dra.allocated("quad")) == [frozenset({1, 2, 3, 4})]

    kube.allocate = allocate_the_quad
    checking["gpu4"] = False
    assert pub.publish() is True
    assert kube.allocate is None  # the quad was allocated between the round's reads and its write
    dra.create_pod("pair", gpus=2)
    pair = frozenset().union(*gpus_of_claim(dra.scheduled("pair")))
    assert not pair & {1, 2, 3, 4}, f"the pair {sorted(pair)} overlaps the allocated quad"


def test_each_gpu_is_published_on_the_numa_node_the_platform_layout_gives_it() -> None:
    # as the fabric service's GET /v1/topology answers: the NUMA nodes are in the layout's rows only
    bdfs = DGX_H100.physical_id_to_bdf()
    topology = {
        "gpus": [
            {"physical_id": p, "pci_bus_id": b, "healthy": True, "reason": None, "pci_source": "sysfs"}
            for p, b in bdfs.items()
        ],
        "layout": {
            "gpus": [{"physical_id": p, "pci_bus_id": b, "numa_node": 0 if p <= 4 else 1} for p, b in bdfs.items()]
        },
    }
    published = gpus_from(topology, [])
    assert {g.physical_id: g.numa_node for g in published} == {p: 0 if p <= 4 else 1 for p in bdfs}
    _, parts = build_slices(NODE, published)
    numa = {
        d["attributes"]["physicalIDs"]["string"]: d["attributes"]["numaNodes"]["string"]
        for d in parts["spec"]["devices"]
    }
    assert numa["1"] == "0" and numa["8"] == "1" and numa["1,2,3,4,5,6,7,8"] == "0,1"
