"""Fabric Manager restart (inside a healthy VM) -> the active partitions are replayed from the
records; service VM restart -> a fabric reset: the partitions are lost, the holders reported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from core.fabric_client import FabricClient
from devtools.fake_sysfs import build_hgx_h100
from devtools.waiting import wait_for
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.simulator import (
    SimulatedFabric,
    SimulatedFabricManager,
)
from services.fabric.main import FabricNode
from services.fabric.partitions import PartitionService
from services.fabric.settings import FabricSettings
from tests.fabric.factories import holder, pcis


def test_fm_restart_then_activation_replays_first(client: FabricClient, fabric: SimulatedFabric) -> None:
    client.activate(holder(1, 3), pcis(1, 3))
    client.activate(holder(5, 6, 7, 8), pcis(5, 6, 7, 8))
    fabric.restart()
    assert fabric.active_partition_ids() == frozenset()  # FM forgot; waits for the list
    assert fabric.awaiting_activated_list
    # The next change meets NotReady, replays the records, then proceeds.
    client.activate(holder(2, 4), pcis(2, 4))
    assert fabric.active_partition_ids() == {3, 2, 4}
    # An idempotent re-activation of a forgotten partition is re-done too.
    assert client.health()["fabric_manager"]["replays"] == 1


def test_reconcile_replays_after_fm_restart(service: PartitionService, fabric: SimulatedFabric) -> None:
    service.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
    fabric.restart()
    report = service.reconcile()
    assert report["reachable"] and service.status.replays == 1  # listing met NotReady: replayed
    assert fabric.active_partition_ids() == {1} and not fabric.awaiting_activated_list


def test_fm_down_then_back(service: PartitionService, fabric: SimulatedFabric) -> None:
    service.activate(holder(6, 8), pcis(6, 8))
    fabric.stop()
    assert service.reconcile()["reachable"] is False
    assert service.status.reachable is False
    fabric.start()
    assert service.reconcile()["reachable"] is True
    assert fabric.active_partition_ids() == {6}


def test_release_while_fm_restarted_is_not_replayed(service: PartitionService, fabric: SimulatedFabric) -> None:
    service.activate(holder(1), pcis(1))
    service.activate(holder(2), pcis(2))
    fabric.restart()
    assert service.release(holder(1))["released"] is True  # FM forgot it anyway
    service.reconcile()
    assert fabric.active_partition_ids() == {8}


def test_records_survive_a_service_restart(tmp_path: Path, fabric: SimulatedFabric) -> None:
    with ActivationStore(tmp_path / "st") as store:
        PartitionService(SimulatedFabricManager(fabric), store).activate(holder(5, 7), pcis(5, 7))
    fabric.restart()  # the node rebooted: FM restarted, the service too
    with ActivationStore(tmp_path / "st") as store:
        assert [a.holder for a in store.book] == [holder(5, 7)]
        PartitionService(SimulatedFabricManager(fabric), store).reconcile()
    assert fabric.active_partition_ids() == {5}


def test_second_service_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    from services.fabric.errors import StateError

    with ActivationStore(tmp_path / "st"), pytest.raises(StateError, match="another fabric service"):
        ActivationStore(tmp_path / "st").open()


@pytest.fixture
def node(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FabricNode]:
    board = build_hgx_h100(tmp_path / "board", variant="supermicro")
    settings = FabricSettings(
        node_name="gpu-node-1",
        socket=tmp_path_factory.mktemp("s") / "fabric.sock",
        state_dir=tmp_path / "state",
        sysfs_root=board.sysfs,
        fm_backend="simulator",
        libvirt_uri="test:///default",
        domain_type="test",
        domain_name=f"fabric-{tmp_path.name}",
        disk_image=tmp_path / "service-vm.qcow2",
        fm_channel="unix",
        fm_channel_socket=tmp_path / "fm.sock",
        watch_interval_s=0.05,
        restart_backoff_initial_s=0.01,
        restart_backoff_max_s=0.05,
        reconcile_interval_s=0.2,
        publish=False,
        stop_vm_on_exit=True,
    )
    n = FabricNode(settings, fm=SimulatedFabricManager(SimulatedFabric()))
    n.start()
    yield n
    n.stop()
    n.vm.undefine()


def test_vm_crash_is_a_fabric_reset(node: FabricNode) -> None:
    """A service VM restart resets the NVSwitches: partitions are lost (not replayed), the
    holders are reported, and new activations get fresh partitions."""
    fabric = node.fm.fabric  # type: ignore[attr-defined]
    with FabricClient(node.settings.socket) as c:
        c.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
        c.activate(holder(6, 8), pcis(6, 8))
        c.sync([{"holder": holder(1, 2, 3, 4), "pod": "t1/quad"}, {"holder": holder(6, 8)}], grace_seconds=0)
        assert c.health()["service_vm"]["state"] == "running"
        conn = libvirt.open("test:///default")
        try:
            conn.lookupByName(node.settings.domain_name).destroy()  # the VM dies
            wait_for(lambda: node.vm_restart_replays == 1, 60, interval=0.02, what="restart + reset")
            dom = conn.lookupByName(node.settings.domain_name)
            assert dom.isActive()
            assert "gpucaas.fm-restart=1" in dom.XMLDesc()  # FM booted in restart mode this time
        finally:
            conn.close()
        assert fabric.restarts == 2  # FM-in-the-VM booted with it, then restarted with it (simulated)
        assert fabric.active_partition_ids() == frozenset()  # nothing claimed active after the reset
        assert not fabric.awaiting_activated_list  # told "nothing" in time (restart mode)
        lost = {a["holder"]: a for a in c.activations() if a["lost"]}
        assert set(lost) == {holder(1, 2, 3, 4), holder(6, 8)}
        assert lost[holder(1, 2, 3, 4)]["pod"] == "t1/quad"
        assert node.fabric_resets == 1
        h = c.health()
        assert h["service_vm"]["restarts"] == 1 and h["service_vm"]["state"] == "running"
        assert not any(p["active"] for p in c.partitions())
        # New pods get fresh partitions (same GPUs or others).
        assert c.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))["partition_ids"] == [1]
        assert c.activate(holder(5, 7), pcis(5, 7))["partition_ids"] == [5]
        assert fabric.active_partition_ids() == {1, 5}
        # The other lost holder goes when its pod is gone (sync); nothing is deactivated for it.
        c.sync([{"holder": holder(1, 2, 3, 4)}, {"holder": holder(5, 7)}], grace_seconds=0)
        assert {a["holder"] for a in c.activations()} == {holder(1, 2, 3, 4), holder(5, 7)}
        assert fabric.active_partition_ids() == {1, 5}


def test_records_of_an_earlier_boot_are_dropped(tmp_path: Path, fabric: SimulatedFabric) -> None:
    with ActivationStore(tmp_path / "st", boot_id="boot-1") as store:
        PartitionService(SimulatedFabricManager(fabric), store).activate(holder(1), pcis(1))
    with ActivationStore(tmp_path / "st", boot_id="boot-1") as store:  # service restart: kept
        assert not store.discarded_stale and len(store.book) == 1
    with ActivationStore(tmp_path / "st", boot_id="boot-2") as store:  # node reboot: dropped
        assert store.discarded_stale and len(store.book) == 0
    with ActivationStore(tmp_path / "st", boot_id="boot-2") as store:
        assert not store.discarded_stale and len(store.book) == 0
