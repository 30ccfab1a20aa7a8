"""The partition admission check's decision (``services.placement.admission``): a Workload passes
only when each of its pods has a whole free NVLink partition, counting what was promised before."""

from __future__ import annotations

from services.placement.admission import RETRY_DELAYS_S, Asked, Claimant, Occupant, Promise, decide, pod_sizes
from services.placement.fit import FULL_MASK, mask_of
from services.placement.fleet import Freeing, NodeFree


def asked(*sizes: int, retries: int = 0, uid: str = "w1") -> Asked:
    return Asked(uid=uid, namespace="tenant-a", name=f"pod-{uid}", pod_sizes=sizes, retries=retries)


def node(name: str, free: set[int], healthy: set[int] | None = None) -> NodeFree:
    return NodeFree(name, mask_of(free), mask_of(healthy) if healthy is not None else FULL_MASK)


#: 6 free GPUs but no free quad: GPU 1 and GPU 5 are taken, one in each quad
FRAGMENTED = node("a", {2, 3, 4, 6, 7, 8})


def test_a_workload_passes_with_a_whole_free_partition_and_is_promised_its_gpus() -> None:
    verdict = decide(asked(4), [FRAGMENTED, node("b", {5, 6, 7, 8})], [], freeing={}, now=1.0)
    assert verdict.state == "Ready"
    assert verdict.promises == (Promise("w1", "b", mask_of({5, 6, 7, 8}), 1.0),)
    assert "4-GPU partition on b" in verdict.message


def test_enough_gpus_without_a_whole_partition_is_queued_again_with_a_growing_delay() -> None:
    first = decide(asked(4), [FRAGMENTED], [], freeing={}, now=0.0)
    assert (first.state, first.requeue_after_s) == ("Retry", RETRY_DELAYS_S[0])
    assert "no whole free NVLink 4-GPU partition now" in first.message
    later = decide(asked(4, retries=9), [FRAGMENTED], [], freeing={}, now=0.0)
    assert later.requeue_after_s == RETRY_DELAYS_S[-1]
    # a pair still fits there (NVIDIA's pairs are 1+3, 2+4, 5+7 and 6+8)
    pair = decide(asked(2), [FRAGMENTED], [], freeing={}, now=0.0)
    assert pair.state == "Ready" and pair.promises[0].mask in {mask_of({2, 4}), mask_of({6, 8})}


def test_promised_gpus_count_as_taken_until_the_pods_are_counted() -> None:
    fleet = [node("a", set(range(1, 9)))]
    one = decide(asked(4, uid="w1"), fleet, [], freeing={}, now=0.0)
    two = decide(asked(4, uid="w2"), fleet, one.promises, freeing={}, now=0.0)
    three = decide(asked(4, uid="w3"), fleet, [*one.promises, *two.promises], freeing={}, now=0.0)
    assert (one.state, two.state, three.state) == ("Ready", "Ready", "Retry")
    assert {one.promises[0].mask, two.promises[0].mask} == {mask_of({1, 2, 3, 4}), mask_of({5, 6, 7, 8})}
    # a promise on a node that has since taken those GPUs itself counts only what is still free
    taken = decide(asked(4, uid="w4"), [node("a", {5, 6, 7, 8})], one.promises, freeing={}, now=0.0)
    assert taken.state == "Ready"


def test_while_the_gpus_it_needs_are_being_freed_a_workload_keeps_its_quota_and_waits() -> None:
    # GPUs 1 and 5 (a lease in the firmware check, a pod being deleted) complete the board
    verdict = decide(asked(8), [FRAGMENTED], [], freeing={"a": Freeing(mask_of({1, 5}))}, now=0.0)
    assert verdict.state == "Pending" and verdict.requeue_after_s is None
    assert "2 GPUs being freed on a" in verdict.message
    # a pod being deleted whose GPUs no report names: counted, as its node may then hold it
    full = node("b", set())
    unplaced = decide(asked(8), [full], [], freeing={"b": Freeing(unplaced=8)}, now=0.0)
    assert unplaced.state == "Pending" and "8 GPUs being freed on b" in unplaced.message


