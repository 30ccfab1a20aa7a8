"""A GPU count advertised as ``nvidia.com/gpu`` in the Node's status capacity, as the DRA driver
keeps it (services/dra_driver/capacity.py), under the real kubelet 1.36 with no device plugin:
the kubelet derives it into allocatable, keeps it across its status reports (every 10 s on
this node) and its restarts, and admits pods by it without allocating any device."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.kube import Kube, KubeConnection
from devtools import waiting
from services.dra_driver.capacity import GPU_RESOURCE, CapacityAdvertiser

from .conftest import NODE, TIMEOUT, Node, make_pod, wait_terminated

SMALL = {"cpu": "100m", "memory": "32Mi"}


@pytest.fixture
def advertiser(real: Node) -> Iterator[CapacityAdvertiser]:
    kube = Kube(KubeConnection(kubeconfig=real.cluster.admin_kubeconfig))
    try:
        yield CapacityAdvertiser(kube, NODE)
    finally:
        kube.close()


def _gpus(real: Node) -> tuple[str | None, str | None]:
    """The node's (capacity, allocatable) of ``nvidia.com/gpu``."""
    status = real.core.read_node(NODE).status
    return (status.capacity or {}).get(GPU_RESOURCE), (status.allocatable or {}).get(GPU_RESOURCE)


def _heartbeat(real: Node) -> object:
    """When the kubelet last reported the node's status (its Ready condition's heartbeat)."""
    conditions = real.core.read_node(NODE).status.conditions or []
    return next(c.last_heartbeat_time for c in conditions if c.type == "Ready")


def _wait_gpus(real: Node, want: tuple[str, str]) -> None:
    waiting.wait_for(lambda: _gpus(real) == want, TIMEOUT, interval=0.2, what=f"{GPU_RESOURCE} {want}")


def test_the_advertised_gpus_are_allocatable_admit_pods_and_outlive_the_kubelets_reports(
    real: Node, advertiser: CapacityAdvertiser
) -> None:
    assert advertiser.advertise(8)
    _wait_gpus(real, ("8", "8"))  # allocatable: the kubelet's, from capacity
    beat = _heartbeat(real)  # a status report of the kubelet after it: the entry stays
    waiting.wait_for(lambda: _heartbeat(real) != beat, TIMEOUT, interval=0.5, what="a node status report")
    assert _gpus(real) == ("8", "8")
    assert not advertiser.advertise(8)  # nothing to write

    # no device plugin registered the name: the kubelet admits by the count and allocates nothing
    make_pod(real.core, "four-gpus", "busybox:1.36", ["true"], limits={GPU_RESOURCE: "4", **SMALL})
    assert wait_terminated(real.core, "four-gpus").exit_code == 0
    make_pod(real.core, "nine-gpus", "busybox:1.36", ["true"], limits={GPU_RESOURCE: "9", **SMALL})
    refused = waiting.wait_for(
        lambda: real.core.read_namespaced_pod("nine-gpus", "default").status.reason,
        TIMEOUT,
        interval=0.2,
        what="nine-gpus refused at admission",
    )
    assert refused == f"OutOf{GPU_RESOURCE}"

    # a restarted kubelet keeps it too: it zeroes extended resources only when it registers again
    # with an empty device-plugin folder, where its own registration socket lives (a wiped node)
    beat = _heartbeat(real)
    real.node.restart("kubelet")
    waiting.wait_for(lambda: _heartbeat(real) != beat, TIMEOUT, interval=0.5, what="a report of the new kubelet")
    assert _gpus(real) == ("8", "8")
