"""Racing allocations: exactly one wins, the other gets a clear error, nothing is half-activated."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from core.fabric_client import FabricClient, FabricConflict, FabricUnavailable
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.interface import FabricManagerUnavailable
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app
from tests.fabric.factories import holder, pcis

RACES = [
    ((1, 2, 3, 4), (1, 3)),  # quad vs pair inside it
    ((1, 2, 3, 4, 5, 6, 7, 8), (5, 6, 7, 8)),  # board vs quad
    ((1, 2, 3), (3, 4)),  # three singles vs a pair sharing GPU 3
    ((2, 4), (2, 4)),  # same GPUs, two holders
]


def race(n: int, fn: Callable[[int], object]) -> list[object]:
    """Run fn(i) for i in range(n) in threads released together; results or exceptions."""
    barrier = threading.Barrier(n)
    out: list[object] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - the caller's outcome, whatever it is
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


@pytest.mark.parametrize(("a", "b"), RACES, ids=["quad-vs-pair", "board-vs-quad", "singles-vs-pair", "same-gpus"])
def test_two_clients_race_one_wins(api: UnixServer, fabric: SimulatedFabric, a: tuple, b: tuple) -> None:
    sets = [a, b]
    holders = [holder(*a), f"other:{holder(*b)}"]
    clients = [FabricClient(api.socket_path, timeout=30) for _ in sets]
    try:
        results = race(2, lambda i: clients[i].activate(holders[i], pcis(*sets[i])))
    finally:
        for c in clients:
            c.close()
    wins = [r for r in results if isinstance(r, dict)]
    losses = [r for r in results if isinstance(r, FabricConflict)]
    assert len(wins) == 1 and len(losses) == 1, results
    win = wins[0]
    assert win["holder"] in losses[0].detail  # the loser is told who holds it
    # Exactly the winner's partitions are active; the loser left nothing behind.
    assert set(fabric.active_partition_ids()) == set(win["partition_ids"])
    with FabricClient(api.socket_path) as c:
        assert [x["holder"] for x in c.activations()] == [win["holder"]]


def test_many_clients_for_the_board(api: UnixServer, fabric: SimulatedFabric) -> None:
    """Eight holders each want a different set overlapping everyone: one wins."""
    sets = [(1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4), (5, 6, 7, 8), (1, 3), (2, 4), (5, 7), (6, 8), (1, 2)]

    def go(i: int) -> object:
        with FabricClient(api.socket_path, timeout=60) as c:
            return c.activate(f"h{i}", pcis(*sets[i]))

    results = race(len(sets), go)
    wins = [r for r in results if isinstance(r, dict)]
    assert all(isinstance(r, dict | FabricConflict) for r in results), results
    active = set(fabric.active_partition_ids())
    winners_parts = {p for w in wins for p in w["partition_ids"]}
    assert active == winners_parts
    # the winners' GPUs never overlap
    gpus = [g for w in wins for g in w["gpus"]]
    assert len(gpus) == len(set(gpus))


class FailOnNthActivate(SimulatedFabricManager):
    """The simulator, whose Fabric Manager goes away during the n-th activation call."""

    def __init__(self, fabric: SimulatedFabric, n: int) -> None:
        super().__init__(fabric)
        self.n = n
        self.calls = 0

    def activate(self, partition_id: int) -> None:
        self.calls += 1
        if self.calls == self.n:
            raise FabricManagerUnavailable("connection reset during activate (injected)")
        super().activate(partition_id)


def test_failure_midway_rolls_back(tmp_path, tmp_path_factory) -> None:
    fabric = SimulatedFabric()
    fm = FailOnNthActivate(fabric, n=3)
    with ActivationStore(tmp_path / "s") as store:
        service = PartitionService(fm, store)
        with (
            UnixServer(create_app(service), tmp_path_factory.mktemp("s") / "f.sock") as srv,
            FabricClient(srv.socket_path) as c,
        ):
            with pytest.raises(FabricUnavailable):
                c.activate("three", pcis(1, 2, 3))  # singles 7, 8 activated, 9 fails
            assert fabric.active_partition_ids() == frozenset()  # 7 and 8 rolled back
            assert c.activations() == []
            assert c.activate("three", pcis(1, 2, 3))["partition_ids"] == [7, 8, 9]


class CuttableLink(SimulatedFabricManager):
    """The simulator behind a link that can be cut: FM keeps its state, calls fail meanwhile."""

    def __init__(self, fabric: SimulatedFabric, cut_on_activate: int) -> None:
        super().__init__(fabric)
        self.cut = False
        self.cut_on_activate = cut_on_activate
        self.activations = 0

    def _ensure(self) -> None:
        if self.cut:
            raise FabricManagerUnavailable("link to Fabric Manager cut (injected)")
        super()._ensure()

    def activate(self, partition_id: int) -> None:
        self.activations += 1
        if self.activations == self.cut_on_activate:
            self.cut = True
        super().activate(partition_id)


def test_rollback_that_cannot_reach_fm_is_finished_by_reconcile(tmp_path) -> None:
    fabric = SimulatedFabric()
    fm = CuttableLink(fabric, cut_on_activate=2)
    with ActivationStore(tmp_path / "s") as store:
        service = PartitionService(fm, store)
        with pytest.raises(Exception, match="unreachable"):
            service.activate("x", pcis(5, 6))  # 11 activated, then the link is cut
        assert fabric.active_partition_ids() == {11}  # the rollback could not reach FM ...
        assert [(a.holder, a.releasing) for a in store.book] == [("x", True)]  # ... so it is recorded
        assert service.reconcile()["reachable"] is False
        fm.cut = False  # the link is back
        report = service.reconcile()
        assert report["released"] == ["x"]
        assert fabric.active_partition_ids() == frozenset()
        assert len(store.book) == 0


def test_a_full_listen_backlog_is_waited_out_not_reported_unreachable(tmp_path_factory, monkeypatch) -> None:
    """unix(7): connect() with a timeout fails with EAGAIN while the backlog is full.

    A server that is merely busy must not look absent: the client tries again until its timeout.
    """
    import socket

    path = str(tmp_path_factory.mktemp("b") / "busy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    queued = []
    while True:  # fill the backlog until the kernel refuses one more
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            break
        queued.append(s)
    import core.fabric_client as fabric_client

    refused_once = threading.Event()
    real_sleep = fabric_client.sleep

    def backing_off(seconds: float) -> None:
        refused_once.set()  # only the EAGAIN path sleeps
        real_sleep(seconds)

    monkeypatch.setattr(fabric_client, "sleep", backing_off)
    client = FabricClient(path, timeout=30)
    result: list[object] = []
    attempt = threading.Thread(target=lambda: result.append(_connect_once(client)))
    attempt.start()
    assert refused_once.wait(timeout=30), "the client never met a full backlog"
    # The server frees its queue; the waiting client gets in and is then accepted.
    for _ in queued:
        listener.accept()[0].close()
    conn, _ = listener.accept()
    attempt.join(timeout=30)
    assert result == ["connected"]
    conn.close()
    for s in queued:
        s.close()
    listener.close()


def _connect_once(client: FabricClient) -> str:
    conn, _reused = client._take()
    try:
        conn.connect()
    except OSError as exc:
        return repr(exc)
    conn.close()
    return "connected"


def test_the_service_accepts_a_burst_larger_than_the_default_backlog(api: UnixServer) -> None:
    """Thirty-two callers at once (kubelet, lease agents, admins): none is turned away."""

    def go(_i: int) -> object:
        with FabricClient(api.socket_path, timeout=60) as c:
            return c.health()

    results = race(32, go)
    assert all(isinstance(r, dict) for r in results), results