def test_gpus_freeing_where_they_cannot_make_its_partition_do_not_keep_its_quota() -> None:
    # only GPU 1 frees on the fragmented node (GPU 5 stays taken), and a GPU on a full node:
    # no whole board either way, so Kueue gets the quota back and queues it again
    freeing = {"a": Freeing(mask_of({1})), "b": Freeing(mask_of({3}))}
    verdict = decide(asked(8), [FRAGMENTED, node("b", set())], [], freeing=freeing, now=0.0)
    assert (verdict.state, verdict.requeue_after_s) == ("Retry", RETRY_DELAYS_S[0])
    # nor an ending pod's GPUs, by their number, on a node they cannot fill
    counted = decide(asked(8), [FRAGMENTED], [], freeing={"a": Freeing(unplaced=1)}, now=0.0)
    assert counted.state == "Retry"
    # GPUs freeing where the partition is promised to another Workload do not help either
    promised = (Promise("w0", "a", mask_of({2, 3, 4}), 0.0),)
    taken = decide(asked(8), [FRAGMENTED], promised, freeing={"a": Freeing(mask_of({1, 5}))}, now=0.0)
    assert taken.state == "Retry"


def test_what_no_healthy_node_can_hold_is_queued_again_at_the_longest_delay() -> None:
    broken = node("a", {1, 2, 3, 4, 6, 7, 8}, healthy={1, 2, 3, 4, 6, 7, 8})
    verdict = decide(asked(8), [broken], [], freeing={"a": Freeing(unplaced=3)}, now=0.0)
    assert (verdict.state, verdict.requeue_after_s) == ("Retry", RETRY_DELAYS_S[-1])
    assert "healthy GPUs can hold the NVLink 8-GPU partition" in verdict.message
    # what is only promised to others still counts as healthy: retried as usual
    fleet = [node("a", set(range(1, 9)))]
    promised = (Promise("w0", "a", FULL_MASK, 0.0),)
    assert decide(asked(8), fleet, promised, freeing={}, now=0.0).requeue_after_s == RETRY_DELAYS_S[0]


def test_every_pod_of_a_workload_needs_its_own_partition() -> None:
    fleet = [node("a", {1, 2, 3, 4}), node("b", {1, 3, 5, 6})]
    both = decide(asked(4, 2), fleet, [], freeing={}, now=0.0)
    assert both.state == "Ready" and sorted(p.node for p in both.promises) == ["a", "b"]
    assert decide(asked(4, 4), fleet, [], freeing={}, now=0.0).state == "Retry"
    assert decide(asked(0), [], [], freeing={}, now=0.0).state == "Ready"


def test_pod_sizes_reads_each_pod_set() -> None:
    def pod_set(gpus: int, count: int) -> dict[str, object]:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        return {"count": count, "template": {"spec": {"containers": [{"name": "c", "resources": resources}]}}}

    workload = {"spec": {"podSets": [pod_set(2, 2), pod_set(0, 1), pod_set(8, 1)]}}
    assert pod_sizes(workload, "nvidia.com/gpu") == (2, 2, 0, 8)


