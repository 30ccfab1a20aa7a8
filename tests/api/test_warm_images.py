"""Warm images through the admin API (``/v1/admin/warm-images``) and in ``/v1/admin/nodes``, against
the local cluster's kube-apiserver: WarmImage objects in, the kubelets' ``status.images`` out."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as kc

from core import crds, image_refs
from tests.api.harness import ApiServer

PYTORCH = "nvcr.io/nvidia/pytorch:25.01-py3"
BUSYBOX_DIGEST = "sha256:" + "ab" * 32


def _node(core: kc.CoreV1Api, custom: kc.CustomObjectsApi, name: str, images: list[list[str]]) -> None:
    core.create_node({"metadata": {"name": name}})
    core.patch_node_status(name, {"status": {"images": [{"names": n, "sizeBytes": 10**9} for n in images]}})
    custom.create_cluster_custom_object(
        crds.GROUP,
        crds.VERSION,
        crds.FABRICSTATE_PLURAL,
        {"apiVersion": crds.API_VERSION, "kind": "FabricState", "metadata": {"name": name}, "spec": {"node": name}},
    )


@pytest.fixture
def nodes(k8s: Any) -> None:
    """Two GPU nodes (each with a FabricState) and a node that is not one."""
    core, custom = kc.CoreV1Api(k8s), kc.CustomObjectsApi(k8s)
    _node(
        core,
        custom,
        "gpu-a",
        [[PYTORCH], ["docker.io/library/busybox:1.36", f"docker.io/library/busybox@{BUSYBOX_DIGEST}"]],
    )
    _node(core, custom, "gpu-b", [["docker.io/library/busybox:1.36"]])
    core.create_node({"metadata": {"name": "cpu-only"}})


@pytest.fixture
def admin(kubeconfig: Path, serve: Callable[..., ApiServer], sqlite_url: str, nodes: None) -> Iterator[httpx.Client]:
    api = serve(sqlite_url, kubeconfig, image_registry_allowlist=["registry.internal:5000"])
    with api.client() as client:
        yield client


def test_an_admin_adds_lists_and_removes_a_warm_image(admin: httpx.Client, k8s: Any) -> None:
    r = admin.post("/v1/admin/warm-images", json={"image": PYTORCH})
    assert r.status_code == 201, r.text
    row = r.json()
    assert row == {
        "id": image_refs.warm_image_name(PYTORCH),
        "image": PYTORCH,
        "source": "api",
        "created_at": row["created_at"],
        "nodes_holding": 1,
        "nodes_total": 2,
        "missing_on": ["gpu-b"],
    }
    # it is a WarmImage object, the controller's input
    obj = kc.CustomObjectsApi(k8s).get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.WARMIMAGE_PLURAL, row["id"])
    assert obj["spec"]["image"] == PYTORCH

    admin.post("/v1/admin/warm-images", json={"image": "busybox:1.36"}).raise_for_status()
    listed = admin.get("/v1/admin/warm-images").json()
    assert listed["count"] == 2
    assert [(w["image"], w["nodes_holding"], w["missing_on"]) for w in listed["data"]] == [
        ("busybox:1.36", 2, []),
        (PYTORCH, 1, ["gpu-b"]),
    ]

    assert admin.delete(f"/v1/admin/warm-images/{row['id']}").status_code == 204
    assert [w["image"] for w in admin.get("/v1/admin/warm-images").json()["data"]] == ["busybox:1.36"]
    r = admin.delete(f"/v1/admin/warm-images/{row['id']}")
    assert r.status_code == 404 and row["id"] in r.json()["detail"]


def test_adding_an_image_already_warm_under_another_spelling_changes_nothing(admin: httpx.Client) -> None:
    first = admin.post("/v1/admin/warm-images", json={"image": "busybox"})
    again = admin.post("/v1/admin/warm-images", json={"image": "docker.io/library/busybox:latest"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["image"] == "busybox"
    assert admin.get("/v1/admin/warm-images").json()["count"] == 1


def test_nodes_say_which_warm_images_they_hold(admin: httpx.Client) -> None:
    for image in (PYTORCH, f"busybox@{BUSYBOX_DIGEST}"):
        admin.post("/v1/admin/warm-images", json={"image": image}).raise_for_status()
    rows = {n["name"]: n["warm_images"] for n in admin.get("/v1/admin/nodes").json()["data"]}
    assert rows["gpu-a"] == [
        {"image": f"busybox@{BUSYBOX_DIGEST}", "held": True},
        {"image": PYTORCH, "held": True},
    ]
    assert rows["gpu-b"] == [
        {"image": f"busybox@{BUSYBOX_DIGEST}", "held": False},
        {"image": PYTORCH, "held": False},
    ]
    assert rows["cpu-only"] == []  # not a GPU node: nothing is kept warm there


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"image": "Not An Image"}, "image"),
        ({"image": ""}, "image"),
        ({}, "image"),
        ({"image": "busybox", "nodes": ["gpu-a"]}, "nodes"),
        ({"image": "10.0.0.5:5000/app:1"}, "not a public address"),
        ({"image": "registry.gpucaas-system.svc:5000/app:1"}, "internal or cluster service name"),
    ],
)
def test_a_bad_image_is_refused_naming_the_field(admin: httpx.Client, body: dict, names: str) -> None:
    r = admin.post("/v1/admin/warm-images", json=body)
    assert r.status_code == 422, r.text
    assert names in r.json()["detail"]
    assert admin.get("/v1/admin/warm-images").json()["count"] == 0


def test_an_allow_listed_registry_may_be_warmed(admin: httpx.Client) -> None:
    r = admin.post("/v1/admin/warm-images", json={"image": "registry.internal:5000/team/app:1"})
    assert r.status_code == 201, r.text


def test_the_charts_warm_images_are_removed_only_through_the_chart(admin: httpx.Client, k8s: Any) -> None:
    name = image_refs.warm_image_name("busybox:1.36")
    kc.CustomObjectsApi(k8s).create_cluster_custom_object(
        crds.GROUP,
        crds.VERSION,
        crds.WARMIMAGE_PLURAL,
        {
            "apiVersion": crds.API_VERSION,
            "kind": "WarmImage",
            "metadata": {"name": name, "labels": {crds.LABEL_WARM_IMAGE_SOURCE: crds.WARM_IMAGE_FROM_CHART}},
            "spec": {"image": "busybox:1.36"},
        },
    )
    (row,) = admin.get("/v1/admin/warm-images").json()["data"]
    assert row["source"] == "chart"
    r = admin.delete(f"/v1/admin/warm-images/{name}")
    assert r.status_code == 409
    assert "warmImages" in r.json()["detail"] and "helm upgrade" in r.json()["detail"]
    assert admin.get("/v1/admin/warm-images").json()["count"] == 1


def test_there_is_a_most_warm_images(admin: httpx.Client, k8s: Any) -> None:
    custom = kc.CustomObjectsApi(k8s)
    for i in range(32):
        image = f"nvcr.io/nvidia/app{i}:1"
        custom.create_cluster_custom_object(
            crds.GROUP,
            crds.VERSION,
            crds.WARMIMAGE_PLURAL,
            {
                "apiVersion": crds.API_VERSION,
                "kind": "WarmImage",
                "metadata": {"name": image_refs.warm_image_name(image)},
                "spec": {"image": image},
            },
        )
    r = admin.post("/v1/admin/warm-images", json={"image": PYTORCH})
    assert r.status_code == 409 and "remove one first" in r.json()["detail"]
    # one already there is no new one
    assert admin.post("/v1/admin/warm-images", json={"image": "nvcr.io/nvidia/app0:1"}).status_code == 200


def test_a_malformed_id_is_refused_and_an_unknown_one_not_found(admin: httpx.Client) -> None:
    assert admin.delete("/v1/admin/warm-images/not-an-id").status_code == 422
    assert admin.delete(f"/v1/admin/warm-images/wi-{'0' * 20}").status_code == 404
