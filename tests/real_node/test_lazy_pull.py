"""Lazy pulling on a real node (the stargz snapshotter as containerd's remote snapshotter,
devtools/real_node/lazy_pull.py): an eStargz image runs from layers mounted over FUSE and not
downloaded, a plain image is still pulled whole, and a private image's lazily fetched layers
need the pull's own credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.real_node import big_image, images
from devtools.real_node.registry import PRIVATE_REGISTRY, PRIVATE_USER

from .conftest import Node, ctr, make_pod, make_pull_secret, started_node, wait_terminated, wait_waiting_reason

#: the eStargz copy, in the registry that asks for credentials
PRIVATE_LAZY = f"{PRIVATE_REGISTRY}/{':'.join(images.split(big_image.LAZY_REFERENCE)[1:])}"


@pytest.fixture(scope="module")
def lazy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with started_node(tmp_path_factory.mktemp("lazy-node"), lazy_pull=True) as node:
        _, repository, tag = images.split(big_image.LAZY_REFERENCE)
        image = images.Image(repository, tag)
        creds = f"{PRIVATE_USER}:{node.registries.password}"
        images.push(node.image_layout.path, image, node.registries.private.address, creds=creds)
        yield node


def _content(node: Node) -> set[str]:
    """The blobs containerd's content store holds."""
    return set(ctr(node, "content", "ls", "-q"))


def _layers(node: Node, reference: str) -> set[str]:
    """The image's layers but its base: busybox's tree, the pause image's too, so already
    unpacked on the node (containerd then fetches no blob for it, lazily or not)."""
    manifest, _ = big_image.manifest_of(node.image_layout.path, reference)
    return {layer["digest"] for layer in manifest["layers"][1:]}


def _fuse_mounts(node: Node) -> list[str]:
    """The FUSE mounts in the node's mount namespace (where containerd and the snapshotter run)."""
    pid = node.node.pid("stargz")
    assert pid is not None
    lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    return [line for line in lines if " - fuse" in line]


def _ran_ready(node: Node, pod: str) -> None:
    assert wait_terminated(node.core, pod).exit_code == 0
    assert node.core.read_namespaced_pod_log(pod, "default").startswith(f"{big_image.READY}: read ")


def test_an_estargz_image_runs_from_mounted_layers_it_never_downloaded(lazy: Node) -> None:
    make_pod(lazy.core, "esgz", big_image.LAZY_REFERENCE, pull="Always")
    _ran_ready(lazy, "esgz")
    # containerd fetched the manifest and config only: no layer is in its content store
    assert not _layers(lazy, big_image.LAZY_REFERENCE) & _content(lazy)
    # each layer is a FUSE mount of the snapshotter's, under its root
    mounts = _fuse_mounts(lazy)
    assert len(mounts) >= len(_layers(lazy, big_image.LAZY_REFERENCE))
    assert all(str(lazy.node.folder / "stargz" / "root") in line for line in mounts)


def test_a_plain_image_is_still_pulled_whole(lazy: Node) -> None:
    make_pod(lazy.core, "plain", big_image.REFERENCE, pull="Always")
    _ran_ready(lazy, "plain")
    assert _layers(lazy, big_image.REFERENCE) <= _content(lazy)


def test_a_lazily_pulled_private_image_needs_the_pulls_own_credentials(lazy: Node) -> None:
    make_pod(lazy.core, "lazy-no-creds", PRIVATE_LAZY, pull="Always")
    assert wait_waiting_reason(lazy.core, "lazy-no-creds", ("ErrImagePull", "ImagePullBackOff"))
    make_pull_secret(lazy.core, "lazy-pull", lazy.registries)
    make_pod(lazy.core, "lazy-creds", PRIVATE_LAZY, pull="Always", pull_secret="lazy-pull")
    _ran_ready(lazy, "lazy-creds")
    # the layers are on the node now, mounted: a pod without the credentials still gets nothing
    # (the API's pods always pull, so the registry asks for them each time)
    make_pod(lazy.core, "lazy-no-creds-after", PRIVATE_LAZY, pull="Always")
    assert wait_waiting_reason(lazy.core, "lazy-no-creds-after", ("ErrImagePull", "ImagePullBackOff"))
