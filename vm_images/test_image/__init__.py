"""The small test image the fabric tests boot: a Debian kernel + a busybox initramfs.

Built at test time from Debian packages, nothing installed on the host:

- the kernel: ``apt-get download`` of the package ``linux-image-cloud-amd64``
  depends on (a small cloud kernel with virtio and the serial console built
  in), unpacked with ``dpkg -x``; or an explicit kernel file;
- the initramfs: ``/bin/busybox`` from ``busybox-static`` plus an ``/init``
  that mounts /proc, /sys, /dev, prints ``gpucaas-test-vm: up`` on the serial
  console and sleeps. It stands in for the real service VM image (see
  ``vm_images/service-vm/``), which needs NVIDIA's Fabric Manager and real
  NVSwitches to be useful.

Files land in a cache directory (world-readable, because libvirt's QEMU runs as
the ``libvirt-qemu`` user and must read them) and are reused across runs.

Run ``python -m vm_images.test_image [out_dir]`` to build by hand.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path("/var/cache/gpucaas/test-vm")
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
BUSYBOX = Path("/bin/busybox")
READY_LINE = "gpucaas-test-vm: up"

INIT_SCRIPT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
echo "{READY_LINE}" > /dev/ttyS0 2>/dev/null || echo "{READY_LINE}"
# A real service VM would start nv-fabricmanager here (vm_images/service-vm/).
while true; do sleep 3600; done
"""


class ImageBuildError(RuntimeError):
    """The test image cannot be built here (no apt, no network, no busybox)."""


@dataclass(frozen=True)
class BootImage:
    kernel: Path
    initrd: Path


def _cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive of (name, mode, data); directories have no data."""
    out = io.BytesIO()

    def pad(n: int) -> None:
        out.write(b"\0" * ((4 - n % 4) % 4))

    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        nm = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nm), 0]
        header = b"070701" + b"".join(f"{f:08x}".encode() for f in fields)
        out.write(header + nm)
        pad(len(header) + len(nm))
        out.write(data)
        pad(len(data))
    return out.getvalue()


def build_initramfs(path: Path, busybox: Path = BUSYBOX) -> Path:
    if not busybox.is_file():
        raise ImageBuildError(f"{busybox} missing: install the busybox-static package")
    d, f, x = 0o040755, 0o100644, 0o100755
    entries = [(n, d, b"") for n in ("bin", "dev", "proc", "sys", "tmp", "run", "sbin", "etc")]
    entries += [
        ("bin/busybox", x, busybox.read_bytes()),
        ("init", x, INIT_SCRIPT.encode()),
        ("etc/hostname", f, b"gpucaas-test-vm\n"),
    ]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent test runs build side by side
    tmp.write_bytes(gzip.compress(_cpio_newc(entries), compresslevel=6))
    tmp.chmod(0o644)
    os.replace(tmp, path)
    return path


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    try:
        res = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, timeout=600)
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{cmd[0]} not found: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        raise ImageBuildError(f"{' '.join(cmd)} failed: {exc.stderr.strip()[-500:]}") from exc
    return res.stdout


def kernel_package() -> str:
    """The versioned kernel package the cloud meta-package depends on."""
    out = _run(["apt-cache", "depends", KERNEL_META_PACKAGE])
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends:") and "linux-image-" in line:
            return line.split(":", 1)[1].strip()
    raise ImageBuildError(f"apt-cache depends {KERNEL_META_PACKAGE}: no linux-image dependency in {out!r}")


def fetch_kernel(dest: Path) -> Path:
    """apt-get download the cloud kernel and extract its vmlinuz with dpkg -x."""
    pkg = kernel_package()
    with tempfile.TemporaryDirectory(prefix="gpucaas-kernel-") as tmp:
        t = Path(tmp)
        os.chmod(t, 0o755)  # apt's _apt sandbox user must be able to write here
        _run(["apt-get", "download", "-q", pkg], cwd=t)
        debs = list(t.glob("*.deb"))
        if not debs:
            raise ImageBuildError(f"apt-get download {pkg} produced no .deb")
        _run(["dpkg", "-x", str(debs[0]), str(t / "x")])
        kernels = sorted((t / "x" / "boot").glob("vmlinuz-*"))
        if not kernels:
            raise ImageBuildError(f"{debs[0].name} holds no /boot/vmlinuz-*")
        tmp_dest = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        shutil.copyfile(kernels[0], tmp_dest)
    tmp_dest.chmod(0o644)
    os.replace(tmp_dest, dest)
    return dest


def build_test_image(cache_dir: Path = DEFAULT_CACHE, kernel: Path | None = None) -> BootImage:
    """The kernel + initramfs, built once into ``cache_dir`` (kept world-readable)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    for p in [cache_dir, *cache_dir.parents]:
        if p == Path("/"):
            break
        if p.stat().st_mode & 0o005 != 0o005:
            raise ImageBuildError(f"{p} is not world-readable: QEMU (user libvirt-qemu) cannot read the image")
    k = cache_dir / "vmlinuz"
    if kernel is not None:
        k = cache_dir / "vmlinuz.given"
        shutil.copyfile(kernel, k)
        k.chmod(0o644)
    elif not k.exists():
        log.info("fetching the test kernel (%s) into %s", KERNEL_META_PACKAGE, cache_dir)
        fetch_kernel(k)
    initrd = cache_dir / "initramfs.cpio.gz"
    if not initrd.exists() or initrd.stat().st_mtime < Path(__file__).stat().st_mtime:
        build_initramfs(initrd)
    return BootImage(kernel=k, initrd=initrd)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_CACHE
    img = build_test_image(out)
    sys.stdout.write(f"kernel={img.kernel}\ninitrd={img.initrd}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
