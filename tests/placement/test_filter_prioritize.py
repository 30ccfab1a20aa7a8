"""filter and prioritize: whole partitions only, best fit first, agreeing with choose_gpus."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from core.topology import choose_gpus, free_partitions
from services.placement.fit import FIT_TABLE, FULL_MASK, gpus_of, mask_of
from services.placement.fleet import MAX_EXTENDER_PRIORITY, FleetIndex, NodeFree


def fleet(**nodes: set[int]) -> FleetIndex:
    index = FleetIndex()
    for name, free in nodes.items():
        index.set_node(NodeFree(name, mask_of(free)))
    return index


# -- the cases ---------------------------------------------------------------


def test_two_gpu_pod_skips_a_node_whose_two_free_gpus_are_no_partition() -> None:
    index = fleet(a={1, 2}, b={1, 3})  # {1,2} is not a partition; {1,3} is
    out = index.filter(["a", "b"], 2)
    assert out.passed == ["b"]
    assert "no whole 2-GPU partition" in out.failed["a"]
    assert out.unresolvable == {}


def test_eight_gpu_pod_needs_a_whole_board() -> None:
    index = fleet(full={1, 2, 3, 4, 5, 6, 7, 8}, seven={1, 2, 3, 4, 5, 6, 7})
    assert index.filter(["full", "seven"], 8).passed == ["full"]


@pytest.mark.parametrize(
    ("size", "nodes", "best"),
    [
        (1, {"empty": set(range(1, 9)), "lone": {5}, "pair": {2, 4}}, "lone"),
        (2, {"empty": set(range(1, 9)), "quad": {1, 2, 3, 4}, "pair": {6, 8}}, "pair"),
        (4, {"empty": set(range(1, 9)), "half": {5, 6, 7, 8}}, "half"),
        (1, {"empty": set(range(1, 9)), "quad": {1, 2, 3, 4}}, "quad"),
        (2, {"two-pairs": {1, 3, 6, 8}, "quad-and-pair": {1, 2, 3, 4, 5, 7}}, "two-pairs"),
    ],
    ids=[
        "1-gpu-takes-lone-gpu",
        "2-gpu-takes-lone-pair",
        "4-gpu-keeps-the-board",
        "1-gpu-keeps-the-board",
        "2-gpu-keeps-the-quad",
    ],
)
def test_best_fit_keeps_larger_free_partitions(size: int, nodes: dict[str, set[int]], best: str) -> None:
    index = fleet(**nodes)
    scores = dict(index.prioritize(list(nodes), size))
    assert scores[best] == MAX_EXTENDER_PRIORITY
    assert all(s < MAX_EXTENDER_PRIORITY for n, s in scores.items() if n != best)
    placement = index.best(size)
    assert placement is not None and placement.node == best


def test_unknown_unhealthy_and_fabricless_nodes_are_unresolvable() -> None:
    index = FleetIndex()
    index.set_node(NodeFree("sick", 0b0000_0001, healthy_mask=0b0000_0001))  # only GPU 1 healthy
    index.set_node(NodeFree("nofm", FULL_MASK, usable=False, reason="Fabric Manager unreachable on the node"))
    index.set_node(NodeFree("busy", 0, FULL_MASK))
    out = index.filter(["ghost", "sick", "nofm", "busy"], 2)
    assert out.passed == []
    assert set(out.unresolvable) == {"ghost", "sick", "nofm"}
    assert "no FabricState" in out.unresolvable["ghost"]
    assert "Fabric Manager unreachable" in out.unresolvable["nofm"]
    assert out.failed == {"busy": "free GPUs []: fewer than 2"}  # preemption could help here
    assert index.best(1) is not None and index.best(1).node == "sick"  # type: ignore[union-attr]


def test_pods_without_gpus_and_oversized_pods() -> None:
    index = fleet(a=set())
    assert index.filter(["a", "b"], 0).passed == ["a", "b"]
    out = index.filter(["a"], 9)
    assert out.passed == [] and "requests 9 GPUs" in out.unresolvable["a"]
    assert index.prioritize(["a"], 0) == [("a", 0)]


def test_node_state_rejects_free_gpus_outside_healthy() -> None:
    with pytest.raises(ValueError, match="outside healthy_mask"):
        NodeFree("n", 0b11, healthy_mask=0b01)


# -- properties ------------------------------------------------------------------------

masks = st.integers(min_value=0, max_value=FULL_MASK)
fleets = st.dictionaries(st.from_regex(r"node-[a-z0-9]{1,6}", fullmatch=True), masks, min_size=1, max_size=40)
sizes = st.integers(min_value=1, max_value=8)


def _index(nodes: dict[str, int]) -> FleetIndex:
    index = FleetIndex()
    for name, mask in nodes.items():
        index.set_node(NodeFree(name, mask))
    return index


@settings(max_examples=150, deadline=None)
@given(fleets, sizes)
def test_filter_keeps_exactly_the_nodes_where_choose_gpus_gives_a_whole_partition(
    nodes: dict[str, int], size: int
) -> None:
    index = _index(nodes)
    out = index.filter(list(nodes), size)
    for name, mask in nodes.items():
        choice = choose_gpus(gpus_of(mask), size)
        if size in (1, 2, 4, 8):
            whole = any(p.size == size for p in free_partitions(gpus_of(mask)))
            assert (name in out.passed) == whole
            if whole:
                assert choice is not None and choice.partition is not None and choice.partition.size == size
        assert (name in out.passed) == FIT_TABLE[size][mask].fits
        assert (name in out.passed) + (name in out.failed) + (name in out.unresolvable) == 1


@settings(max_examples=150, deadline=None)
@given(fleets, sizes)
def test_scores_follow_the_best_fit_key_and_the_best_node_agrees(nodes: dict[str, int], size: int) -> None:
    index = _index(nodes)
    names = list(nodes)
    scores = dict(index.prioritize(names, size))
    assert all(0 <= s <= MAX_EXTENDER_PRIORITY for s in scores.values())
    fitting = [n for n in names if FIT_TABLE[size][nodes[n]].fits]
    for n in names:
        if n not in fitting:
            assert scores[n] == 0
    for a in fitting:
        for b in fitting:
            ka, kb = FIT_TABLE[size][nodes[a]].key, FIT_TABLE[size][nodes[b]].key
            if ka < kb:
                assert scores[a] >= scores[b]
                if scores[b] > 0:
                    assert scores[a] > scores[b]
    best = index.best(size)
    if not fitting:
        assert best is None
    else:
        assert best is not None
        assert best.fit.key == min(FIT_TABLE[size][nodes[n]].key for n in fitting)
        assert scores[best.node] == MAX_EXTENDER_PRIORITY
        # the node's GPUs are the device plugin's choice on that node
        assert best.gpus == choose_gpus(gpus_of(nodes[best.node]), size).gpus  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(fleets, sizes)
def test_the_best_only_filter_keeps_the_best_fit_ties_and_fails_the_rest(nodes: dict[str, int], size: int) -> None:
    index = _index(nodes)
    names = list(nodes)
    every = index.filter(names, size)
    best = index.filter(names, size, best_only=True)
    keys = {n: FIT_TABLE[size][nodes[n]].key for n in every.passed}
    assert best.passed == [n for n in every.passed if keys[n] == min(keys.values(), default=None)]
    assert bool(best.passed) == bool(every.passed)
    assert best.unresolvable == every.unresolvable
    for name in every.passed:
        if name not in best.passed:
            assert best.failed[name] == f"another node fits a {size}-GPU partition better (best fit)"
    assert {n: r for n, r in best.failed.items() if n not in every.passed} == every.failed
    # what prioritize would rank first is among what the filter keeps
    scores = dict(index.prioritize(names, size))
    top = [n for n in names if scores[n] == MAX_EXTENDER_PRIORITY and n in every.passed]
    assert not top or set(top) <= set(best.passed)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), sizes, st.booleans()), min_size=1, max_size=80))
def test_index_stays_consistent_through_takes_and_releases(ops: list[tuple[int, int, bool]]) -> None:
    index = FleetIndex()
    names = [f"n{i}" for i in range(10)]
    for n in names:
        index.set_node(NodeFree(n, FULL_MASK))
    held: list[tuple[str, int]] = []
    for which, size, release in ops:
        if release and held:
            node, gpus = held.pop(which % len(held))
            index.give_back(node, gpus)
            continue
        placement = index.best(size)
        if placement is None:
            assert not any(FIT_TABLE[size][index.node(n).free_mask].fits for n in names)  # type: ignore[union-attr]
            continue
        index.take(placement.node, placement.fit.gpus_mask)
        held.append((placement.node, placement.fit.gpus_mask))
    histogram = index.mask_histogram()
    assert sum(histogram.values()) == len(names)
    for n in names:
        mask = index.node(n).free_mask  # type: ignore[union-attr]
        used = 0
        for node, gpus in held:
            if node == n:
                assert used & gpus == 0
                used |= gpus
        assert mask == FULL_MASK & ~used


def test_take_refuses_gpus_that_are_not_free() -> None:
    index = fleet(a={1, 2})
    with pytest.raises(ValueError, match="not free"):
        index.take("a", mask_of({3}))
