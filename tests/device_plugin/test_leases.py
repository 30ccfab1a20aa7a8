"""The device plugin with the GPU-lease agent beside it (as `gpucaas device-plugin` composes them,
gpucaas/gpu_node.py): leased on allocation, released, checked, and a quarantined GPU is
never handed out (real gRPC with the fake kubelet, the local cluster's kube-apiserver)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from core import lease_states
from core.fabric_client import FabricClient
from core.lease_store import LeaseStore, lease_name
from devtools.fake_sysfs import GOLDEN_ROM_VERSION, GPU_BDFS, H100_SXM5_DEVICE, FakeBoard, golden_rom_sha256
from devtools.waiting import wait_for
from gpucaas.gpu_node import GpuNode, build_node
from services.gpu_leases import controller as lease_handlers
from services.gpu_leases.settings import LeaseAgentSettings
from tests.device_plugin.conftest import RunningFabric
from tests.fixtures.fake_kubelet import AdmissionError, FakeKubelet

NODE = "gpu-node-1"
RESOURCE = "nvidia.com/gpu"


def wait(predicate: Callable[[], object], timeout: float = 20.0) -> None:
    wait_for(predicate, timeout, interval=0.05)


@pytest.fixture
def leased_plugin(
    hgx_board: FakeBoard,
    fabric: RunningFabric,
    fake_kubelet: FakeKubelet,
    make_settings,
    kubeconfig: Path,
    tmp_path: Path,
) -> Iterator[GpuNode]:
    golden = tmp_path / "golden.json"
    golden.write_text(
        json.dumps({H100_SXM5_DEVICE: {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}})
    )
    node = build_node(
        make_settings(hgx_board),
        LeaseAgentSettings(
            leases=True,
            kubeconfig=kubeconfig,
            firmware_golden_file=golden,
            firmware_rom_toggle=False,
            lease_interval=0.1,
        ),
    )
    node.start()
    try:
        fake_kubelet.wait_for_plugin(RESOURCE)
        yield node
    finally:
        node.stop()


def test_leases_follow_allocations_and_checks(
    leased_plugin: GpuNode, fake_kubelet: FakeKubelet, k8s: client.ApiClient, fabric: RunningFabric
) -> None:
    store = LeaseStore(k8s)
    wait(lambda: len(store.list(NODE)) == 8)
    # a lease names the fabric service's physical id of its GPU, or none (made before the plugin
    # learnt the fabric's map): never the PCI-order guess
    with FabricClient(fabric.socket) as fc:
        physical = {g["pci_bus_id"]: int(g["physical_id"]) for g in fc.topology()["gpus"]}
    assert physical != {bdf: n for n, bdf in enumerate(sorted(physical), 1)}  # the board's ids are not PCI order
    for made in store.list(NODE):
        assert made["spec"].get("physicalId") in (None, physical[made["spec"]["pciAddress"]]), made["spec"]
    alloc = fake_kubelet.admit("tenant-acme", "c-1", RESOURCE, 2)
    names = [lease_name(NODE, d) for d in alloc.device_ids]
    wait(lambda: all(store.get(n)["status"]["state"] == "Leased" for n in names))
    assert store.get(names[0])["status"]["holder"]["tenancy"] == "acme"

    fake_kubelet.remove_pod("tenant-acme", "c-1")
    wait(lambda: all(store.get(n)["status"]["state"] == "Releasing" for n in names))
    conn = fake_kubelet.plugins[RESOURCE]
    assert conn.wait_for(lambda c: all(c.health()[d] == "Unhealthy" for d in alloc.device_ids), timeout=10)

    core = client.CoreV1Api(k8s)
    import datetime as dt

    for n in names:  # the controller's turn
        lease_handlers.step(store, core, store.get(n), dt.datetime.now(dt.UTC))
    wait(lambda: all(store.get(n)["status"]["state"] == "Free" for n in names))
    assert conn.wait_for(lambda c: all(c.health()[d] == "Healthy" for d in alloc.device_ids), timeout=10)


def test_a_quarantined_gpu_is_never_allocated(
    leased_plugin: GpuNode, fake_kubelet: FakeKubelet, k8s: client.ApiClient
) -> None:
    store = LeaseStore(k8s)
    wait(lambda: len(store.list(NODE)) == 8)
    bad = GPU_BDFS[2]
    store.transition(lease_name(NODE, bad), lambda st: lease_states.admin_quarantine(st, "suspect firmware"))
    conn = fake_kubelet.plugins[RESOURCE]
    assert conn.wait_for(lambda c: c.health().get(bad) == "Unhealthy", timeout=10)
    # the plugin's /metrics says so too (the PrometheusRule's GpucaasGpuQuarantined)
    registry = leased_plugin.plugin.metrics.registry
    wait(lambda: registry.get_sample_value("gpucaas_gpu_leases", {"node": NODE, "state": "Quarantined"}) == 1)
    assert registry.get_sample_value("gpucaas_gpu_leases", {"node": NODE, "state": "Free"}) == 7
    given: set[str] = set()
    for i in range(7):
        given |= set(fake_kubelet.admit("tenant-acme", f"c-{i}", RESOURCE, 1).device_ids)
    assert bad not in given and len(given) == 7
    with pytest.raises(AdmissionError):
        fake_kubelet.admit("tenant-acme", "c-last", RESOURCE, 1)
    with pytest.raises(AdmissionError):  # even asked by name, Allocate refuses it
        fake_kubelet.admit("tenant-acme", "c-named", RESOURCE, 1, devices=[bad])
