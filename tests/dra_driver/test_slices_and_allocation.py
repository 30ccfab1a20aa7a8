"""GPUs as devices, partitions as matchAttribute claims: what a node publishes and what can be allocated.

The allocator is kube-scheduler's (its DynamicResources plugin, the chart's DRA
configuration, tests/dra_driver/conftest.py), working from the slices the driver's
publisher writes for a fake GPU node; the oracle below is independent of it: it knows only
the partition table and which GPUs are free.
"""

from __future__ import annotations

import random
from typing import Any

from core import dra
from core.platforms import DGX_H100
from core.topology import HGX_H100_PARTITIONS, partition_for
from services.dra_driver.publisher import SlicePublisher, foreign_holders, gpus_from
from services.dra_driver.slices import PublishedGpu, build_slices, gpus_of_devices, offered_devices
from tests.dra_driver.scheduling import Scheduling, claim_gpus, gpus_of_claim, results

NODE = "gpu-node-a"
ALL = frozenset(range(1, 9))


def board(**allocatable: bool) -> list[PublishedGpu]:
    return [
        PublishedGpu(pid, bdf, numa_node=0 if pid <= 4 else 1, allocatable=allocatable.get(f"gpu{pid}", True))
        for pid, bdf in DGX_H100.physical_id_to_bdf().items()
    ]


def _pair(gpus: set[int]) -> int:
    return next(p.id for p in HGX_H100_PARTITIONS if p.size == 2 and p.gpus == gpus)


def test_a_board_publishes_eight_gpus_in_buddy_order_naming_their_pair_and_quad() -> None:
    (only,) = build_slices(NODE, board())
    spec = only["spec"]
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert "sharedCounters" not in spec and not any("consumesCounters" in d for d in spec["devices"])
    devices = spec["devices"]
    assert [d["attributes"]["physicalIDs"]["string"] for d in devices] == ["1", "3", "2", "4", "5", "7", "6", "8"]
    quads = {p.id: p.gpus for p in HGX_H100_PARTITIONS if p.size == 4}
    for d in devices:
        a = d["attributes"]
        gpu = int(a["physicalIDs"]["string"])
        assert a["gpus"] == {"int": 1} and len(a) <= 32
        assert {p.gpus for p in HGX_H100_PARTITIONS if p.id == a["fmPartitionID"]["int"]} == {frozenset({gpu})}
        assert gpu in next(p.gpus for p in HGX_H100_PARTITIONS if p.id == a["pair"]["int"] and p.size == 2)
        assert gpu in quads[a["quad"]["int"]]
        assert a["resource.kubernetes.io/pciBusID"]["string"] == DGX_H100.physical_id_to_bdf()[gpu]
    # the claims' constraints name these attributes, in the driver's domain
    assert {dra.MATCH_ATTRIBUTE[2], dra.MATCH_ATTRIBUTE[4]} == {f"{dra.DRIVER}/pair", f"{dra.DRIVER}/quad"}
    assert {2, 4} <= {len(p.gpus) for p in HGX_H100_PARTITIONS} and {"pair", "quad"} <= set(devices[0]["attributes"])


def test_a_gpu_that_is_not_free_is_tainted_and_stays_a_device() -> None:
    """Its device is tainted NoSchedule, so no partition containing it can be allocated; the
    device stays (a claim may still hold it)."""
    slices = build_slices(NODE, board(gpu3=False))
    devices = slices[0]["spec"]["devices"]
    assert len(devices) == 8
    three = next(d for d in devices if d["attributes"]["physicalIDs"]["string"] == "3")
    taint = {"key": "gpu.gpucaas.dev/gpu-not-allocatable", "value": "gpus-3", "effect": "NoSchedule"}
    assert three["taints"] == [taint]
    assert gpus_of_devices(offered_devices(slices)) == ALL - {3}


def test_a_partition_busy_for_another_holder_holds_its_gpus_out() -> None:
    """The fabric service refuses a partition overlapping one that a holder other than a claim
    keeps busy (active, or named by its record): those GPUs are tainted; the claims' own are
    left to the allocations."""

    def part(pid: int, holder: str | None, active: bool = True) -> dict[str, Any]:
        members = next(p for p in HGX_H100_PARTITIONS if p.id == pid).sorted_gpus()
        gpus = [{"physical_id": g, "pci_bus_id": f"bdf-{g}"} for g in members]
        return {"id": pid, "gpus": gpus, "active": active, "holder": holder}

    single = {g: next(p.id for p in HGX_H100_PARTITIONS if p.gpus == {g}) for g in ALL}
    held = foreign_holders(
        [
            part(single[1], "admin:partition-x"),  # an admin's activation
            part(single[2], "claim:0d2c", active=False),  # a claim's, being activated
            part(single[3], None),  # active in Fabric Manager, unrecorded
            part(single[4], None, active=False),  # idle
            part(_pair({5, 7}), "gpus:0000:1b:00.0+0000:43:00.0", active=False),  # recorded, being activated
        ]
    )
    assert set(held) == {1, 3, 5, 7} and held[1] == "admin:partition-x"

    gpus = [
        PublishedGpu(g.physical_id, g.pci_bus_id, allocatable=g.allocatable, held_by=held.get(g.physical_id))
        for g in board()
    ]
    slices = build_slices(NODE, gpus)
    devices = slices[0]["spec"]["devices"]
    assert len(devices) == 8  # all stay devices
    one = next(d for d in devices if d["attributes"]["physicalIDs"]["string"] == "1")
    assert one["taints"] == [{"key": "gpu.gpucaas.dev/held-on-fabric", "value": "gpus-1", "effect": "NoSchedule"}]
    assert gpus_of_devices(offered_devices(slices)) == {2, 4, 6, 8}


