"""The shared NVSwitch rules, table-driven, against both backends.

Each case runs on the simulator and on the ctypes binding over the compiled
fake libnvfm: both must give the same outcome and leave the same partitions
active.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.fabric.fabric_manager.errors import (
    FabricManagerError,
    FabricManagerUnavailable,
    InvalidArgument,
    NotReady,
    NotSupported,
    PartitionAlreadyActive,
    PartitionConflict,
    PartitionNotActive,
    PartitionUnsupported,
    UnknownPartition,
)
from tests.fabric.fabric_manager.drivers import active_ids, active_in_fm, apply

Case = tuple[str, list[tuple[Any, ...]], tuple[Any, ...], type[FabricManagerError] | None, set[int]]

# (description, setup steps, the step under test, error expected or None, active after)
CASES: list[Case] = [
    ("activate a free quad", [], ("activate", 1), None, {1}),
    ("activate the whole board", [], ("activate", 0), None, {0}),
    ("a single GPU partition", [], ("activate", 7), None, {7}),
    (
        "disjoint pairs coexist",
        [("activate", 3), ("activate", 4), ("activate", 5)],
        ("activate", 6),
        None,
        {3, 4, 5, 6},
    ),
    ("quad and pair on other half", [("activate", 1)], ("activate", 5), None, {1, 5}),
    ("pair inside an active quad", [("activate", 1)], ("activate", 3), PartitionConflict, {1}),
    ("board over an active pair", [("activate", 3)], ("activate", 0), PartitionConflict, {3}),
    ("quad over an active single GPU", [("activate", 10)], ("activate", 1), PartitionConflict, {10}),
    ("single GPU inside an active board", [("activate", 0)], ("activate", 14), PartitionConflict, {0}),
    ("already active", [("activate", 2)], ("activate", 2), PartitionAlreadyActive, {2}),
    ("unknown id", [], ("activate", 15), UnknownPartition, set()),
    ("deactivate an active one", [("activate", 1), ("activate", 5)], ("deactivate", 1), None, {5}),
    ("deactivate then the overlapping one works", [("activate", 1), ("deactivate", 1)], ("activate", 3), None, {3}),
    ("deactivate an inactive one", [], ("deactivate", 4), PartitionNotActive, set()),
    ("deactivate an unknown id", [], ("deactivate", 99), UnknownPartition, set()),
    ("degraded GPU: its quad unsupported", [("fail_gpu", 5)], ("activate", 2), PartitionUnsupported, set()),
    (
        "degraded GPU: its single partition unsupported",
        [("fail_gpu", 5)],
        ("activate", 11),
        PartitionUnsupported,
        set(),
    ),
    ("degraded GPU: the board unsupported", [("fail_gpu", 8)], ("activate", 0), PartitionUnsupported, set()),
    ("degraded GPU: other pairs fine", [("fail_gpu", 5)], ("activate", 6), None, {6}),
    ("healed GPU: supported again", [("fail_gpu", 5), ("heal_gpu", 5)], ("activate", 2), None, {2}),
    ("degraded GPU in an active partition: stays active", [("activate", 5), ("fail_gpu", 7)], ("list",), None, {5}),
    (
        "degraded active partition can be deactivated",
        [("activate", 5), ("fail_gpu", 7)],
        ("deactivate", 5),
        None,
        set(),
    ),
    ("restart: activate refused until the list", [("activate", 1), ("restart",)], ("activate", 2), NotReady, set()),
    ("restart: deactivate refused until the list", [("activate", 1), ("restart",)], ("deactivate", 1), NotReady, set()),
    (
        "restart: the list restores the active set",
        [("activate", 1), ("activate", 5), ("restart",)],
        ("set_list", [1, 5]),
        None,
        {1, 5},
    ),
    (
        "restart: after the list the rules apply",
        [("activate", 1), ("restart",), ("set_list", [1])],
        ("activate", 3),
        PartitionConflict,
        {1},
    ),
    (
        "restart: an empty list makes it ready",
        [("activate", 1), ("restart",), ("set_list", [])],
        ("activate", 3),
        None,
        {3},
    ),
    (
        "restart without resiliency: ready, nothing active",
        [("activate", 1), ("restart_plain",)],
        ("activate", 3),
        None,
        {3},
    ),
    ("list with overlapping partitions", [("restart",)], ("set_list", [1, 3]), PartitionConflict, set()),
    ("list with a duplicate", [("restart",)], ("set_list", [4, 4]), InvalidArgument, set()),
    ("list with an unknown id", [("restart",)], ("set_list", [2, 40]), UnknownPartition, set()),
    (
        "list longer than FM_MAX_FABRIC_PARTITIONS",
        [("restart",)],
        ("set_list", list(range(65))),
        InvalidArgument,
        set(),
    ),
    # set-activated-list is only taken after a restart (FM User Guide, "Resiliency":
    # the list is how a restarted FM learns what is active).
    ("list while ready (no restart) is refused", [("activate", 7)], ("set_list", [2]), NotSupported, {7}),
    # Restart mode ("Fabric Manager Restart Mode"): nothing but the list until it is sent.
    ("restart: listing refused until the list", [("activate", 1), ("restart",)], ("list",), NotReady, set()),
    ("restart: after the list listing works", [("activate", 1), ("restart",), ("set_list", [1])], ("list",), None, {1}),
    # Restart mode: fmGetNvlinkFailedDevices is not supported, before or after the list.
    ("restart: failed devices not supported", [("restart",)], ("failed",), NotSupported, set()),
    (
        "restart: failed devices not supported after the list",
        [("restart",), ("set_list", [])],
        ("failed",),
        NotSupported,
        set(),
    ),
    # H100 ("GPU Partitions" for DGX/HGX H100; degraded-mode handling): partitions stay
    # supported whatever the GPU degradation; activation is not refused for it.
    ("H100: degraded GPU's quad still activates", [("h100",), ("fail_gpu", 5)], ("activate", 2), None, {2}),
    ("H100: degraded GPU's board still activates", [("h100",), ("fail_gpu", 8)], ("activate", 0), None, {0}),
    ("stopped: activate unavailable", [("stop",)], ("activate", 1), FabricManagerUnavailable, None),
    ("stopped: listing unavailable", [("stop",)], ("list",), FabricManagerUnavailable, None),
    ("stopped: the list unavailable", [("stop",)], ("set_list", []), FabricManagerUnavailable, None),
    (
        "stopped then started: forgotten, waits for the list",
        [("activate", 1), ("stop",), ("start",)],
        ("activate", 1),
        NotReady,
        set(),
    ),
]


@pytest.mark.parametrize(("setup", "step", "error", "active"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(driver, setup, step, error, active) -> None:
    for s in setup:
        apply(driver, s)
    if error is None:
        apply(driver, step)
    else:
        with pytest.raises(error) as info:
            apply(driver, step)
        assert type(info.value) is error  # the exact error, not a wider one
    if active is None:  # Fabric Manager is down: nothing to read back
        return
    assert active_in_fm(driver) == active


def test_conflict_names_the_active_partitions(driver) -> None:
    driver.client.activate(3)
    driver.client.activate(4)
    with pytest.raises(PartitionConflict) as info:
        driver.client.activate(1)
    assert info.value.conflicting == (3, 4)
    assert info.value.partition_id == 1


def test_unsupported_partitions_follow_degraded_gpus(driver) -> None:
    assert driver.client.unsupported_partitions() == []
    driver.fail_gpu(3)
    # GPU 3 is in the board (0), quad 1, pair 3 (1,3) and its own partition 9.
    assert driver.client.unsupported_partitions() == [0, 1, 3, 9]
    flags = {p.id: p.supported for p in driver.client.list_partitions()}
    assert [pid for pid, ok in flags.items() if not ok] == [0, 1, 3, 9]
    assert len(flags) == 15  # the binding keeps unsupported partitions in the listing


def test_failed_devices_name_gpus_and_switches(driver, hgx_board) -> None:
    assert not driver.client.nvlink_failed_devices()
    driver.fail_gpu(6, 11)
    driver.fail_gpu(6, 2)
    switch = hgx_board.nvswitches[1].bdf
    driver.fail_switch(switch, 40)
    failed = driver.client.nvlink_failed_devices()
    assert [(d.physical_id, d.pci_bus_id, d.ports) for d in failed.gpus] == [
        (6, hgx_board.physical_id_map()[6], (2, 11))
    ]
    assert failed.gpu_pci_bus_ids == (hgx_board.physical_id_map()[6],)
    assert [(d.pci_bus_id, d.ports) for d in failed.switches] == [(switch, (40,))]


def test_listing_matches_the_board_and_topology(driver, hgx_board) -> None:
    from core.topology import HGX_H100_PARTITIONS

    by_id = {p.id: p for p in driver.client.list_partitions()}
    assert sorted(by_id) == [p.id for p in HGX_H100_PARTITIONS]
    board = hgx_board.physical_id_map()
    for part in HGX_H100_PARTITIONS:
        info = by_id[part.id]
        assert info.physical_ids == part.gpus
        assert {g.pci_bus_id for g in info.gpus} == {board[g] for g in part.gpus}
        assert info.nvlinks == part.nvlinks
        assert not info.active and info.supported
        assert all(g.uuid.startswith("GPU-") and g.max_nvlinks == 18 for g in info.gpus)


def test_refused_list_leaves_fabric_manager_waiting(driver) -> None:
    driver.client.activate(1)
    apply(driver, ("restart",))
    with pytest.raises(PartitionConflict):
        driver.client.set_activated_list([1, 3])
    with pytest.raises(NotReady):
        driver.client.activate(1)
    driver.client.set_activated_list([1])
    assert active_ids(driver.client) == {1}


def test_h100_partition_info_has_no_pci_bus_id_or_uuid(driver) -> None:
    """H100: GPUs are known by physical id (= module id) only; listing must not fail."""
    driver.set_h100()
    parts = driver.client.list_partitions()
    assert len(parts) == 15
    assert all(g.uuid == "" for p in parts for g in p.gpus)
    # The binding fills what it learnt before (its gpu_map); the simulator gives none.
    assert {g.physical_id for p in parts for g in p.gpus} == set(range(1, 9))


def test_h100_degradation_lists_are_empty_and_links_show_it(driver) -> None:
    driver.set_h100()
    driver.fail_gpu(3, 1)
    driver.fail_gpu(3, 2)
    assert driver.client.unsupported_partitions() == []
    assert not driver.client.nvlink_failed_devices()
    parts = {p.id: p for p in driver.client.list_partitions()}
    assert all(p.supported for p in parts.values()) and len(parts) == 15
    g3 = next(g for g in parts[1].gpus if g.physical_id == 3)
    assert (g3.nvlinks_available, g3.max_nvlinks) == (16, 18)  # degradation seen here only


def test_restart_mode_exits_without_the_list(driver) -> None:
    """FM User Guide, "Fabric Manager Restart Mode": no activated list within 60 s -> FM exits."""
    from devtools.waiting import wait_for

    driver.set_restart_timeout(0.05)
    apply(driver, ("activate", 1))
    apply(driver, ("restart",))
    wait_for(lambda: not driver.running(), 30, what="Fabric Manager to exit without the list")
    with pytest.raises(FabricManagerUnavailable):
        driver.client.set_activated_list([1])


def test_restart_mode_list_in_time_keeps_it_running(driver) -> None:
    driver.set_restart_timeout(3600)
    apply(driver, ("activate", 1))
    apply(driver, ("restart",))
    driver.client.set_activated_list([1])
    assert driver.running() and active_in_fm(driver) == {1}
