"""The sandbox hands the HostPath provisioner's volume directories to the tenants' UID/GID."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from devtools.sandbox import hostpath_volumes
from devtools.waiting import wait_for


def _owner(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_new_volume_directories_become_the_tenants_and_nothing_else_changes(tmp_path: Path) -> None:
    uid, gid = (1000, 1000) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    volume = tmp_path / "0b5e7c1e-uid"
    volume.mkdir(mode=0o750)
    stray = tmp_path / "a-file"
    stray.write_text("not a volume")
    assert hostpath_volumes.hand_over(tmp_path, uid, gid) == [volume]
    assert _owner(volume) == (uid, gid, 0o770)
    assert stat.S_IMODE(stray.stat().st_mode) != 0o770
    assert hostpath_volumes.hand_over(tmp_path, uid, gid) == []  # already the tenant's
    assert hostpath_volumes.hand_over(tmp_path / "absent", uid, gid) == []


def test_the_thread_hands_over_directories_made_while_it_runs(tmp_path: Path) -> None:
    uid, gid = (1000, 1000) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    keeper = hostpath_volumes.VolumeOwnership(uid, gid, root=tmp_path, interval=0.05).start()
    try:
        made = tmp_path / "later"
        made.mkdir(mode=0o750)
        wait_for(lambda: _owner(made) == (uid, gid, 0o770), 10, what="the directory handed over")
    finally:
        keeper.stop()


def test_the_sandbox_renders_its_storage_class_from_the_chart() -> None:
    from devtools.sandbox import identities

    classes = [o for o in identities.cluster_side() if o["kind"] == "StorageClass"]
    assert [(c["metadata"]["name"], c["provisioner"], c["reclaimPolicy"], c["volumeBindingMode"]) for c in classes] == [
        ("gpucaas-volumes", "kubernetes.io/host-path", "Delete", "Immediate")
    ]
