"""The pure input rules: image references, tenancy names, env names."""

from __future__ import annotations

import pytest

from services.api.domain.validation import check_env_names, check_image, check_tenancy_name

GOOD_IMAGES = [
    "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8",
    "ubuntu",
    "ubuntu:24.04",
    "library/ubuntu:latest",
    "localhost:5000/team/app",
    "registry.example.com/a/b/c@sha256:" + "0" * 64,
    "ghcr.io/org/img:v1.2@sha256:" + "f" * 64,
    "docker://nvcr.io/nvidia/cuda:12.5.0-base",
]
BAD_IMAGES = ["", "UPPER/case", "has space", "img:", "img:tag:tag", "a//b", "-lead", "img@sha256:short", "http://x/y"]


@pytest.mark.parametrize("image", GOOD_IMAGES)
def test_valid_images(image: str) -> None:
    assert check_image(image)


@pytest.mark.parametrize("image", BAD_IMAGES)
def test_invalid_images(image: str) -> None:
    with pytest.raises(ValueError, match="not a valid image reference"):
        check_image(image)


@pytest.mark.parametrize("name", ["landon", "a", "team-1", "0abc", "x" * 56])
def test_valid_tenancy_names(name: str) -> None:
    assert check_tenancy_name(name) == name


@pytest.mark.parametrize("name", ["", "Landon", "-a", "a-", "a_b", "a.b", "x" * 57])
def test_invalid_tenancy_names(name: str) -> None:
    with pytest.raises(ValueError, match="DNS label"):
        check_tenancy_name(name)


def test_env_names() -> None:
    assert check_env_names({"A": "1", "_x9": "2"})
    with pytest.raises(ValueError, match="'1BAD'"):
        check_env_names({"OK": "1", "1BAD": "2"})
