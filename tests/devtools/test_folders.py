"""Removing a sandbox's state folder (devtools/folders.py): everything in it, but never what
is mounted under it (a killed kubelet can leave a mount behind)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devtools import folders


def test_a_folder_goes_with_everything_in_it_and_a_missing_one_is_fine(tmp_path: Path) -> None:
    state = tmp_path / "state"
    deep = state / "nodes" / "gpu-node-a" / "containerd" / "snapshots" / "1" / "fs"
    deep.mkdir(parents=True)
    (deep / "file").write_text("x")
    (state / "link").symlink_to(tmp_path)  # a link is removed, not followed
    folders.remove(state)
    assert not state.exists() and tmp_path.exists()
    folders.remove(state)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_mount_left_under_the_folder_is_not_walked_into(tmp_path: Path) -> None:
    state = tmp_path / "state"
    mounted = state / "kubelet" / "pods" / "volume"
    mounted.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mounted)], check=True)
    try:
        (mounted / "kept").write_text("a pod's data")
        (state / "other").write_text("x")
        folders.remove(state)
        assert (mounted / "kept").read_text() == "a pod's data"
        assert not (state / "other").exists()
    finally:
        subprocess.run(["umount", str(mounted)], check=True)
    folders.remove(state)
    assert not state.exists()
