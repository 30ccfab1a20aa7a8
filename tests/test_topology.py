"""The HGX H100 partition table and the shared partition choice (device plugin and extender)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, strategies as st

from core import topology as t


def test_default_partition_table_matches_fabric_manager() -> None:
    sizes = [p.size for p in t.HGX_H100_PARTITIONS]
    assert sizes == [8, 4, 4, 2, 2, 2, 2] + [1] * 8
    assert [p.sorted_gpus() for p in t.HGX_H100_PARTITIONS[3:7]] == [[1, 3], [2, 4], [5, 7], [6, 8]]
    assert [p.nvlinks for p in t.HGX_H100_PARTITIONS[:4]] == [144, 72, 72, 36]
    assert t.partition_by_id(14).gpus == {8}


@pytest.mark.parametrize(
    ("free", "size", "expected"),
    [
        (range(1, 9), 8, (1, 2, 3, 4, 5, 6, 7, 8)),
        (range(1, 9), 4, (1, 2, 3, 4)),
        ({1, 2, 3, 4, 6, 8}, 2, (6, 8)),  # the broken quad's pair, not one that breaks {1-4}
        ({2, 3, 4, 5, 6, 7, 8}, 1, (3,)),  # 3's pair mate 1 is taken: breaks nothing free
        ({2, 3, 4, 5, 6, 7, 8}, 3, (2, 3, 4)),  # inside the broken quad
        ({1, 2, 5, 6}, 2, None),  # 4 GPUs free, no free pair -> best effort below
    ],
    ids=[
        "whole-board",
        "first-quad",
        "pair-in-broken-quad",
        "single-in-broken-pair",
        "three-in-broken-quad",
        "no-pair",
    ],
)
def test_choose_gpus_best_fit(free, size, expected) -> None:
    choice = t.choose_gpus(free, size)
    assert choice is not None
    if expected is None:
        assert choice.partition is None and len(choice.gpus) == size
    else:
        assert choice.gpus == expected


def test_choose_gpus_prefers_numa_locality_on_ties() -> None:
    numa = {g: (0 if g <= 4 else 1) for g in range(1, 9)}
    choice = t.choose_gpus({1, 2, 3, 4, 5, 6, 7, 8}, 8, numa)
    assert choice is not None and choice.numa_nodes == 2
    assert t.choose_gpus(set(), 1) is None
    assert t.choose_gpus({1, 2}, 3) is None


@given(st.sets(st.integers(1, 8)), st.integers(1, 8))
def test_choice_is_free_and_partition_shaped_when_possible(free: set[int], size: int) -> None:
    choice = t.choose_gpus(free, size)
    if len(free) < size:
        assert choice is None
        return
    assert choice is not None
    assert set(choice.gpus) <= free and len(choice.gpus) == size
    shaped = [p for p in t.free_partitions(free) if p.size == size]
    if shaped:
        assert choice.partition in shaped
        # best fit: no other free partition of that size breaks fewer free larger ones
        larger = [p for p in t.free_partitions(free) if p.size > size]
        best = min(sum(1 for q in larger if q.overlaps(p)) for p in shaped)
        assert choice.broken == best


def test_partitions_for_gpus_never_joins_a_non_partition_set() -> None:
    assert [p.id for p in t.partitions_for_gpus({1, 3})] == [3]
    assert [p.id for p in t.partitions_for_gpus({1, 2})] == [7, 8]
    for a, b in itertools.combinations(t.HGX_H100_PARTITIONS, 2):
        assert a.overlaps(b) == bool(a.gpus & b.gpus)
