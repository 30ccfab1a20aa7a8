"""Warm images on a real node: the controller's DaemonSet (services/warm_images) runs there through
kube-controller-manager and kube-scheduler, its pod's image volumes make the kubelet pull the
image through containerd, the kubelet reports it in the Node's status.images, and a container of
that image then starts without fetching a layer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from core import crds, image_refs
from core.kube import Kube, KubeConnection
from devtools import waiting
from devtools.local_cluster.objects import create_all
from devtools.real_node import big_image, images
from services.warm_images.controller import Reconciler
from services.warm_images.settings import WarmImageSettings

from .conftest import NODE, TIMEOUT, Node, ctr, make_pod, started_node, wait_terminated

NAMESPACE = "gpucaas-system"
#: the small copy of the big image, behind the 1 Gbit/s link: a CUDA-shaped image the node lacks
WARM = big_image.REFERENCE


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with started_node(tmp_path_factory.mktemp("warm-node"), run_scheduler=True) as started:
        create_all(
            started.cluster.admin_kubeconfig,
            [
                crds.crd_manifest(crds.WARMIMAGE_PLURAL),
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            ],
        )
        started.core.patch_node(NODE, {"metadata": {"labels": {"gpucaas.dev/gpu-node": "true"}}})
        yield started


@pytest.fixture
def reconciler(node: Node) -> Iterator[Reconciler]:
    api = Kube(KubeConnection(kubeconfig=node.cluster.admin_kubeconfig))
    settings = WarmImageSettings(warm_images_namespace=NAMESPACE, warm_images_holder_image=images.PAUSE)
    try:
        yield Reconciler(api, settings)
    finally:
        api.close()


def _warm_image(api: Kube, image: str) -> str:
    name = image_refs.warm_image_name(image)
    body = {
        "apiVersion": crds.API_VERSION,
        "kind": "WarmImage",
        "metadata": {"name": name, "labels": {crds.LABEL_WARM_IMAGE_SOURCE: crds.WARM_IMAGE_FROM_API}},
        "spec": {"image": image},
    }
    api.custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.WARMIMAGE_PLURAL, body)
    return name


def _holder_pods(core: client.CoreV1Api) -> list[Any]:
    return core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/component=warm-images").items


def _held(core: client.CoreV1Api, image: str) -> bool:
    node = core.api_client.sanitize_for_serialization(core.read_node(NODE))
    return image_refs.held(image, image_refs.node_image_names(node))


def _layers(node: Node) -> set[str]:
    """The image's layers but its base: busybox's tree, the pause image's too, so already
    unpacked on the node (containerd then fetches no blob for it)."""
    manifest, _ = big_image.manifest_of(node.image_layout.path, WARM)
    return {layer["digest"] for layer in manifest["layers"][1:]}


def test_a_warm_image_is_pulled_held_and_then_skips_the_pull(node: Node, reconciler: Reconciler) -> None:
    core = node.core
    assert not _held(core, WARM)
    assert not _layers(node) & set(ctr(node, "content", "ls", "-q"))
    name = _warm_image(reconciler.api, WARM)
    assert reconciler.reconcile() == "created, holding 1 image(s)"

    # kube-controller-manager makes the pod, kube-scheduler places it, the kubelet pulls the volume
    def running() -> bool:
        pods = _holder_pods(core)
        return len(pods) == 1 and pods[0].spec.node_name == NODE and pods[0].status.phase == "Running"

    waiting.wait_for(running, TIMEOUT, interval=0.5, what="the warm-image pod Running on the node")
    waiting.wait_for(lambda: _held(core, WARM), TIMEOUT, interval=0.5, what=f"{WARM} in the Node's status.images")
    assert _layers(node) <= set(ctr(node, "content", "ls", "-q"))

    # a container of the image, pulled as the API's pods pull (Always: the registry still checks
    # who pulls), fetches the manifest and no layer: every blob it needs is already there
    before = set(ctr(node, "content", "ls", "-q"))
    make_pod(core, "tenant", WARM, pull="Always")
    assert wait_terminated(core, "tenant").exit_code == 0
    assert core.read_namespaced_pod_log("tenant", "default").startswith(f"{big_image.READY}: read ")
    assert set(ctr(node, "content", "ls", "-q")) == before

    # off the list: the DaemonSet goes, the node keeps the image until its garbage collection needs the room
    reconciler.api.custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, crds.WARMIMAGE_PLURAL, name)
    assert reconciler.reconcile() == "deleted (no warm images)"
    waiting.wait_for(lambda: not _holder_pods(core), TIMEOUT, interval=0.5, what="the warm-image pod gone")
    assert _held(core, WARM)
