"""Kueue's partition AdmissionCheck in the DRA allocation mode: the same story as
test_partition_check.py, with the controller making the claim templates and the pods claiming
their GPUs from them (beside the ``nvidia.com/gpu`` request Kueue counts, docs/queues.md). The
check answers from the same fleet index in both modes: the FabricState's partitions and the GPU
leases, whoever allocated the GPUs."""

from __future__ import annotations

import pytest

from core import dra
from tests.kueue.test_partition_check import (  # noqa: F401  (the module's fixtures and its test, run here in dra)
    checked,
    controller_overrides,
    test_kueue_admits_a_quad_only_when_a_whole_free_quad_exists,
)


@pytest.fixture(scope="module")
def allocation_mode() -> dra.AllocationMode:
    return dra.DRA_MODE
