"""The warm-image DaemonSet kept by the controller, against the local cluster's kube-apiserver:
the chart's list and the admins' WarmImages in, one DaemonSet out, written only when it differs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc

from core import crds, image_refs
from core.kube import Kube, KubeConnection
from gpucaas.controller import registrars
from services.gpu_leases.settings import LeaseTimerSettings
from services.warm_images.controller import Reconciler
from services.warm_images.settings import WarmImageSettings
from tests.tenancy_controller.conftest import ControllerThread, controller_settings, install_crds, wait_for

NAMESPACE = "gpucaas-system"
PYTORCH = "nvcr.io/nvidia/pytorch:25.01-py3"


def _settings(**overrides: Any) -> WarmImageSettings:
    return WarmImageSettings(warm_images_namespace=NAMESPACE, warm_images_resync_s=1.0, **overrides)


@pytest.fixture
def kube(kubeconfig: Path, k8s: Any) -> Iterator[Kube]:
    kc.CoreV1Api(k8s).create_namespace({"metadata": {"name": NAMESPACE}})
    api = Kube(KubeConnection(kubeconfig=kubeconfig))
    try:
        yield api
    finally:
        api.close()


def _add(api: Kube, image: str, source: str = crds.WARM_IMAGE_FROM_API) -> str:
    name = image_refs.warm_image_name(image)
    body = {
        "apiVersion": crds.API_VERSION,
        "kind": "WarmImage",
        "metadata": {"name": name, "labels": {crds.LABEL_WARM_IMAGE_SOURCE: source}},
        "spec": {"image": image},
    }
    api.custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.WARMIMAGE_PLURAL, body)
    return name


def _delete(api: Kube, name: str) -> None:
    api.custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, crds.WARMIMAGE_PLURAL, name)


def _held(api: Kube, settings: WarmImageSettings) -> list[str] | None:
    """The images the DaemonSet holds, or None when there is none."""
    try:
        ds = kc.AppsV1Api(api.api_client).read_namespaced_daemon_set(settings.warm_images_daemonset, NAMESPACE)
    except kc.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return sorted(v.image.reference for v in ds.spec.template.spec.volumes)


def _generation(api: Kube, settings: WarmImageSettings) -> int:
    """The DaemonSet's metadata.generation: it moves with every write of its spec, not of its status."""
    ds = kc.AppsV1Api(api.api_client).read_namespaced_daemon_set(settings.warm_images_daemonset, NAMESPACE)
    return int(ds.metadata.generation)


def _sources(api: Kube) -> dict[str, str]:
    items = api.custom.list_cluster_custom_object(crds.GROUP, crds.VERSION, crds.WARMIMAGE_PLURAL)["items"]
    return {i["spec"]["image"]: i["metadata"]["labels"][crds.LABEL_WARM_IMAGE_SOURCE] for i in items}


def test_the_daemonset_follows_the_chart_list_and_the_admins_warm_images(kube: Kube) -> None:
    settings = _settings(warm_images_from_chart=["busybox:1.36"])
    r = Reconciler(kube, settings)

    assert r.reconcile(chart=True) == "created, holding 1 image(s)"
    assert _sources(kube) == {"busybox:1.36": crds.WARM_IMAGE_FROM_CHART}
    assert _held(kube, settings) == ["busybox:1.36"]

    # an admin's image joins it; the same image spelt another way does not add a volume
    _add(kube, PYTORCH)
    assert r.reconcile() == "updated, holding 2 image(s)"
    assert _held(kube, settings) == ["busybox:1.36", PYTORCH]
    generation = _generation(kube, settings)
    assert r.reconcile(chart=True) is None  # nothing differs: nothing written (the generation moves
    assert _generation(kube, settings) == generation  # with the spec; kube-controller-manager writes the status)

    # the chart's value drops its image (a helm upgrade restarts the controller with the new list)
    r2 = Reconciler(kube, _settings(warm_images_from_chart=[]))
    assert r2.reconcile(chart=True) == "updated, holding 1 image(s)"
    assert _sources(kube) == {PYTORCH: crds.WARM_IMAGE_FROM_API}
    assert _held(kube, settings) == [PYTORCH]

    # the last one goes: so does the DaemonSet
    _delete(kube, image_refs.warm_image_name(PYTORCH))
    assert r2.reconcile() == "deleted (no warm images)"
    assert _held(kube, settings) is None
    assert r2.reconcile(chart=True) is None


def test_an_admin_image_the_chart_then_lists_becomes_the_charts(kube: Kube) -> None:
    _add(kube, "docker.io/library/busybox:1.36")
    r = Reconciler(kube, _settings(warm_images_from_chart=["busybox:1.36"]))
    r.reconcile(chart=True)
    assert _sources(kube) == {"docker.io/library/busybox:1.36": crds.WARM_IMAGE_FROM_CHART}
    assert _held(kube, r.settings) == ["docker.io/library/busybox:1.36"]


def test_the_controller_process_keeps_the_daemonset(kube: Kube, kubeconfig: Path) -> None:
    """``gpucaas controller``'s operator, wired as gpucaas/controller.py wires it: a WarmImage
    added or deleted with kubectl reaches the DaemonSet through the watch."""
    from services.tenancy_controller import kube as tc_kube

    json_client = tc_kube.KubeClient(tc_kube.connection(kubeconfig))
    try:
        install_crds(json_client)  # Kopf's peering CRD, which the operator looks for
    finally:
        json_client.close()
    settings = _settings()
    ctl = ControllerThread(
        controller_settings(kubeconfig), registrars(LeaseTimerSettings(gpu_leases=False), settings)
    ).start()
    try:
        name = _add(kube, "busybox:1.36")
        wait_for(lambda: _held(kube, settings) == ["busybox:1.36"], what="the DaemonSet holding busybox:1.36")
        _delete(kube, name)
        wait_for(lambda: _held(kube, settings) is None, what="the DaemonSet gone with the last warm image")
    finally:
        ctl.stop()
