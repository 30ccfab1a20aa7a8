"""What one node can give a request: the per-(free mask, size) fit table.

A node's free state is the set of its free physical GPUs (1..8), kept as an
8-bit mask (bit ``g - 1`` for physical id ``g``). There are only 256 masks and 8
request sizes, so every answer the placement needs about one node is computed
once, at import, by calling :func:`core.topology.choose_gpus` — the very
function the device plugin's GetPreferredAllocation calls on the node. The node
choice and the node's own GPU choice therefore agree by construction: the GPUs
the extender scores a node by are exactly the GPUs the device plugin will pick.

Rules:

* a node *fits* a request when ``choose_gpus`` finds a partition-shaped set: for
  sizes 1/2/4/8 a whole free partition of that size (NVLink), for 3 and 5-7 GPUs
  inside one covering partition (4 resp. 8 GPUs; never NVLink for those sizes,
  see ``choose_gpus``). ``choose_gpus``' best-effort fallback (enough free GPUs
  but no partition shape) does **not** fit: the filter drops such nodes;
* among fitting nodes the best fit is the one whose choice breaks the least
  still-free larger partitions, weighted by their size (breaking a free board
  costs 8, a free quad 4, a free pair 2), then the one with the fewest free GPUs
  left (pack tightly, keep emptier nodes whole), then the lowest mask (stable).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.topology import (
    GPU_COUNT,
    HGX_H100_PARTITIONS,
    Choice,
    choose_gpus,
    cover_size,
)

FULL_MASK = (1 << GPU_COUNT) - 1
MASK_COUNT = 1 << GPU_COUNT
SIZES: tuple[int, ...] = tuple(range(1, GPU_COUNT + 1))


def mask_of(gpus: frozenset[int] | set[int] | tuple[int, ...] | list[int]) -> int:
    """The 8-bit mask of a set of physical ids (1..8)."""
    mask = 0
    for g in gpus:
        if not 1 <= g <= GPU_COUNT:
            raise ValueError(f"physical GPU id must be 1..{GPU_COUNT}, got {g}")
        mask |= 1 << (g - 1)
    return mask


def gpus_of(mask: int) -> frozenset[int]:
    """The physical ids (1..8) set in a mask."""
    return frozenset(g for g in range(1, GPU_COUNT + 1) if mask >> (g - 1) & 1)


def popcount(mask: int) -> int:
    return mask.bit_count()


@dataclass(frozen=True, slots=True)
class Fit:
    """What a node with free mask ``free_mask`` gives a ``size``-GPU request."""

    free_mask: int
    size: int
    choice: Choice | None  # choose_gpus' answer (None: fewer than size GPUs free)
    fits: bool  # the choice is partition-shaped (the filter keeps the node)
    gpus_mask: int  # the chosen GPUs (0 when no choice)
    cost: int  # sizes of the still-free larger partitions the choice breaks
    key: tuple[int, int, int]  # best-fit order: lower is better

    @property
    def nvlink(self) -> bool:
        """The chosen GPUs get NVLink between them (a 2/4/8-GPU partition)."""
        return self.choice is not None and self.choice.partition is not None and self.size > 1


def _shaped(gpus: frozenset[int], size: int) -> bool:
    """Inside one partition of the covering size (for 1/2/4/8: exactly that partition)."""
    covering = cover_size(size)
    return any(p.size == covering and gpus <= p.gpus for p in HGX_H100_PARTITIONS)


def _cost(free: frozenset[int], gpus: frozenset[int]) -> int:
    return sum(p.size for p in HGX_H100_PARTITIONS if p.size > len(gpus) and p.gpus <= free and p.gpus & gpus)


def _compute(free_mask: int, size: int) -> Fit:
    free = gpus_of(free_mask)
    choice = choose_gpus(free, size)
    if choice is None:
        return Fit(free_mask, size, None, False, 0, 0, (1 << 30, 0, free_mask))
    gpus = frozenset(choice.gpus)
    fits = _shaped(gpus, size)
    cost = _cost(free, gpus)
    left = len(free) - size
    return Fit(free_mask, size, choice, fits, mask_of(gpus), cost, (cost, left, free_mask))


#: FIT_TABLE[size][mask] -> Fit; index 0 unused.
FIT_TABLE: tuple[tuple[Fit, ...], ...] = (
    (),
    *(tuple(_compute(mask, size) for mask in range(MASK_COUNT)) for size in SIZES),
)

#: For each size, the masks that fit, best fit first.
PREFERENCE: tuple[tuple[int, ...], ...] = (
    (),
    *(tuple(f.free_mask for f in sorted((f for f in FIT_TABLE[s] if f.fits), key=lambda f: f.key)) for s in SIZES),
)

#: FITS[size][mask] -> bool, the filter's answer without attribute lookups.
FITS: tuple[tuple[bool, ...], ...] = ((), *(tuple(f.fits for f in FIT_TABLE[s]) for s in SIZES))


def fit(free_mask: int, size: int) -> Fit:
    """The table entry for one node state and request size (validated)."""
    if not 0 <= free_mask <= FULL_MASK:
        raise ValueError(f"free mask must be 0..{FULL_MASK}, got {free_mask}")
    if not 1 <= size <= GPU_COUNT:
        raise ValueError(f"GPU count must be 1..{GPU_COUNT}, got {size}")
    return FIT_TABLE[size][free_mask]
