"""The per-(free mask, size) table, checked against a brute-force oracle.

The oracle knows only NVIDIA's default partition table for an HGX H100 8-GPU board
(shared NVSwitch model; Fabric Manager User Guide, "HGX H100 ... partitions": id 0 all
eight GPUs, 1-2 the quads, 3-6 the pairs, 7-14 single GPUs), restated below rather than
taken from the code. For every free mask and request size it enumerates every set of GPUs
the rules allow and what each would break, and the table must pick one of the best.
"""

from __future__ import annotations

from itertools import combinations

import pytest

from core.topology import HGX_H100_PARTITIONS, choose_gpus
from services.placement.fit import FIT_TABLE, FULL_MASK, PREFERENCE, SIZES, fit, gpus_of, mask_of

#: (partition id, physical GPU ids), as the FM User Guide lists them for HGX H100.
ORACLE_PARTITIONS: dict[int, frozenset[int]] = {
    0: frozenset(range(1, 9)),
    1: frozenset({1, 2, 3, 4}),
    2: frozenset({5, 6, 7, 8}),
    3: frozenset({1, 3}),
    4: frozenset({2, 4}),
    5: frozenset({5, 7}),
    6: frozenset({6, 8}),
    **{6 + g: frozenset({g}) for g in range(1, 9)},
}


def _oracle(free: frozenset[int], size: int) -> dict[frozenset[int], int]:
    """Every allowed set of ``size`` free GPUs -> the summed sizes of the wholly free,
    strictly larger partitions it would break.

    Allowed: for 1/2/4/8 GPUs exactly one partition of that size (NVLink); for 3 and 5-7
    GPUs any set inside one partition of the next larger size (4 or 8)."""
    covering = min(len(g) for g in ORACLE_PARTITIONS.values() if len(g) >= size)
    allowed: dict[frozenset[int], int] = {}
    for gpus in map(frozenset, combinations(sorted(free), size)):
        if not any(len(p) == covering and gpus <= p for p in ORACLE_PARTITIONS.values()):
            continue
        if covering == size and gpus not in ORACLE_PARTITIONS.values():
            continue
        allowed[gpus] = sum(len(p) for p in ORACLE_PARTITIONS.values() if len(p) > size and p <= free and p & gpus)
    return allowed


def test_the_code_uses_nvidias_partition_table() -> None:
    assert {p.id: p.gpus for p in HGX_H100_PARTITIONS} == ORACLE_PARTITIONS


@pytest.mark.parametrize("size", SIZES)
def test_every_entry_is_a_best_allowed_choice(size: int) -> None:
    for mask in range(FULL_MASK + 1):
        free = frozenset(g for g in range(1, 9) if mask >> (g - 1) & 1)
        allowed = _oracle(free, size)
        entry = FIT_TABLE[size][mask]
        where = f"free {sorted(free)}, {size} GPU(s)"
        assert entry.fits == bool(allowed), where
        if allowed:
            chosen = frozenset(g for g in range(1, 9) if entry.gpus_mask >> (g - 1) & 1)
            assert chosen in allowed, where
            assert entry.cost == allowed[chosen] == min(allowed.values()), where
            assert entry.nvlink == (size in (2, 4, 8)), where
        elif len(free) >= size:
            # enough GPUs but none partition-shaped: the node is filtered out, best effort only
            assert entry.choice is not None and len(entry.choice.gpus) == size, where
        else:
            assert entry.choice is None and entry.gpus_mask == 0, where


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
