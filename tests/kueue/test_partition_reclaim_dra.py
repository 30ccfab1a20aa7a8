"""A guarantee takes a whole board back in the DRA allocation mode: the same story as
test_partition_reclaim.py, the pods claiming their GPUs from the tenancy's templates. The check
finds where the running pods are by their GPU leases in both modes."""

from __future__ import annotations

import pytest

from core import dra
from tests.kueue.test_partition_check import (  # noqa: F401  (the module's fixtures: a cluster of its own)
    checked,
    controller_overrides,
)
from tests.kueue.test_partition_reclaim import (  # noqa: F401  (its test, run here in dra)
    test_a_guarantee_takes_back_a_whole_board_that_kueues_preemption_left_split,
)


@pytest.fixture(scope="module")
def allocation_mode() -> dra.AllocationMode:
    return dra.DRA_MODE
