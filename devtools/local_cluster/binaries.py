"""Where the upstream binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kubectl, kubelet, kwok) are: a folder named by ``GPUCAAS_KUBE_BIN`` or ``KUBEBUILDER_ASSETS``
(envtest's convention), else the cache that ``upstream/build.sh`` fills from the pinned Go
modules (``make upstream`` builds it; this module builds nothing unless asked to)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: The release the wrapper module pins (upstream/kubernetes/go.mod); tests check the servers report it.
KUBE_VERSION = "v1.36.3"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "upstream" / "build.sh"


class BinariesMissing(RuntimeError):
    """The upstream binaries are neither named by an environment variable nor built."""


def bin_dir(*, build: bool = False) -> Path:
    """The folder holding the binaries; with ``build`` the missing ones are built first (minutes)."""
    given = os.environ.get("GPUCAAS_KUBE_BIN") or os.environ.get("KUBEBUILDER_ASSETS")
    if given:
        folder = Path(given)
    else:
        if not BUILD_SCRIPT.exists():
            raise BinariesMissing(
                f"{BUILD_SCRIPT} is missing: set GPUCAAS_KUBE_BIN to a folder with {', '.join(CONTROL_PLANE)}"
            )
        args = [str(BUILD_SCRIPT)] + ([] if build else ["--print"])
        out = subprocess.run(args, check=False, capture_output=True, text=True)
        if out.returncode != 0:
            raise BinariesMissing(
                out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "upstream/build.sh failed"
            )
        folder = Path(out.stdout.strip().splitlines()[-1])
    missing = [b for b in CONTROL_PLANE if not os.access(folder / b, os.X_OK)]
    if missing:
        raise BinariesMissing(
            f"{folder} lacks {', '.join(missing)}: run `make upstream` "
            "(builds the pinned Kubernetes, etcd and kwok from their Go modules)"
        )
    return folder


def binary(name: str, folder: Path | None = None) -> str:
    """The path of one upstream binary."""
    path = (folder or bin_dir()) / name
    if not os.access(path, os.X_OK):
        raise BinariesMissing(f"{path} is missing: run `make upstream`")
    return str(path)
