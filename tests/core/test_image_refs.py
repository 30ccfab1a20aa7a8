"""Image references normalised as the runtime records them, and matched against a Node's status.images."""

from __future__ import annotations

import pytest

from core import image_refs

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("reference", "full"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("index.docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("pytorch/pytorch:2.5.1-cuda12.4", "docker.io/pytorch/pytorch:2.5.1-cuda12.4"),
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/pytorch:25.01-py3"),
        ("registry.local:5000/team/app", "registry.local:5000/team/app:latest"),
        ("localhost/app:1", "localhost/app:1"),
        (f"busybox@{DIGEST}", f"docker.io/library/busybox@{DIGEST}"),
        (f"busybox:1.36@{DIGEST}", f"docker.io/library/busybox:1.36@{DIGEST}"),
    ],
)
def test_normalised_as_the_distribution_library_does(reference: str, full: str) -> None:
    assert image_refs.normalized(reference) == full


def _node(*names: str) -> dict:
    return {"status": {"images": [{"names": list(names), "sizeBytes": 1}]}}


def test_a_node_holds_an_image_under_any_spelling_of_its_name() -> None:
    node = image_refs.node_image_names(_node("docker.io/library/busybox:1.36", f"docker.io/library/busybox@{DIGEST}"))
    assert image_refs.held("busybox:1.36", node)
    assert image_refs.held("docker.io/library/busybox:1.36", node)
    assert image_refs.held(f"busybox@{DIGEST}", node)
    # a tag beside a digest: the digest decides, as it does for the runtime
    assert image_refs.held(f"busybox:9.9@{DIGEST}", node)
    assert not image_refs.held("busybox:1.37", node)
    assert not image_refs.held("busybox", node)  # :latest is another tag
    assert not image_refs.held(f"busybox@sha256:{'cd' * 32}", node)


def test_a_node_without_images_holds_none() -> None:
    assert image_refs.node_image_names({"status": {}}) == frozenset()
    assert not image_refs.held("busybox", image_refs.node_image_names({}))


def test_one_warm_image_name_per_image_however_spelt() -> None:
    name = image_refs.warm_image_name("busybox")
    assert name == image_refs.warm_image_name("docker.io/library/busybox:latest")
    assert name != image_refs.warm_image_name("busybox:1.36")
    assert name.startswith("wi-") and len(name) == 23
