"""Where a GPU pod goes when nodes hold its image: kube-scheduler with the shipped configuration
(deploy/scheduler/kube-scheduler-config.yaml) and the extender, on kwok nodes.

The extender's filter keeps only the nodes whose NVLink partitions fit the pod best, so what
kube-scheduler's own scores then choose between (ImageLocality among them, from each Node's
status.images) are nodes equally good for the partition: a node holding the image wins a tie,
and never a better partition elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kwok_fleet.control_plane import ControlPlane, wait
from benchmarks.kwok_fleet.node_objects import NAMESPACE, fabric_status, node_name, node_object
from core import crds
from services.fabric.publisher import build_fabric_state

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
OTHER_IMAGE = "nvcr.io/nvidia/nemo:25.02"
NODES = 6
#: the nodes that hold each image (any of the six would do as well for a partition: a pod lands
#: on its image's node by chance one time in five or six)
HOLDER = node_name(1)
OTHER_HOLDER = node_name(4)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane("extender", nodes=NODES, folder=tmp_path_factory.mktemp("tie-break"), workers=2)
    try:
        cp.start()
        for i in range(NODES):
            name = node_name(i)
            cp.kube.request("POST", "/api/v1/nodes", body=node_object(i, gpus=True))
            cp.kube.request(
                "POST", f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.FABRICSTATE_PLURAL}", body=build_fabric_state(name)
            )
            cp.kube.request(
                "PATCH",
                f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.FABRICSTATE_PLURAL}/{name}/status",
                body={"status": fabric_status({})},
                content_type="application/merge-patch+json",
            )
        cp.start_scheduling()
        # each image on one node, as its kubelet reports it (15 GB images, as NGC's)
        for node, image in ((HOLDER, IMAGE), (OTHER_HOLDER, OTHER_IMAGE)):
            cp.kube.request(
                "PATCH",
                f"/api/v1/nodes/{node}/status",
                body={"status": {"images": [{"names": [image], "sizeBytes": 15 * 10**9}]}},
                content_type="application/merge-patch+json",
            )
        yield cp
    finally:
        cp.close()


def _pod(name: str, gpus: int, *, node: str | None = None, image: str = IMAGE) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def _placed(cp: ControlPlane, name: str) -> str:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"
    wait(lambda: cp.kube.request("GET", path)["spec"].get("nodeName"), 60, f"pod {name} bound")
    return str(cp.kube.request("GET", path)["spec"]["nodeName"])


def test_among_equally_good_partitions_the_node_holding_the_image_wins(plane: ControlPlane) -> None:
    # every node is empty: each gives a 1-GPU pod the same partition
    plane.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=_pod("tie", 1))
    assert _placed(plane, "tie") == HOLDER
    # an 8-GPU pod: the five nodes still empty are as good as each other
    plane.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=_pod("whole", 8, image=OTHER_IMAGE))
    assert _placed(plane, "whole") == OTHER_HOLDER


def test_a_better_partition_wins_over_the_image(plane: ControlPlane, tmp_path: Path) -> None:
    # two other nodes each run a 4-GPU pod: their free half is an exact fit for a 4-GPU pod,
    # while the node with the image (one GPU taken above) would split a free half of its own, and
    # the empty nodes a whole board
    for i in (0, 2):
        plane.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=_pod(f"half-{i}", 4, node=node_name(i)))
    wait(
        lambda: all(plane.extender_nodes()[node_name(i)] != 0xFF for i in (0, 2)),
        60,
        "the extender counting the two 4-GPU pods",
    )
    plane.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=_pod("exact", 4))
    assert _placed(plane, "exact") in {node_name(0), node_name(2)}
