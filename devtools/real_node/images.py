"""The container images a node on this machine runs, built here: nothing is pulled from the internet.

Each image is one layer made from Debian's ``busybox-static`` (``/bin/busybox`` and a link
per applet) written as an OCI image layout, then pushed to the local registry with
``skopeo copy``. The images:

* ``busybox:1.36`` (as ``docker.io/library/busybox:1.36``): the public test image;
* the pause image the CRI runs each pod sandbox with (``registry.k8s.io/pause``): a shell
  that waits for its stop signal;
* the design's CUDA sample under its own name, a stand-in that says so and lists the
  ``/dev/vfio`` devices it was given (no CUDA here: no GPU);
* a private image, pushed only to the registry that asks for credentials.

Layers are built reproducibly (fixed times, owners and order), so a rebuilt image has the
same digest and a node that cached it does not pull it again.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUSYBOX = Path("/bin/busybox")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE = "registry.k8s.io/pause:3.10.2"
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36"
CUDA_SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"
#: the stand-in's entrypoint: it says what it is, lists its devices, then runs its arguments if any
STAND_IN_SCRIPT = (
    'echo "gpucaas sandbox: a stand-in for {image}: no CUDA ran (this machine has no GPU)"; '
    'echo "the /dev/vfio devices this container was given:"; ls /dev/vfio; '
    '[ "$#" -eq 0 ] || exec "$@"'
)


@dataclass(frozen=True)
class Image:
    """What one image is: its name (repository:tag, without the registry) and its config."""

    repository: str
    tag: str
    cmd: tuple[str, ...] = ("sh",)
    entrypoint: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def named(cls, reference: str, **config: Any) -> Image:
        """The image a fully named reference (``registry/repository:tag``) names."""
        _, repository, tag = split(reference)
        return cls(repository, tag, **config)


def _applets() -> list[str]:
    out = subprocess.run([str(BUSYBOX), "--list-full"], check=True, capture_output=True, text=True).stdout
    return sorted({line.strip() for line in out.splitlines() if line.strip() and line.strip() != "bin/busybox"})


def busybox_layer() -> bytes:
    """An uncompressed tar of the busybox tree (deterministic)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(info)

        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "root", "home"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
        for applet in _applets():
            link = tarfile.TarInfo(applet)
            link.type, link.linkname, link.mode, link.mtime = tarfile.SYMTYPE, "/bin/busybox", 0o777, 0
            tar.addfile(link)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"),
            ("etc/group", "root:x:0:\nnobody:x:65534:\n"),
        ):
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(raw), 0o644, 0
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(data)
    return f"sha256:{digest}", len(data)


def manifest_blob(layout: Path, config: dict[str, Any], layers: list[dict[str, Any]]) -> tuple[str, int]:
    """The image's config and manifest written as blobs of the layout: the manifest's digest and size."""
    config_digest, config_size = blob(layout, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": layers,
    }
    return blob(layout, json.dumps(manifest, sort_keys=True).encode())


def write_layout(layout: Path, images: list[Image]) -> None:
    """An OCI image layout holding ``images`` (one shared busybox layer), tagged by ``repository:tag``."""
    if layout.exists():
        shutil.rmtree(layout)
    layout.mkdir(parents=True)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    raw = busybox_layer()
    diff_id = f"sha256:{hashlib.sha256(raw).hexdigest()}"
    layer_digest, layer_size = blob(layout, gzip.compress(raw, mtime=0))
    manifests = []
    for image in images:
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": [PATH_ENV],
                "Cmd": list(image.cmd) or None,
                "Entrypoint": list(image.entrypoint) or None,
                "Labels": image.labels or None,
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
        layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}
        digest, size = manifest_blob(layout, config, [layer])
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": f"{image.repository}:{image.tag}"},
            }
        )
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))


def push(layout: Path, image: Image, registry: str, *, creds: str | None = None) -> None:
    """``skopeo copy`` one image of the layout to ``registry`` (plain HTTP on loopback)."""
    cmd = [
        "skopeo",
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        f"oci:{layout}:{image.repository}:{image.tag}",
        f"docker://{registry}/{image.repository}:{image.tag}",
    ]
    if creds:
        cmd[2:2] = ["--dest-creds", creds]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


#: what an image's eStargz copy adds to its tag (the copy sits next to the original in the registry)
ESTARGZ_SUFFIX = "-esgz"


def estargz_copy(layout: Path, image: Image, bin_dir: Path, prioritize: tuple[str, ...] = ()) -> Image:
    """The image's eStargz copy, written into the layout under its tag plus :data:`ESTARGZ_SUFFIX`
    by ``gpucaas-estargz`` (upstream/stargz: each layer rebuilt as eStargz at gzip's level 1,
    the ``prioritize`` paths first, which the stargz snapshotter prefetches before the container
    starts; docs/cold-start.md)."""
    copy = Image(image.repository, image.tag + ESTARGZ_SUFFIX, image.cmd, image.entrypoint, image.labels)
    subprocess.run(
        [str(bin_dir / "gpucaas-estargz"), "-layout", str(layout)]
        + ["-from", f"{image.repository}:{image.tag}", "-to", f"{copy.repository}:{copy.tag}"]
        + ["-prioritize", ",".join(prioritize)],
        check=True,
        capture_output=True,
        text=True,
    )
    return copy


def split(reference: str) -> tuple[str, str, str]:
    """``(registry, repository, tag)`` of a fully named reference."""
    registry, _, rest = reference.partition("/")
    repository, _, tag = rest.rpartition(":")
    return registry, repository, tag


def public_images() -> dict[str, Image]:
    """Full reference -> image, for the public registry (which stands in for every upstream one)."""
    return {
        BUSYBOX_IMAGE: Image.named(BUSYBOX_IMAGE, cmd=("sh",)),
        PAUSE: Image.named(PAUSE, cmd=("sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done")),
        CUDA_SAMPLE: Image.named(
            CUDA_SAMPLE,
            cmd=(),
            labels={"dev.gpucaas.stand-in": "true"},
            entrypoint=("sh", "-c", STAND_IN_SCRIPT.format(image=CUDA_SAMPLE), "cuda-sample"),
        ),
    }