def test_guaranteed_work_that_does_not_fit_keeps_its_quota_and_holds_gpus() -> None:
    fleet = [node("a", {2, 3, 4, 6, 7, 8}), node("b", {1, 2, 3, 5, 6, 7, 8})]
    verdict = decide(asked(8, uid="g"), fleet, [], freeing={}, now=0.0, guaranteed=True)
    assert verdict.state == "Pending" and verdict.requeue_after_s is None
    # the board nearest to free is b's (7 free): its free GPUs are held for it
    assert verdict.promises == (Promise("g", "b", mask_of({1, 2, 3, 5, 6, 7, 8}), 0.0),)
    # a 1-GPU Workload decided after it goes to a, not onto the held board
    one = decide(asked(1, uid="o"), fleet, verdict.promises, freeing={}, now=0.0)
    assert one.state == "Ready" and one.promises[0].node == "a"
    # a quad on a alone: both quads have 3 free; the table's first, 1-4, is held
    quad = decide(asked(4, uid="q"), [node("a", {2, 3, 4, 6, 7, 8})], [], freeing={}, now=0.0, guaranteed=True)
    assert quad.promises == (Promise("q", "a", mask_of({2, 3, 4}), 0.0),)


# -- a guarantee takes a partition back ------------------------------------------------------

#: the claimant: tenancy g's ClusterQueue, standard priority; "b" borrows 16 GPUs, "c" none
CLAIMANT = Claimant("tenancy-g", priority=100, borrowed={"tenancy-b": 16})


def running(uid: str, where: str, gpus: set[int], queue: str = "tenancy-b", priority: int = 100) -> Occupant:
    return Occupant(uid, where, mask_of(gpus), queue, priority, len(gpus))


def guaranteed(size: int, fleet: list[NodeFree], occupants: list[Occupant], **kw: object) -> object:
    return decide(
        asked(size, uid="g"),
        fleet,
        kw.pop("promises", []),  # type: ignore[arg-type]
        freeing=kw.pop("freeing", {}),  # type: ignore[arg-type]
        now=0.0,
        guaranteed=True,
        claimant=kw.pop("claimant", CLAIMANT),  # type: ignore[arg-type]
        occupants=occupants,
    )


def test_guaranteed_work_takes_back_the_partition_held_by_the_fewest_borrowed_gpus() -> None:
    # two full boards of borrowed pairs and quads: a's board frees with one quad and two pairs
    # taken back on b's second quad... the cheapest whole board is the one with the fewest GPUs
    # to preempt: a has 6 GPUs busy (2 free), b 8
    fleet = [node("a", {7, 8}), node("b", set())]
    occupants = [
        running("a-quad", "a", {1, 2, 3, 4}),
        running("a-pair", "a", {5, 6}),
        running("b-quad-1", "b", {1, 2, 3, 4}),
        running("b-quad-2", "b", {5, 6, 7, 8}),
    ]
    verdict = guaranteed(8, fleet, occupants)
    assert verdict.state == "Pending" and verdict.requeue_after_s is None  # type: ignore[attr-defined]
    assert verdict.victims == ("a-pair", "a-quad")  # type: ignore[attr-defined]
    # the whole board is held for it while the victims end
    assert verdict.promises == (Promise("g", "a", FULL_MASK, 0.0),)  # type: ignore[attr-defined]
    assert "taking back the NVLink 8-GPU partition on a" in verdict.message  # type: ignore[attr-defined]


def test_interruptible_work_is_taken_back_before_standard_work() -> None:
    fleet = [node("a", set())]
    occupants = [
        running("standard", "a", {1, 2, 3, 4}),  # the smaller cost in GPUs...
        running("spot-1", "a", {5, 6}, priority=10),
        running("spot-2", "a", {7, 8}, priority=10),
    ]
    # ...but the quad 5-8 is held by interruptible work only (priority 10): that one is taken
    verdict = guaranteed(4, fleet, occupants)
    assert verdict.victims == ("spot-1", "spot-2")  # type: ignore[attr-defined]
    assert verdict.promises == (Promise("g", "a", mask_of({5, 6, 7, 8}), 0.0),)  # type: ignore[attr-defined]


