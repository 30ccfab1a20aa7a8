"""A tenant image of a real GPU cloud's size, built here: shaped like NVIDIA's PyTorch container.

Tenants run CUDA and PyTorch images of 5-20 GB; every other image here is busybox. This one
has the layers and files such an image has, 3.6 GB of them, with incompressible content: each file
is bytes from a PRNG seeded by its path, so gzip saves nothing (as with the compiled CUDA
libraries that make up most of a real image), and the build is reproducible (same bytes, same
digests, every time and on every machine). What it holds (:data:`LAYERS`):

* ``base``: busybox-static, as in the sandbox's other images (``sh``, ``cat``, ``wc``);
* ``cuda``: the CUDA 12 runtime libraries under ``/usr/local/cuda-12.4/lib64``;
* ``cudnn-nccl``: cuDNN 9 and NCCL under ``/usr/lib/x86_64-linux-gnu``;
* ``torch``: PyTorch's shared libraries and 3,000 small Python files under
  ``/usr/local/lib/python3.10/dist-packages/torch``;
* ``app``: the tenant's code and configuration under ``/workspace/app``.

Its entry point reads a few small files (the CUDA runtime, PyTorch's ``__init__.py``, the app's
configuration: about 0.02 % of the image, as a program's start touches little of what its
image holds), prints one line starting :data:`READY`, and exits. Nothing CUDA runs: the
files are random bytes of realistic names and sizes, and the image's label says so.

The layout is written once into a cache outside the work tree (:func:`cached_layout`);
``scale`` shrinks every file for tests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import tarfile
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from devtools.real_node import images

#: the reference tenants use: a registry name containerd maps to the far registry (:mod:`.slow_link`)
REFERENCE = "far.gpucaas.test/nvidia/pytorch:24.05-py3-shaped"
#: its eStargz copy (:func:`add_estargz`), which a node with lazy pulling mounts instead of unpacking
LAZY_REFERENCE = f"{REFERENCE}{images.ESTARGZ_SUFFIX}"
#: the first word of the line the entry point prints once its files are read
READY = "ready"
#: bump when the layers change: the cache is keyed by it
VERSION = "2"
MIB = 1 << 20
CUDA = "usr/local/cuda-12.4/lib64"
SYSLIB = "usr/lib/x86_64-linux-gnu"
TORCH = "usr/local/lib/python3.10/dist-packages/torch"
APP = "workspace/app"
#: the small Python files of the torch layer, and their sizes (2-16 KiB)
PY_FILES = 3000

#: layer -> (path, size in MiB) of its large files (the ``torch`` layer adds :data:`PY_FILES`)
LAYERS: dict[str, tuple[tuple[str, float], ...]] = {
    "cuda": (
        (f"{CUDA}/libcublasLt.so.12", 480),
        (f"{CUDA}/libcublas.so.12", 100),
        (f"{CUDA}/libcusparse.so.12", 250),
        (f"{CUDA}/libcufft.so.11", 270),
        (f"{CUDA}/libcusolver.so.11", 140),
        (f"{CUDA}/libcurand.so.10", 90),
        (f"{CUDA}/libnvrtc.so.12", 55),
        (f"{CUDA}/libnvJitLink.so.12", 45),
        (f"{CUDA}/libcudart.so.12", 0.7),
    ),
    "cudnn-nccl": (
        (f"{SYSLIB}/libcudnn_engines_precompiled.so.9", 560),
        (f"{SYSLIB}/libcudnn_adv.so.9", 240),
        (f"{SYSLIB}/libcudnn_ops.so.9", 100),
        (f"{SYSLIB}/libcudnn_graph.so.9", 15),
        (f"{SYSLIB}/libcudnn.so.9", 0.1),
        (f"{SYSLIB}/libnccl.so.2", 220),
    ),
    "torch": (
        (f"{TORCH}/lib/libtorch_cuda.so", 520),
        (f"{TORCH}/lib/libtorch_cpu.so", 330),
        (f"{TORCH}/lib/libc10_cuda.so", 1.2),
        (f"{TORCH}/lib/libc10.so", 1.1),
        (f"{TORCH}/__init__.py", 0.09),
        (f"{TORCH}/version.py", 0.001),
    ),
    "app": (
        (f"{APP}/config.json", 0.002),
        (f"{APP}/train.py", 0.02),
    ),
}
#: what the entry point reads before it says it is ready
READ_AT_START = (f"{CUDA}/libcudart.so.12", f"{TORCH}/__init__.py", f"{TORCH}/version.py", f"{APP}/config.json")
ENTRYPOINT = (
    "sh",
    "-c",
    f'n=$(cat {" ".join("/" + p for p in READ_AT_START)} | wc -c); echo "{READY}: read $n bytes at start"',
)
ENV = (images.PATH_ENV, "CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES=all", "PYTHONPATH=/workspace/app")


@dataclass(frozen=True)
class Layout:
    """A written OCI layout holding the image, and its figures."""

    path: Path
    #: what a pull transfers: the compressed layers, the config and the manifest
    image_bytes: int
    layers: int
    files: int
    #: the eStargz copy's, once there is one (:func:`add_estargz`)
    estargz_bytes: int = 0


def _files(layer: str, scale: float) -> list[tuple[str, int]]:
    """The layer's regular files, as (path, bytes)."""
    out = [(path, max(1, int(mib * MIB * scale))) for path, mib in LAYERS[layer]]
    if layer == "torch":
        rng = random.Random("torch-py")
        for i in range(max(1, int(PY_FILES * min(1.0, scale * 100)))):
            package = ("nn", "cuda", "distributed", "_inductor", "utils", "ao", "fx", "optim")[i % 8]
            out.append((f"{TORCH}/{package}/module_{i:04d}.py", rng.randint(2048, 16384)))
    return sorted(out)


