"""After release the GPU is reset through sysfs, then its firmware is checked (the Shared NVSwitch model asks it).

The reset and the ROM read are ordered: a checker that looks at the fake board's reset
count when it runs sees the reset already done.
"""

from __future__ import annotations

from kubernetes import client

from core.gpu_reset import reset_gpu
from core.lease_store import LeaseStore
from devtools.fake_sysfs import FakeBoard
from services.gpu_leases.agent import NodeGPU, NodeLeases
from services.gpu_leases.firmware import GoldenTable, SysfsFirmwareCheck
from tests.gpu_leases.conftest import NODE, Kubelet, make_pod
from tests.gpu_leases.test_lease_cycle import GPU, NAME, controller_step, state


class RecordingCheck(SysfsFirmwareCheck):
    def __init__(self, board: FakeBoard, golden: GoldenTable) -> None:
        super().__init__(board.sysfs, golden, toggle_rom=False)
        self.board = board
        self.resets_seen: list[int] = []

    def check(self, pci_address: str):  # type: ignore[override]
        self.resets_seen.append(self.board.resets(pci_address))
        return super().check(pci_address)


def _agent(k8s, board: FakeBoard, golden: GoldenTable, kubelet: Kubelet, reset) -> tuple[NodeLeases, RecordingCheck]:
    gpus = [NodeGPU(d.bdf, d.device, d.physical_id, "NVIDIA H100 80GB HBM3") for d in board.gpus]
    checker = RecordingCheck(board, golden)
    return NodeLeases(k8s, NODE, lambda: gpus, lambda: kubelet.holdings, checker, reset=reset), checker


def _release_and_check(agent: NodeLeases, store: LeaseStore, kubelet: Kubelet, k8s) -> None:
    agent.reconcile_once()
    make_pod(k8s, "acme", "c-1")
    kubelet.hold("tenant-acme", "c-1", GPU)
    agent.reconcile_once()
    kubelet.drop("tenant-acme", "c-1")
    agent.reconcile_once()
    assert controller_step(store, k8s) == "check requested"
    agent.reconcile_once()  # reset, then the firmware check


def test_gpu_is_reset_after_release_before_the_check(
    k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet
) -> None:
    store = LeaseStore(k8s)
    agent, checker = _agent(k8s, hgx_board, golden, kubelet, lambda bdf: reset_gpu(hgx_board.sysfs, bdf))
    _release_and_check(agent, store, kubelet, k8s)
    assert state(store) == "Free"
    assert checker.resets_seen == [1]  # the reset came first
    assert hgx_board.reset_log() == {GPU: 1}
    assert (hgx_board.device_dir(GPU) / "reset_method").read_text().strip() == "bus"  # secondary bus reset


def test_a_gpu_that_cannot_be_reset_is_quarantined(
    k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet
) -> None:
    (hgx_board.device_dir(GPU) / "reset").unlink()  # the device offers no reset
    store = LeaseStore(k8s)
    agent, checker = _agent(k8s, hgx_board, golden, kubelet, lambda bdf: reset_gpu(hgx_board.sysfs, bdf))
    _release_and_check(agent, store, kubelet, k8s)
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Quarantined" and lz["status"]["reason"] == "ResetFailed"
    assert checker.resets_seen == []  # never checked a GPU it could not reset
