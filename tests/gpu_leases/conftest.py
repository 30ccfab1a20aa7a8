"""Lease fixtures: the node agent on the fake board against the local cluster's kube-apiserver."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from core.lease_store import LeaseStore
from devtools.fake_sysfs import GOLDEN_ROM_VERSION, H100_SXM5_DEVICE, FakeBoard, golden_rom_sha256
from services.gpu_leases.agent import NodeGPU, NodeLeases, PodHolding
from services.gpu_leases.firmware import GoldenTable, SysfsFirmwareCheck

NODE = "gpu-node-a"


@dataclass
class Kubelet:
    """What PodResources would say: which pod holds which GPUs (tests move it)."""

    holdings: list[PodHolding] = field(default_factory=list)

    def hold(self, namespace: str, pod: str, *devices: str) -> None:
        self.holdings.append(PodHolding(namespace, pod, tuple(devices)))

    def drop(self, namespace: str, pod: str) -> None:
        self.holdings = [h for h in self.holdings if (h.namespace, h.pod) != (namespace, pod)]


@pytest.fixture
def golden() -> GoldenTable:
    return GoldenTable.from_json(
        json.dumps({H100_SXM5_DEVICE: {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}})
    )


@pytest.fixture
def kubelet() -> Kubelet:
    return Kubelet()


@pytest.fixture
def lease_agent(k8s: client.ApiClient, hgx_board: FakeBoard, golden: GoldenTable, kubelet: Kubelet) -> NodeLeases:
    gpus = [NodeGPU(d.bdf, d.device, d.physical_id, "NVIDIA H100 80GB HBM3") for d in hgx_board.gpus]
    return NodeLeases(
        k8s, NODE, lambda: gpus, lambda: kubelet.holdings, SysfsFirmwareCheck(hgx_board.sysfs, golden, toggle_rom=False)
    )


@pytest.fixture
def store(k8s: client.ApiClient) -> LeaseStore:
    return LeaseStore(k8s)


def make_pod(k8s: client.ApiClient, tenancy: str, name: str) -> dict[str, Any]:
    core = client.CoreV1Api(k8s)
    ns = f"tenant-{tenancy}"
    try:
        core.create_namespace({"metadata": {"name": ns}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    pod = core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name, "labels": {"gpucaas.dev/tenancy": tenancy}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], "nodeName": NODE},
        },
    )
    return k8s.sanitize_for_serialization(pod)
