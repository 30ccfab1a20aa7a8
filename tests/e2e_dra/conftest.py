"""A sandbox started in the DRA allocation mode (``gpucaas sandbox --allocation dra``).

Each node runs the DRA driver instead of the device plugin; the node agent plays the
kubelet's DRA side; kube-controller-manager makes the claims and kube-scheduler allocates them.
Until the API's pods use ResourceClaimTemplates, the tests create the templates and pods
of the documented shape directly (gpucaas.sandbox.dra_demo).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from core.fabric_client import FabricClient
from core.kube import KubeConnection, new_api_client
from gpucaas.sandbox import runner


@pytest.fixture(scope="package")
def dra_sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    # A short path: unix socket paths (kubelet and plugin sockets) must stay under 108 bytes.
    state = Path(tempfile.mkdtemp(prefix="gpucaas-e2e-dra-", dir="/tmp"))
    sb = runner.start(state, api_port=runner.free_port(), run_seconds=4.0, allocation_mode="dra")
    try:
        yield sb
    finally:
        sb.stop()
        if request.session.testsfailed:
            print(f"\nDRA sandbox state and service logs kept in {state}/logs")


@pytest.fixture(scope="package")
def k8s(dra_sandbox: runner.Sandbox) -> Iterator[client.ApiClient]:
    api = new_api_client(KubeConnection(kubeconfig=dra_sandbox.kubeconfig))
    yield api
    api.close()


def pci_of(sandbox: runner.Sandbox, node: str) -> dict[int, str]:
    """physical GPU id -> PCI address on ``node``, from its fabric service."""
    path = next(n.fabric_socket for n in sandbox.nodes if n.name == node)
    with FabricClient(path, timeout=5) as fc:
        return {int(g["physical_id"]): g["pci_bus_id"] for g in fc.topology()["gpus"]}
