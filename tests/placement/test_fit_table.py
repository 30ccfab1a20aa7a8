"""The per-(free mask, size) table agrees with choose_gpus, the device plugin's choice."""

from __future__ import annotations

import pytest

from gpucaas.core.topology import HGX_H100_PARTITIONS, choose_gpus, free_partitions
from services.placement.fit import FIT_TABLE, FULL_MASK, PREFERENCE, SIZES, fit, gpus_of, mask_of


@pytest.mark.parametrize("size", SIZES)
def test_every_entry_is_choose_gpus_answer(size: int) -> None:
    for mask in range(FULL_MASK + 1):
        entry = FIT_TABLE[size][mask]
        expected = choose_gpus(gpus_of(mask), size)
        assert entry.choice == expected
        if expected is None:
            assert not entry.fits and entry.gpus_mask == 0
        else:
            assert gpus_of(entry.gpus_mask) == frozenset(expected.gpus)


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_power_of_two_sizes_fit_iff_a_whole_free_partition_of_that_size(size: int) -> None:
    for mask in range(FULL_MASK + 1):
        whole = [p for p in free_partitions(gpus_of(mask)) if p.size == size]
        entry = FIT_TABLE[size][mask]
        assert entry.fits == bool(whole), f"mask {mask:#04x}"
        if entry.fits:
            assert entry.choice is not None and entry.choice.partition in whole
            assert entry.nvlink == (size > 1)


@pytest.mark.parametrize("size", [3, 5, 6, 7])
def test_odd_sizes_fit_inside_one_covering_partition(size: int) -> None:
    covering = 4 if size == 3 else 8
    for mask in range(FULL_MASK + 1):
        free = gpus_of(mask)
        possible = any(p.size == covering and len(p.gpus & free) >= size for p in HGX_H100_PARTITIONS)
        entry = FIT_TABLE[size][mask]
        assert entry.fits == possible, f"mask {mask:#04x}"
        if entry.fits:
            chosen = gpus_of(entry.gpus_mask)
            assert any(p.size == covering and chosen <= p.gpus for p in HGX_H100_PARTITIONS)
            assert not entry.nvlink


@pytest.mark.parametrize(
    ("free", "size", "cost"),
    [
        ({1, 2, 3, 4, 5, 6, 7, 8}, 1, 2 + 4 + 8),  # an empty board: breaks a pair, a quad, the board
        ({1, 2, 3, 4, 5, 6, 7, 8}, 8, 0),
        ({1, 3}, 1, 2),  # breaks the free pair {1,3}
        ({1}, 1, 0),
        ({1, 2, 3, 4}, 2, 4),  # breaks the free quad
        ({1, 3, 6, 8}, 2, 0),  # two free pairs in different quads: nothing larger is free
    ],
    ids=["empty-board-1", "empty-board-8", "lone-pair-1", "lone-gpu-1", "free-quad-2", "two-pairs-2"],
)
def test_cost_counts_sizes_of_free_larger_partitions_broken(free: set[int], size: int, cost: int) -> None:
    assert fit(mask_of(free), size).cost == cost


def test_preference_orders_fitting_masks_best_fit_first() -> None:
    for size in SIZES:
        keys = [FIT_TABLE[size][m].key for m in PREFERENCE[size]]
        assert keys == sorted(keys)
        assert set(PREFERENCE[size]) == {m for m in range(FULL_MASK + 1) if FIT_TABLE[size][m].fits}
    # a lone free GPU is the best home of a 1-GPU pod, an empty board the worst
    assert PREFERENCE[1][0] != FULL_MASK and FIT_TABLE[1][PREFERENCE[1][0]].cost == 0
    assert PREFERENCE[1][-1] == FULL_MASK


@pytest.mark.parametrize(
    ("mask", "size", "field"),
    [(256, 1, "free mask"), (-1, 1, "free mask"), (0, 0, "GPU count"), (0, 9, "GPU count")],
)
def test_fit_rejects_out_of_range_input_naming_it(mask: int, size: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        fit(mask, size)


def test_mask_of_rejects_bad_ids() -> None:
    with pytest.raises(ValueError, match="physical GPU id must be 1..8"):
        mask_of([0])


def test_the_device_plugins_numa_input_does_not_change_the_choice_on_hgx(hgx_board) -> None:  # type: ignore[no-untyped-def]
    """The device plugin passes each GPU's NUMA node to choose_gpus; the table has none.

    On HGX H100 boards (and the fake board the tests build) GPUs 1-4 sit on one socket and
    5-8 on the other, so every partition stays within one NUMA node and NUMA never breaks
    a tie differently: the extender's GPUs are the device plugin's GPUs."""
    numa = {gpu.physical_id: gpu.numa_node for gpu in hgx_board.gpus}
    assert numa == {g: (0 if g <= 4 else 1) for g in range(1, 9)}
    for size in SIZES:
        for mask in range(FULL_MASK + 1):
            with_numa = choose_gpus(gpus_of(mask), size, numa=numa)
            assert (with_numa.gpus if with_numa else None) == (
                FIT_TABLE[size][mask].choice.gpus if FIT_TABLE[size][mask].choice else None  # type: ignore[union-attr]
            )