def _dirs(paths: list[str]) -> list[str]:
    found = {str(p) for path in paths for p in Path(path).parents if str(p) != "."}
    return sorted(found)


class _RandomFile:
    """``size`` bytes from a PRNG seeded by ``seed``, read in order (what tarfile copies)."""

    def __init__(self, seed: str, size: int) -> None:
        self.rng = random.Random(seed)
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return self.rng.randbytes(n) if n else b""


class _LayerWriter(io.RawIOBase):
    """Takes the uncompressed tar stream: hashes it (the diff ID), gzips it into ``out`` and
    hashes that (the blob's digest)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.raw = hashlib.sha256()
        self.packed = hashlib.sha256()
        self.size = 0
        # gzip at level 1 with no name or time in its header: the same bytes each build
        self.gz = zlib.compressobj(1, zlib.DEFLATED, 31)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)
        self.raw.update(data)
        self._out(self.gz.compress(data))
        return len(data)

    def _out(self, chunk: bytes) -> None:
        if chunk:
            self.packed.update(chunk)
            self.out.write(chunk)
            self.size += len(chunk)

    def finish(self) -> None:
        self._out(self.gz.flush())


def _tar_entries(layer: str, scale: float) -> Iterator[tuple[tarfile.TarInfo, _RandomFile | None]]:
    files = _files(layer, scale)
    for d in _dirs([p for p, _ in files]):
        info = tarfile.TarInfo(d)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
        yield info, None
    for path, size in files:
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.mtime = size, 0o755 if ".so" in path else 0o644, 0
        yield info, _RandomFile(path, size)


def _write_layer(blobs: Path, layer: str, scale: float) -> dict[str, Any]:
    """One layer's blob in ``blobs``: its descriptor, diff ID and file count."""
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blobs / f".{layer}.partial"
    with partial.open("wb") as out:
        writer = _LayerWriter(out)
        if layer == "base":
            writer.write(images.busybox_layer())
            count = 1
        else:
            with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                count = 0
                for info, data in _tar_entries(layer, scale):
                    tar.addfile(info, data)
                    count += info.isfile()
        writer.finish()
    digest = writer.packed.hexdigest()
    partial.rename(blobs / digest)
    return {
        "descriptor": {
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": f"sha256:{digest}",
            "size": writer.size,
        },
        "diff_id": f"sha256:{writer.raw.hexdigest()}",
        "files": count,
    }


