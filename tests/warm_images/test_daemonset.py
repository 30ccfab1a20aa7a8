"""The warm-image DaemonSet built from the WarmImages (services/warm_images/daemonset.py)."""

from __future__ import annotations

from services.warm_images import daemonset
from services.warm_images.settings import WarmImageSettings

SETTINGS = WarmImageSettings(
    warm_images_namespace="gpucaas-system",
    warm_images_tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    warm_images_pull_secrets=["mirror-login"],
)


def _warm(image: str, *, deleting: bool = False) -> dict:
    meta: dict = {"name": f"wi-{abs(hash(image))}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return {"metadata": meta, "spec": {"image": image}}


def test_one_image_volume_per_image_however_often_it_is_listed() -> None:
    images = daemonset.images_of(
        [_warm("nvcr.io/nvidia/pytorch:25.01-py3"), _warm("busybox"), _warm("docker.io/library/busybox:latest")]
    )
    assert len(images) == 2
    ds = daemonset.desired(images, SETTINGS)
    assert ds is not None
    spec = ds["spec"]["template"]["spec"]
    refs = sorted(v["image"]["reference"] for v in spec["volumes"])
    assert refs == sorted(images)
    assert all(v["image"]["pullPolicy"] == "IfNotPresent" for v in spec["volumes"])
    # every volume is mounted, read-only, in the one container, which holds them and runs nothing of theirs
    (hold,) = spec["containers"]
    assert hold["image"] == SETTINGS.warm_images_holder_image and "command" not in hold
    assert {m["name"] for m in hold["volumeMounts"]} == {v["name"] for v in spec["volumes"]}
    assert all(m["readOnly"] for m in hold["volumeMounts"])


def test_the_pods_go_to_the_gpu_nodes_with_nothing_to_spare() -> None:
    ds = daemonset.desired(["busybox:1.36"], SETTINGS)
    assert ds is not None and ds["metadata"]["namespace"] == "gpucaas-system"
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpucaas.dev/gpu-node": "true"}
    assert spec["tolerations"] == SETTINGS.warm_images_tolerations
    assert spec["imagePullSecrets"] == [{"name": "mirror-login"}]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    hold = spec["containers"][0]
    assert hold["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert hold["securityContext"]["allowPrivilegeEscalation"] is False
    # a new list replaces every node's pod at once: they serve nothing
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "100%"


def test_no_images_no_daemonset_and_deleted_ones_do_not_count() -> None:
    assert daemonset.desired([], SETTINGS) is None
    assert daemonset.images_of([_warm("busybox", deleting=True)]) == []


def test_a_volume_keeps_its_name_when_other_images_come_and_go() -> None:
    one = daemonset.desired(["busybox:1.36"], SETTINGS)
    two = daemonset.desired(["alpine:3.20", "busybox:1.36"], SETTINGS)
    assert one is not None and two is not None
    names = lambda ds: {v["image"]["reference"]: v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]}  # noqa: E731
    assert names(one)["busybox:1.36"] == names(two)["busybox:1.36"]


def test_the_template_digest_says_whether_a_write_is_needed() -> None:
    wanted = daemonset.desired(["busybox:1.36"], SETTINGS)
    same = daemonset.desired(["busybox:1.36"], SETTINGS)
    other = daemonset.desired(["busybox:1.37"], SETTINGS)
    assert daemonset.up_to_date(same, wanted)
    assert not daemonset.up_to_date(other, wanted)
    assert not daemonset.up_to_date(None, wanted)
    assert not daemonset.up_to_date(wanted, None)
    assert daemonset.up_to_date(None, None)
