"""What is particular to the simulator: its board, its clients, its event switches, threads."""

from __future__ import annotations

import threading

import pytest

from core import topology
from services.fabric.fabric_manager.errors import FabricManagerUnavailable, NotReady, PartitionConflict
from services.fabric.fabric_manager.interface import FabricManager
from services.fabric.fabric_manager.simulator import (
    SimulatedFabric,
    SimulatedFabricManager,
    default_gpu_map,
)


def test_is_a_fabric_manager(sim_client) -> None:
    assert isinstance(sim_client, FabricManager)
    assert sim_client.backend == "simulator"


def test_default_board_is_the_reference_dgx(hgx_board) -> None:
    assert default_gpu_map() == hgx_board.physical_id_map()
    fabric = SimulatedFabric()
    assert fabric.gpu_map == hgx_board.physical_id_map()


def test_gpu_map_is_normalised_and_checked() -> None:
    gpus = {g: f"00000000:{0x10 + g:02X}:00.0" for g in topology.PHYSICAL_IDS}
    fabric = SimulatedFabric(gpus)
    assert fabric.gpu_map[1] == "0000:11:00.0"
    with pytest.raises(ValueError, match=r"physical id\(s\) \[8\]"):
        SimulatedFabric({g: b for g, b in gpus.items() if g != 8})
    with pytest.raises(ValueError, match="pci_bus_id"):
        SimulatedFabric({**gpus, 3: "not-an-address"})


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda f: f.inject_gpu_nvlink_failure(9), "physical_id: no GPU 9"),
        (lambda f: f.inject_gpu_nvlink_failure(1, ports=()), "ports"),
        (lambda f: f.inject_gpu_nvlink_failure(1, ports=(64,)), "ports"),
        (lambda f: f.inject_switch_nvlink_failure("0000:18:00.0"), "not an NVSwitch"),
    ],
    ids=["unknown-gpu", "no-ports", "port-out-of-range", "gpu-as-switch"],
)
def test_bad_injections_name_the_field(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call(SimulatedFabric())


def test_clients_share_one_fabric_manager() -> None:
    fabric = SimulatedFabric()
    a, b = SimulatedFabricManager(fabric), SimulatedFabricManager(fabric)
    a.activate(2)  # connects on demand
    assert [p.id for p in b.list_partitions() if p.active] == [2]
    with pytest.raises(PartitionConflict):
        b.activate(5)


def test_connect_fails_while_stopped_and_works_after_start() -> None:
    client = SimulatedFabricManager()
    client.stop()
    with pytest.raises(FabricManagerUnavailable):
        client.connect()
    with pytest.raises(FabricManagerUnavailable):
        client.unsupported_partitions()
    client.start()
    client.connect()
    assert client.fabric.awaiting_activated_list and client.fabric.restarts == 1
    client.set_activated_list([])
    client.activate(0)
    client.close()
    client.close()  # idempotent
    assert client.fabric.active_partition_ids() == {0}


def test_restart_counts_and_forgets() -> None:
    client = SimulatedFabricManager()
    client.activate(1)
    client.restart()
    assert client.fabric.restarts == 1
    assert client.fabric.active_partition_ids() == frozenset()
    # Restart mode: listing is refused until the activated list arrives (FM User Guide,
    # "Fabric Manager Restart Mode").
    with pytest.raises(NotReady):
        client.list_partitions()
    client.set_activated_list([])
    assert not any(p.active for p in client.list_partitions())


def test_restart_mode_deadline_follows_the_clock() -> None:
    """FM exits when the list does not come within restart_timeout_s (60 s by default)."""
    now = [1000.0]
    fabric = SimulatedFabric(clock=lambda: now[0])
    fabric.restart()
    now[0] += 59.9
    assert fabric.running and fabric.awaiting_activated_list
    now[0] += 0.2
    assert not fabric.running and fabric.exits_without_list == 1


def test_degraded_gpu_loses_nvlinks_in_the_listing() -> None:
    fabric = SimulatedFabric()
    fabric.inject_gpu_nvlink_failure(2, ports=(0, 1, 2))
    quad = next(p for p in SimulatedFabricManager(fabric).list_partitions() if p.id == 1)
    assert {g.physical_id: g.nvlinks_available for g in quad.gpus} == {1: 18, 2: 15, 3: 18, 4: 18}
    assert quad.nvlinks == 69 and not quad.supported


def test_racing_overlapping_activations_one_wins() -> None:
    """Eight threads race for partitions that all contain GPU 5: exactly one wins."""
    fabric = SimulatedFabric()
    contenders = [p.id for p in topology.HGX_H100_PARTITIONS if 5 in p.gpus]  # 0, 2, 5, 11
    barrier = threading.Barrier(len(contenders) * 2)
    wins: list[int] = []
    losses: list[PartitionConflict] = []
    lock = threading.Lock()

    def go(pid: int) -> None:
        client = SimulatedFabricManager(fabric)
        barrier.wait(timeout=30)
        try:
            client.activate(pid)
            with lock:
                wins.append(pid)
        except PartitionConflict as exc:
            with lock:
                losses.append(exc)

    threads = [threading.Thread(target=go, args=(pid,)) for pid in contenders * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(wins) == 1 and len(losses) == len(threads) - 1
    assert fabric.active_partition_ids() == {wins[0]}
