"""Property: whatever happens, Fabric Manager's active partitions are the holders' records.

A state machine plays what the fabric service does with Fabric Manager: holders
activate partitions and release them, Fabric Manager restarts (the service
replays its records with ``set_activated_list``), stops and starts again, GPUs
degrade and heal. Every step keeps the records the way the service keeps them
(recorded only on success; forgotten on release, even when Fabric Manager was
down since a stopped Fabric Manager forgets everything). After every step, with
Fabric Manager up, its active set equals the records: nothing half-activated,
no partition leaked, no two records overlapping.

It runs against the simulator and against the binding over the fake libnvfm.
(The service-level version, with service VM crashes, is in the fabric service's
tests.)
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from core import topology
from devtools.fake_sysfs import GPU_BDFS, GPU_PHYSICAL_IDS
from services.fabric.fabric_manager.errors import (
    FabricManagerUnavailable,
    PartitionConflict,
    PartitionUnsupported,
)
from services.fabric.fabric_manager.interface import FabricManager
from services.fabric.fabric_manager.nvfm import NvfmFabricManager
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from tests.fabric.fabric_manager.conftest import reset_fake
from tests.fabric.fabric_manager.drivers import Driver, LibDriver, SimDriver

HOLDERS = st.sampled_from([f"gpus:h{i}" for i in range(6)])
PARTITION_IDS = st.sampled_from([p.id for p in topology.HGX_H100_PARTITIONS])
GPUS = st.sampled_from(topology.PHYSICAL_IDS)
TABLE = {p.id: p for p in topology.HGX_H100_PARTITIONS}
BOARD = dict(zip(GPU_PHYSICAL_IDS, GPU_BDFS, strict=True))

SETTINGS = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def machine_for(make_driver: Callable[[], Driver]) -> type[RuleBasedStateMachine]:
    class FabricRecords(RuleBasedStateMachine):
        """The holders' records against one Fabric Manager."""

        @initialize()
        def setup(self) -> None:
            self.driver = make_driver()
            self.fm: FabricManager = self.driver.client
            self.records: dict[str, int] = {}
            self.running = True
            self.degraded: set[int] = set()

        def replay(self) -> None:
            """What the service does after a restart: set the activated list from its records."""
            self.fm.set_activated_list(sorted(self.records.values()))

        @rule(holder=HOLDERS, partition_id=PARTITION_IDS)
        def activate(self, holder: str, partition_id: int) -> None:
            if holder in self.records:
                return  # a holder owns one allocation at a time
            try:
                self.fm.activate(partition_id)
            except FabricManagerUnavailable:
                assert not self.running
                return
            except PartitionConflict:
                assert any(TABLE[r].overlaps(TABLE[partition_id]) for r in self.records.values())
                return
            except PartitionUnsupported:
                assert TABLE[partition_id].gpus & self.degraded
                return
            assert self.running
            assert not any(TABLE[r].overlaps(TABLE[partition_id]) for r in self.records.values())
            self.records[holder] = partition_id

        @rule(holder=HOLDERS)
        def release(self, holder: str) -> None:
            partition_id = self.records.pop(holder, None)
            if partition_id is None:
                return
            try:
                self.fm.deactivate(partition_id)
            except FabricManagerUnavailable:
                assert not self.running  # it forgot the partition; the replay will not list it

        @rule()
        def fm_restart(self) -> None:
            if not self.running:
                return
            self.driver.stop()
            self.driver.start()
            self.replay()

        @rule()
        def fm_stop(self) -> None:
            self.driver.stop()
            self.running = False

        @rule()
        def fm_start(self) -> None:
            if self.running:
                return
            self.driver.start()
            self.running = True
            self.replay()

        @rule(gpu=GPUS)
        def degrade(self, gpu: int) -> None:
            self.driver.fail_gpu(gpu)
            self.degraded.add(gpu)

        @rule(gpu=GPUS)
        def heal(self, gpu: int) -> None:
            self.driver.heal_gpu(gpu)
            self.degraded.discard(gpu)

        @invariant()
        def active_equals_records(self) -> None:
            if not getattr(self, "running", False):
                return
            active = {p.id for p in self.fm.list_partitions() if p.active}
            assert active == set(self.records.values()), (active, self.records)
            held = sorted(self.records.values())
            for i, a in enumerate(held):
                for b in held[i + 1 :]:
                    assert not TABLE[a].overlaps(TABLE[b])

        @invariant()
        def unsupported_follow_degraded_gpus(self) -> None:
            if not getattr(self, "running", False):
                return
            expected = sorted(p.id for p in TABLE.values() if p.gpus & self.degraded)
            assert self.fm.unsupported_partitions() == expected

        def teardown(self) -> None:
            if hasattr(self, "fm"):
                self.fm.close()

    return FabricRecords


def test_simulator_active_partitions_equal_records() -> None:
    def make() -> SimDriver:
        fabric = SimulatedFabric(BOARD)
        return SimDriver(SimulatedFabricManager(fabric), fabric)

    run_state_machine_as_test(machine_for(make), settings=SETTINGS)


@pytest.mark.parametrize("examples", [40])
def test_binding_active_partitions_equal_records(libnvfm: ctypes.CDLL, libnvfm_path, examples: int) -> None:
    def make() -> LibDriver:
        reset_fake(libnvfm, BOARD)
        return LibDriver(NvfmFabricManager(library=libnvfm_path, gpu_map=BOARD), libnvfm)

    try:
        run_state_machine_as_test(machine_for(make), settings=settings(SETTINGS, max_examples=examples))
    finally:
        libnvfm.fakeFmReset()