def write_layout(path: Path, scale: float = 1.0, workers: int = 2) -> Layout:
    """The image as an OCI layout at ``path`` (replaced), tagged :data:`REFERENCE`'s repository:tag;
    the layers are written by ``workers`` processes (gzip is most of the time)."""
    if path.exists():
        shutil.rmtree(path)
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (path / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    names = ["base", *LAYERS]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        layers = list(pool.map(_write_layer, [blobs] * len(names), names, [scale] * len(names)))
    _, repository, tag = images.split(REFERENCE)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": list(ENV),
            "Entrypoint": list(ENTRYPOINT),
            "WorkingDir": f"/{APP}",
            "Labels": {
                "dev.gpucaas.stand-in": "true",
                "dev.gpucaas.big-image": "random bytes in a PyTorch image's shape: nothing in it runs but sh",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [layer["diff_id"] for layer in layers]},
    }
    digest, size = images.manifest_blob(path, config, [layer["descriptor"] for layer in layers])
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "annotations": {"org.opencontainers.image.ref.name": f"{repository}:{tag}"},
            }
        ],
    }
    (path / "index.json").write_text(json.dumps(index))
    return Layout(
        path,
        image_bytes=tagged_bytes(path, REFERENCE),
        layers=len(layers),
        files=sum(layer["files"] for layer in layers),
    )


def manifest_of(layout: Path, reference: str) -> tuple[dict[str, Any], int]:
    """The manifest of the image tagged as ``reference``'s repository:tag, and its size."""
    _, repository, tag = images.split(reference)
    index = json.loads((layout / "index.json").read_text())
    name = "org.opencontainers.image.ref.name"
    entry = next(m for m in index["manifests"] if m["annotations"][name] == f"{repository}:{tag}")
    raw = (layout / "blobs" / "sha256" / entry["digest"].removeprefix("sha256:")).read_bytes()
    return json.loads(raw), len(raw)


def tagged_bytes(layout: Path, reference: str) -> int:
    """What pulling the image tagged as ``reference``'s repository:tag transfers."""
    manifest, size = manifest_of(layout, reference)
    return int(size + manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"]))


def add_estargz(layout: Layout, bin_dir: Path) -> Layout:
    """The layout with the image's eStargz copy tagged :data:`LAZY_REFERENCE`'s repository:tag
    (:func:`images.estargz_copy`), the files of :data:`READ_AT_START` first in their layers."""
    _, repository, tag = images.split(REFERENCE)
    images.estargz_copy(layout.path, images.Image(repository, tag), bin_dir, READ_AT_START)
    return replace(layout, estargz_bytes=tagged_bytes(layout.path, LAZY_REFERENCE))


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpucaas" / "big-image" / VERSION


def cached_layout(bin_dir: Path) -> Layout:
    """The full-size layout with its eStargz copy (``bin_dir``: the converter's folder), written
    into :func:`cache_dir` the first time (a minute or two on two cores) and read back after;
    older versions' folders are removed."""
    folder = cache_dir()
    figures = folder / "layout.json"
    if figures.exists():
        return Layout(path=folder / "oci", **json.loads(figures.read_text()))
    for old in folder.parent.glob("*"):
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)
    layout = add_estargz(write_layout(folder / "oci"), bin_dir)
    saved = {k: v for k, v in asdict(layout).items() if k != "path"}
    figures.write_text(json.dumps(saved))
    return layout
