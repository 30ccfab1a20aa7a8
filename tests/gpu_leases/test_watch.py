"""The running agent follows its leases by a watch, not by polling: with a tick far longer than
the test, only a watch event (or a change it sees locally) can make it act; while its watches
are refused, it polls."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kubernetes import client

from core import lease_states as states
from core.crds import GPULEASE_PLURAL
from core.kube import Kube, KubeConnection, RestKube, from_status
from core.lease_store import LeaseStore, lease_name
from devtools.fake_sysfs import FakeBoard
from devtools.waiting import wait_for
from services.gpu_leases.agent import NodeGPU, NodeLeases
from services.gpu_leases.firmware import GoldenTable, SysfsFirmwareCheck
from tests.core_kube.scripted import forbidden

from .conftest import NODE, Kubelet, make_pod

GPU = "0000:18:00.0"
NAME = lease_name(NODE, GPU)
HOUR = 3600.0


def _agent(api: Any, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet, checker: Any = None) -> NodeLeases:
    """The node's agent on the fake board, ticking fast, its minute's resync an hour away."""
    gpus = [NodeGPU(d.bdf, d.device, d.physical_id, "NVIDIA H100 80GB HBM3") for d in hgx_board.gpus]
    check = checker or SysfsFirmwareCheck(hgx_board.sysfs, golden, toggle_rom=False)
    return NodeLeases(api, NODE, lambda: gpus, lambda: kubelet.holdings, check, interval=0.05, resync=HOUR)


def lease_cycle(k8s: client.ApiClient, store: LeaseStore, kubelet: Kubelet) -> None:
    """A pod takes the GPU and leaves (PodResources, seen by the agent), the controller asks
    for the check (a write the agent hears only by its watch), the agent checks: Free again."""
    make_pod(k8s, "acme", "w-1")
    kubelet.hold("tenant-acme", "w-1", GPU)
    wait_for(lambda: store.get(NAME)["status"]["state"] == "Leased", what="Leased")
    kubelet.drop("tenant-acme", "w-1")
    wait_for(lambda: store.get(NAME)["status"]["state"] == "Releasing", what="Releasing")
    store.transition(NAME, lambda st: states.check_started(st))
    lease = wait_for(lambda: (lz := store.get(NAME))["status"]["state"] == "Free" and lz, what="checked, Free")
    assert lease["status"]["lastCheck"]["result"] == "Passed"


def test_a_check_requested_by_the_controller_runs_at_once(
    kubeconfig: Path, k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet
) -> None:
    kube = RestKube(KubeConnection(kubeconfig=kubeconfig))
    agent = _agent(kube, hgx_board, golden, kubelet)
    store = LeaseStore(k8s)  # the controller's side, through the official client
    agent.start()
    try:
        wait_for(lambda: agent.watching, what="the watch on the node's leases")
        wait_for(lambda: (store.get(NAME) or {}).get("status", {}).get("state") == "Free", what="lease created Free")
        # nothing changed locally after the controller's request and the resync is an hour
        # away: only the watch can start the check
        lease_cycle(k8s, store, kubelet)
    finally:
        agent.stop()
        kube.close()


class WatchRefused(Kube):
    """The official client's adapter, refused every watch as RBAC refuses an identity without ``watch``."""

    def stream(self, path: str, *, query: list[tuple[str, str]] | None = None, read_timeout_s: float) -> Any:
        denied = forbidden("system:serviceaccount:gpucaas-system:device-plugin", "watch", "gpuleases", "gpucaas.dev")
        raise from_status(403, denied, what=f"GET {path}", server=self.server)


def test_without_a_watch_every_tick_is_a_full_round(
    k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet
) -> None:
    agent = _agent(WatchRefused(api_client=k8s), hgx_board, golden, kubelet)
    store = LeaseStore(k8s)
    agent.start()
    try:
        # the lease is created first and its status written next: wait for both
        wait_for(lambda: (store.get(NAME) or {}).get("status", {}).get("state") == "Free", what="Free")
        store.transition(NAME, lambda st: states.admin_quarantine(st, "operator says so"))
        wait_for(lambda: GPU in agent.health(), what="the quarantine withheld from the kubelet")
        assert not agent.watching  # refused: seen by the full round of a tick
    finally:
        agent.stop()


