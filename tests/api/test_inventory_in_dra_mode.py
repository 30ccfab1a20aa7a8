"""/v1/admin/nodes in the DRA allocation mode: GPU counts from the DRA driver's own slices.

The slices are the ones the driver builds (services.dra_driver.slices.build_slices), so the
API's reading is checked against what the driver really publishes, not a hand-written shape.
"""

from __future__ import annotations

from services.api.domain.inventory import dra_gpu_counts, node_summaries
from services.dra_driver.slices import PublishedGpu, build_slices


def _board(
    node: str,
    unallocatable: set[int] = frozenset(),
    missing: set[int] = frozenset(),
    held: set[int] = frozenset(),
    generation: int = 1,
) -> list[dict]:
    gpus = [
        PublishedGpu(
            i,
            f"0000:{i:02x}:00.0",
            allocatable=i not in unallocatable,
            held_by="admin:partition-3" if i in held else None,
        )
        for i in range(1, 9)
        if i not in missing
    ]
    return build_slices(node, gpus, generation=generation)


def test_a_whole_healthy_board_counts_eight_of_eight() -> None:
    assert dra_gpu_counts(_board("n1")) == {"n1": (8, 8)}


def test_a_gpu_held_out_is_present_but_not_allocatable() -> None:
    assert dra_gpu_counts(_board("n1", unallocatable={3})) == {"n1": (8, 7)}


def test_a_gpu_held_on_the_fabric_by_another_holder_is_not_allocatable() -> None:
    assert dra_gpu_counts(_board("n1", held={1, 3}, unallocatable={8})) == {"n1": (8, 5)}


def test_a_missing_gpu_is_not_counted_and_old_generations_are_ignored() -> None:
    slices = _board("n1", generation=1) + _board("n1", missing={8}, generation=2) + _board("n2")
    assert dra_gpu_counts(slices) == {"n1": (7, 7), "n2": (8, 8)}


def test_other_drivers_slices_are_ignored() -> None:
    other = {
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 9},
            "sharedCounters": [{"name": "x", "counters": {"a": {"value": "1"}}}],
        }
    }
    assert dra_gpu_counts([other, *_board("n1")]) == {"n1": (8, 8)}


def test_node_rows_take_the_dra_counts_and_zero_for_a_node_without_slices() -> None:
    nodes = [
        {"metadata": {"name": n}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for n in ("n1", "n2")
    ]
    rows = node_summaries(nodes, [], "nvidia.com/gpu", _board("n1", unallocatable={5}))
    assert [(r["name"], r["gpu_capacity"], r["gpu_allocatable"]) for r in rows] == [("n1", 8, 7), ("n2", 0, 0)]


def test_slices_of_whole_partition_devices_read_the_same() -> None:
    """The driver's earlier shape (a device per partition, ``physicalIDs`` naming its GPUs),
    still there while a node's driver is being upgraded: a GPU counts once, and is allocatable
    while some untainted device names it."""
    taint = {"key": "gpu.gpucaas.dev/gpu-not-allocatable", "value": "gpus-3", "effect": "NoSchedule"}

    def device(gpus: str, tainted: bool = False) -> dict:
        return {
            "name": f"d{gpus}",
            "attributes": {"physicalIDs": {"string": gpus}},
            **({"taints": [taint]} if tainted else {}),
        }

    old = {
        "spec": {
            "driver": "gpu.gpucaas.dev",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 4},
            "devices": [device("1,3", tainted=True), device("1"), device("3", tainted=True), device("2,4")],
        }
    }
    assert dra_gpu_counts([old]) == {"n1": (4, 3)}
