"""Removing a sandbox's state folder: ``rm -rf``, not :func:`shutil.rmtree`.

The folder holds each real node's containerd content and unpacked snapshots (the product's
image and the tests' images: tens of thousands of files, about 1.5 GB for a chart-installed
sandbox). ``shutil.rmtree`` makes several system calls and Python objects per entry; beside
the end-to-end package's CPU hog it took two minutes for one such folder, ``rm -rf`` seconds.
``--one-file-system``: a mount left under the folder (a killed kubelet's) is not walked into.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def remove(folder: Path) -> None:
    """Remove ``folder`` and everything in it, as far as it can (missing is fine)."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(folder)], capture_output=True, check=False)