def oracle_can_place(size: int, free: frozenset[int]) -> bool:
    if size in (1, 2, 4, 8):
        return any(p.size == size and p.gpus <= free for p in HGX_H100_PARTITIONS)
    return len(free) >= size


class Holdings:
    """Pods asking kube-scheduler for GPUs on the test's node, each answer checked against the
    oracle: allocated exactly when it can place the claim, then as free GPUs that no other
    claim holds, forming one whole partition for 1, 2, 4 or 8 GPUs."""

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
        assert [len(g) for g in sets] == [1] * size, sets  # a device per GPU
        got = frozenset().union(*sets)
        assert len(got) == size and got <= free, (size, sorted(free), sets)
        if size in (1, 2, 4, 8):
            whole = partition_for(got)
            assert whole is not None and whole.size == size, (size, sorted(got))
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


def offered_gpus(dra: Scheduling) -> frozenset[int]:
    """The GPUs the node's slices offer: devices without a taint that blocks allocation."""
    slices = dra.custom.list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={dra.node}"
    )["items"]
    return gpus_of_devices(offered_devices(slices))


def test_a_partition_still_allocated_keeps_its_gpus_while_they_are_checked(dra: Scheduling) -> None:
    """The overlap the design must prevent: an 8-GPU claim is still allocated while GPUs 1 and 3
    are Free again and the others are being checked. kube-scheduler knows its devices are
    allocated from the claim, so it refuses the pair {1, 3} beside it."""
    whole = next(p for p in HGX_H100_PARTITIONS if p.size == 8)
    checking: dict[str, bool] = {}
    pub = SlicePublisher(dra.kube, dra.node, lambda: board(**checking))
    pub.publish()
    dra.create_claim("whole", 8)
    dra.create_pod("trainer", claim="whole")
    assert claim_gpus(dra.scheduled("trainer")) == whole.gpus

    checking.update({f"gpu{g}": False for g in whole.gpus if g not in (1, 3)})
    assert pub.publish() is True
    assert offered_gpus(dra) == {1, 3}
    dra.create_pod("pair", gpus=2)
    dra.unschedulable("pair")

    # once the claim is deallocated (its pod gone) its GPUs are free again; the slices need
    # no change (they never depended on the claim), and kube-scheduler hands the waiting pod the pair
    dra.delete_pod("trainer")
    assert pub.publish() is False
    assert claim_gpus(dra.scheduled("pair")) == {1, 3}


def test_a_pair_claim_never_takes_two_gpus_of_different_pairs(dra: Scheduling) -> None:
    """Two free GPUs are no NVLink pair unless they share one: with 1, 3 and 2 taken, GPU 4 is
    the first free GPU in published order but its pair's other GPU is not free, so a 2-GPU pod
    takes {5, 7}, not {4, 5}; with {4, 6, 8} free it takes {6, 8}, and with {4} alone it waits."""
    publish(dra)
    h = Holdings(dra)
    singles = [h.ask(1) for _ in range(3)]
    assert [h.held[p] for p in singles if p] == [frozenset({1}), frozenset({3}), frozenset({2})]
    first = h.ask(2)
    assert first and h.held[first] == frozenset({5, 7})
    second = h.ask(2)
    assert second and h.held[second] == frozenset({6, 8})
    assert h.ask(2) is None and h.free == {4}


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
    assert claim_gpus(dra.scheduled("eight")) == ALL  # the waiting pod, once the GPUs are free


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


def test_only_the_newest_generation_of_the_pool_is_used(dra: Scheduling) -> None:
    (old,) = build_slices(dra.node, board(gpu1=False))
    _put(dra, old)
    (newer,) = build_slices(dra.node, board(gpu1=False, gpu3=False), generation=2)
    newer["metadata"]["name"] += "-g2"
    _put(dra, newer)  # the same pool at generation 2: GPUs 1 and 3 held out
    dra.create_pod("first", gpus=1)
    assert claim_gpus(dra.scheduled("first")) == {2}


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
    publisher read before its write, the quad's GPUs must stay allocated afterwards:
    a pair asked for next may not be {1, 3} or {2, 4}."""
    checking: dict[str, bool] = {}
    kube = _SchedulerAllocatesBeforeTheWrite(dra.kube)
    pub = SlicePublisher(kube, dra.node, lambda: board(**checking))  # type: ignore[arg-type]
    assert pub.publish() is True

    def allocate_the_quad() -> None:
        dra.create_pod("quad", gpus=4)
        assert claim_gpus(dra.allocated("quad")) == {1, 2, 3, 4}

    kube.allocate = allocate_the_quad
    checking["gpu4"] = False
    assert pub.publish() is True
    assert kube.allocate is None  # the quad was allocated between the round's reads and its write
    dra.create_pod("pair", gpus=2)
    pair = claim_gpus(dra.scheduled("pair"))
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
    (only,) = build_slices(NODE, published)
    numa = {
        d["attributes"]["physicalIDs"]["string"]: d["attributes"]["numaNodes"]["string"]
        for d in only["spec"]["devices"]
    }
    assert numa == {str(g): "0" if g <= 4 else "1" for g in range(1, 9)}
