"""The big tenant image's recipe: its size at full scale, and what a small copy of it holds."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from devtools.real_node import big_image

SMALL = 0.0002


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> big_image.Layout:
    return big_image.write_layout(tmp_path_factory.mktemp("big") / "oci", scale=SMALL)


def _read(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def _manifest(layout: Path) -> dict:
    index = json.loads((layout / "index.json").read_text())
    return json.loads(_read(layout, index["manifests"][0]["digest"]))


def test_at_full_scale_it_is_over_3_gb_in_several_layers() -> None:
    planned = sum(mib for files in big_image.LAYERS.values() for _, mib in files) * big_image.MIB
    assert planned > 3.5e9
    assert len(big_image.LAYERS) + 1 >= 4  # busybox's base and the CUDA, cuDNN/NCCL, torch and app layers
    # the files read at start are a small part of it
    read = sum(mib for files in big_image.LAYERS.values() for path, mib in files if path in big_image.READ_AT_START)
    assert read * big_image.MIB < 2e6


def test_the_layout_is_tagged_and_its_blobs_are_what_the_manifest_says(small: big_image.Layout) -> None:
    index = json.loads((small.path / "index.json").read_text())
    assert (
        index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "nvidia/pytorch:24.05-py3-shaped"
    )
    manifest = _manifest(small.path)
    config = json.loads(_read(small.path, manifest["config"]["digest"]))
    assert len(manifest["layers"]) == small.layers == 5
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True):
        blob = _read(small.path, layer["digest"])
        assert (len(blob), f"sha256:{hashlib.sha256(blob).hexdigest()}") == (layer["size"], layer["digest"])
        assert f"sha256:{hashlib.sha256(gzip.decompress(blob)).hexdigest()}" == diff_id
    assert small.image_bytes == sum(layer["size"] for layer in manifest["layers"]) + sum(
        len(_read(small.path, d)) for d in (manifest["config"]["digest"], index["manifests"][0]["digest"])
    )
    assert config["config"]["Entrypoint"] == list(big_image.ENTRYPOINT)


def test_its_content_is_incompressible_and_holds_the_files_read_at_start(small: big_image.Layout) -> None:
    names: set[str] = set()
    for layer in _manifest(small.path)["layers"][1:]:
        raw = gzip.decompress(_read(small.path, layer["digest"]))
        # gzip saves nothing but on the tar headers: random bytes, as compiled libraries nearly are
        assert len(raw) < 1e5 or layer["size"] > 0.9 * len(raw)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            names |= {m.name for m in tar.getmembers() if m.isfile()}
    assert set(big_image.READ_AT_START) <= names
    assert small.files == len(names) + 1  # and busybox


def test_the_build_is_reproducible(small: big_image.Layout, tmp_path: Path) -> None:
    again = big_image.write_layout(tmp_path / "oci", scale=SMALL, workers=1)
    assert (again.path / "index.json").read_text() == (small.path / "index.json").read_text()