def test_only_what_kueue_may_preempt_is_taken_back() -> None:
    fleet = [node("a", set())]
    # c holds its own guarantee (it borrows nothing): never preempted for another tenancy
    within = [running("c-board", "a", set(range(1, 9)), queue="tenancy-c")]
    verdict = guaranteed(8, fleet, within)
    assert verdict.victims == () and "until a whole NVLink 8-GPU partition frees" in verdict.message  # type: ignore[attr-defined]
    # the claimant's own ClusterQueue: only at a lower priority (its interruptible work)
    own = [running("own", "a", set(range(1, 9)), queue="tenancy-g", priority=100)]
    assert guaranteed(8, fleet, own).victims == ()  # type: ignore[attr-defined]
    own_spot = [running("own-spot", "a", set(range(1, 9)), queue="tenancy-g", priority=10)]
    assert guaranteed(8, fleet, own_spot).victims == ("own-spot",)  # type: ignore[attr-defined]
    # a borrowing ClusterQueue gives victims until it no longer borrows: b borrows 2 GPUs only,
    # so one of its pods may go, not the two the board would need
    claimant = Claimant("tenancy-g", priority=100, borrowed={"tenancy-b": 2})
    two = [running("b-1", "a", {1, 2, 3, 4}), running("b-2", "a", {5, 6, 7, 8})]
    assert guaranteed(8, fleet, two, claimant=claimant).victims == ()  # type: ignore[attr-defined]
    assert guaranteed(4, fleet, two, claimant=claimant).victims == ("b-1",)  # type: ignore[attr-defined]
    # a GPU the check cannot name (a pod it does not place) is never taken
    assert guaranteed(8, [node("a", set())], [running("b-1", "a", {1, 2, 3, 4})]).victims == ()  # type: ignore[attr-defined]


def test_gpus_being_freed_or_promised_shape_what_is_taken_back() -> None:
    fleet = [node("a", set())]
    occupants = [running("b-1", "a", {1, 2, 3, 4}), running("b-2", "a", {5, 6, 7, 8})]
    # GPUs being freed that complete its partition: it waits for them and takes nothing
    freeing = {"a": Freeing(mask_of({1, 2, 3, 4}))}
    waits = guaranteed(4, fleet, occupants, freeing=freeing)
    assert waits.victims == () and "being freed" in waits.message  # type: ignore[attr-defined]
    assert waits.promises == (Promise("g", "a", mask_of({1, 2, 3, 4}), 0.0),)  # type: ignore[attr-defined]
    # for the board, those being freed count as free: only the other quad is taken back, on the
    # board that frees partly by itself rather than on a whole busy one
    half = [node("a", set()), node("b", set())]
    board = guaranteed(8, half, [*occupants, running("b-3", "b", set(range(1, 9)))], freeing=freeing)
    assert board.victims == ("b-2",)  # type: ignore[attr-defined]
    assert board.promises == (Promise("g", "a", FULL_MASK, 0.0),)  # type: ignore[attr-defined]
    # a free GPU promised to other work is not its to take
    promised = [Promise("other", "a", mask_of({8}), 0.0)]
    fleet = [node("a", {8})]
    occupants = [running("b-1", "a", {1, 2, 3, 4}), running("b-2", "a", {5, 6, 7})]
    assert guaranteed(4, fleet, occupants, promises=promised).victims == ("b-1",)  # type: ignore[attr-defined]
    assert guaranteed(8, fleet, occupants, promises=promised).victims == ()  # type: ignore[attr-defined]


def test_each_pod_of_a_guaranteed_workload_takes_back_its_own_partition() -> None:
    fleet = [node("a", set())]
    occupants = [running("b-board", "a", set(range(1, 9)))]
    # one 8-GPU victim frees both quads: two 4-GPU pods, one victim
    verdict = decide(
        asked(4, 4, uid="g"), fleet, [], freeing={}, now=0.0, guaranteed=True, claimant=CLAIMANT, occupants=occupants
    )
    assert verdict.victims == ("b-board",)
    assert sorted(p.mask for p in verdict.promises) == [mask_of({1, 2, 3, 4}), mask_of({5, 6, 7, 8})]