class CountingRestKube(RestKube):
    """The daemon's adapter, counting the lists of the GPU lease collection it sends (a watch is
    a stream, not counted)."""

    lists = 0

    def send(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "GET" and path.endswith(f"/{GPULEASE_PLURAL}"):
            self.lists += 1
        return super().send(method, path, **kwargs)


def test_rounds_read_the_leases_from_the_watch_not_from_a_list(
    kubeconfig: Path, k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet
) -> None:
    """A whole lease cycle (Leased, Releasing, the check, Free) is several full rounds; with the
    watch open they read the node's leases from its copy, so kube-apiserver sees no list."""
    kube = CountingRestKube(KubeConnection(kubeconfig=kubeconfig))
    agent = _agent(kube, hgx_board, golden, kubelet)
    store = LeaseStore(k8s)
    agent.start()
    try:
        wait_for(lambda: agent.watching, what="the watch on the node's leases")
        wait_for(lambda: (store.get(NAME) or {}).get("status", {}).get("state") == "Free", what="lease created Free")
        wait_for(lambda: GPU in {lz["spec"]["pciAddress"] for lz in agent._leases.objects() or []}, what="held")
        listed = kube.lists  # the watch's own listing and the first (resync) round's
        lease_cycle(k8s, store, kubelet)
        assert kube.lists == listed
    finally:
        agent.stop()
        kube.close()


class LaggingRestKube(RestKube):
    """The daemon's adapter whose watch streams hand nothing on while ``flowing`` is clear: a
    kube-apiserver whose watch events lag its writes (they are sent, and arrive late)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flowing = threading.Event()
        self.flowing.set()

    def stream(self, path: str, *, query: list[tuple[str, str]] | None = None, read_timeout_s: float) -> Any:
        return _Held(super().stream(path, query=query, read_timeout_s=read_timeout_s), self.flowing)


class _Held:
    def __init__(self, resp: Any, flowing: threading.Event) -> None:
        self._resp, self._flowing = resp, flowing

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        for chunk in self._resp.stream(*args, **kwargs):
            self._flowing.wait()
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resp, name)


class CountingCheck:
    def __init__(self, inner: SysfsFirmwareCheck) -> None:
        self.inner, self.runs = inner, 0

    def check(self, bdf: str) -> Any:
        self.runs += 1
        return self.inner.check(bdf)


def test_rounds_follow_their_own_writes_while_the_watch_lags_and_check_once(
    kubeconfig: Path, k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet
) -> None:
    """A round reads the watch's copy, which may not have the agent's own last write yet: the
    round after it still starts from that write (the pod left a Leased GPU: release it), and a
    GPU it just checked is not checked (and reset) once more from a copy that says Checking."""
    kube = LaggingRestKube(KubeConnection(kubeconfig=kubeconfig))
    checker = CountingCheck(SysfsFirmwareCheck(hgx_board.sysfs, golden, toggle_rom=False))
    agent = _agent(kube, hgx_board, golden, kubelet, checker)
    store = LeaseStore(k8s)
    agent.start()
    try:
        wait_for(lambda: agent.watching, what="the watch on the node's leases")
        wait_for(lambda: (store.get(NAME) or {}).get("status", {}).get("state") == "Free", what="lease created Free")
        wait_for(lambda: (agent._leases.get(NAME) or {}).get("status", {}).get("state") == "Free", what="held as Free")
        kube.flowing.clear()  # from here no event reaches the agent
        make_pod(k8s, "acme", "w-1")
        kubelet.hold("tenant-acme", "w-1", GPU)
        wait_for(lambda: store.get(NAME)["status"]["state"] == "Leased", what="Leased")
        kubelet.drop("tenant-acme", "w-1")
        wait_for(lambda: store.get(NAME)["status"]["state"] == "Releasing", what="Releasing, from its own write")
        store.transition(NAME, lambda st: states.check_started(st))  # the controller's, seen once events flow
        kube.flowing.set()
        wait_for(lambda: store.get(NAME)["status"]["state"] == "Free", what="checked, Free")
        checked = checker.runs
        kube.flowing.clear()  # the check's own write is not in the copy: the next rounds must not check again
        kubelet.hold("tenant-acme", "w-1", GPU)
        wait_for(lambda: store.get(NAME)["status"]["state"] == "Leased", what="Leased again")
        assert checker.runs == checked == 1
    finally:
        kube.flowing.set()
        agent.stop()
        kube.close()
