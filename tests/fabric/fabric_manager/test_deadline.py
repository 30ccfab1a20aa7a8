"""Every Fabric Manager call has a deadline: the compiled C double answering slowly or never.

A silent Fabric Manager makes real libnvfm calls block ~70 s. Through
``DeadlineFabricManager`` each call returns within its deadline as "unavailable",
while the library call is still stuck (the double counts stalled calls), and the
partition service's lock is free again: no lock is held past the deadline.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.waiting import wait_for
from services.fabric.bookkeeping import ActivationStore
from services.fabric.errors import Unavailable
from services.fabric.fabric_manager.deadline import DeadlineFabricManager
from services.fabric.fabric_manager.errors import FabricManagerUnavailable
from services.fabric.fabric_manager.nvfm import NvfmFabricManager
from services.fabric.partitions import PartitionService
from tests.fabric.factories import holder, pcis

DEADLINE_S = 0.3


@pytest.fixture
def stall_lib(fake_lib: ctypes.CDLL) -> Iterator[ctypes.CDLL]:
    fake_lib.fakeFmStall.argtypes = [ctypes.c_int]
    yield fake_lib
    fake_lib.fakeFmStall(0)  # release whatever is still stuck
    wait_for(lambda: fake_lib.fakeFmStalledCalls() == 0, 30, what="stalled calls to finish")


@pytest.fixture
def bounded(stall_lib: ctypes.CDLL, libnvfm_path: Path, hgx_board) -> Iterator[DeadlineFabricManager]:
    fm = DeadlineFabricManager(
        lambda: NvfmFabricManager(
            library=libnvfm_path, address="10.0.0.2:6666", timeout_ms=2000, gpu_map=hgx_board.physical_id_map()
        ),
        deadline_s=DEADLINE_S,
    )
    fm.connect()
    yield fm
    stall_lib.fakeFmStall(0)
    fm.close()


@pytest.fixture
def bounded_service(bounded: DeadlineFabricManager, tmp_path: Path) -> Iterator[PartitionService]:
    with ActivationStore(tmp_path / "st") as store:
        yield PartitionService(bounded, store)


def _pending(result: dict) -> None:
    """A release that cannot reach Fabric Manager is kept pending (reconcile finishes it)."""
    assert result["pending"] is True
    raise Unavailable("no answer from Fabric Manager within the deadline: release pending")


CALLS = {
    "list": lambda s: s.list_partitions(),
    "topology": lambda s: s.topology(),
    "activate": lambda s: s.activate(holder(1, 3), pcis(1, 3)),
    "release": lambda s: _pending(s.release(holder(5, 7))),
    "replay": lambda s: s.replay(),
    "admin activate": lambda s: s.admin_activate(9),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_silent_fm_each_call_returns_unavailable_with_no_lock_held(
    bounded_service: PartitionService, bounded: DeadlineFabricManager, stall_lib, call: str
) -> None:
    bounded_service.activate(holder(5, 7), pcis(5, 7))
    stall_lib.fakeFmStall(-1)  # Fabric Manager answers never
    with pytest.raises(Unavailable, match="no answer from Fabric Manager within"):
        CALLS[call](bounded_service)
    # The library call is still blocked, yet the service call has returned ...
    assert stall_lib.fakeFmStalledCalls() >= 1
    assert bounded.overruns >= 1
    # ... and holds no lock: another thread takes the service lock at once.
    got: list[bool] = []

    def take() -> None:
        ok = bounded_service._lock.acquire(blocking=False)
        got.append(ok)
        if ok:
            bounded_service._lock.release()

    t = threading.Thread(target=take)
    t.start()
    t.join()
    assert got == [True]
    assert bounded_service.status.reachable is False
    # Fabric Manager answers again: the next call uses a fresh connection and works.
    stall_lib.fakeFmStall(0)
    wait_for(lambda: stall_lib.fakeFmStalledCalls() == 0, 30, what="the stuck call to return")
    assert len(bounded_service.list_partitions()) == 15


def test_slow_answers_within_the_deadline_go_through(bounded: DeadlineFabricManager, stall_lib) -> None:
    stall_lib.fakeFmStall(int(DEADLINE_S * 1000 / 10))  # a tenth of the deadline per call
    bounded.activate(3)
    assert {p.id for p in bounded.list_partitions() if p.active} == {3}
    assert bounded.overruns == 0


def test_slow_answers_past_the_deadline_are_unavailable(bounded: DeadlineFabricManager, stall_lib) -> None:
    stall_lib.fakeFmStall(int(DEADLINE_S * 1000 * 10))  # ten deadlines per call
    with pytest.raises(FabricManagerUnavailable, match="within 0.3 s"):
        bounded.activate(4)
    assert bounded.overruns == 1


def test_connect_has_a_deadline_too(stall_lib, libnvfm_path: Path) -> None:
    stall_lib.fakeFmStall(-1)
    fm = DeadlineFabricManager(
        lambda: NvfmFabricManager(library=libnvfm_path, address="10.0.0.2"), deadline_s=DEADLINE_S
    )
    with pytest.raises(FabricManagerUnavailable, match="fmConnect"):
        fm.connect()
    assert stall_lib.fakeFmStalledCalls() >= 1


def test_deadline_must_be_positive(libnvfm_path: Path) -> None:
    with pytest.raises(ValueError, match="deadline_s"):
        DeadlineFabricManager(lambda: NvfmFabricManager(library=libnvfm_path), deadline_s=0)
