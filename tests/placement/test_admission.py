"""The partition admission check's decision (``services.placement.admission``): a Workload passes
only when each of its pods has a whole free NVLink partition, counting what was promised before."""

from __future__ import annotations

from services.placement.admission import RETRY_DELAYS_S, Asked, Promise, decide, pod_sizes
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
