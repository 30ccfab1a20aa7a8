"""The sandbox's tenant volumes: kube-controller-manager's own HostPath provisioner, and the
ownership its directories need.

Tenant volumes (``POST /v1/volumes``) are PersistentVolumeClaims of one StorageClass. In
production that class belongs to the NFS CSI driver; this machine's kernel has no NFS
client, so the sandbox's class (``gpucaas-volumes``, rendered by the chart with
``volumes.storageClass``) names the upstream provisioner ``kubernetes.io/host-path``, which
kube-controller-manager runs when started with ``--enable-hostpath-provisioner``. It makes
each volume a directory ``/tmp/hostpath_pv/<uid>`` of this machine and a PersistentVolume
whose ``hostPath`` is that directory; with ``reclaimPolicy: Delete`` its deleter removes the
directory once the claim is gone (it only deletes under ``/tmp``). That is fine here, and
only here, because every sandbox node runs on
this one machine and sees the same ``/tmp``: a volume written by a container on one node is
read by a container on another, as an NFS export would be.

What the provisioner does not do is give the directory to the tenant: it creates it
``0750`` owned by root, and a ``hostPath`` volume gets no ``fsGroup`` treatment from the
kubelet, while tenant containers run as a non-root UID/GID (``GPUCAAS_TENANT_RUN_AS_USER``,
Pod Security ``restricted``). In production the NFS CSI driver's ``mountPermissions`` and
the pod's ``fsGroup`` do that; here :class:`VolumeOwnership` does: a thread that hands every
new directory under the provisioner's root to the tenant UID/GID (mode ``0770``) within a
fraction of a second of its creation — the claim is bound after the directory exists, and a
container that mounts it starts seconds later.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: where kube-controller-manager's HostPath provisioner makes its volumes (fixed upstream)
PROVISIONER_ROOT = Path("/tmp/hostpath_pv")
PROVISIONER = "kubernetes.io/host-path"
#: kube-controller-manager's flag that turns the provisioner on
CONTROLLER_MANAGER_FLAG = "--enable-hostpath-provisioner"
MODE = 0o770


def chart_values() -> dict[str, object]:
    """The chart values that render the sandbox's StorageClass for tenant volumes."""
    return {
        "volumes": {
            "storageClass": {
                "create": True,
                "provisioner": PROVISIONER,
                "parameters": {},
                "mountOptions": [],
                "reclaimPolicy": "Delete",
            }
        }
    }


def hand_over(root: Path, uid: int, gid: int) -> list[Path]:
    """Give each volume directory under ``root`` that is not yet the tenant's to ``uid:gid``
    with mode 0770; returns those changed."""
    changed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return changed
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                continue
            if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (uid, gid, MODE):
                os.chown(entry.path, uid, gid, follow_symlinks=False)
                os.chmod(entry.path, MODE)
                changed.append(Path(entry.path))
        except FileNotFoundError:  # deleted meanwhile with its claim
            continue
    return changed


class VolumeOwnership:
    """A thread that runs :func:`hand_over` every ``interval`` seconds until stopped."""

    def __init__(self, uid: int, gid: int, *, root: Path = PROVISIONER_ROOT, interval: float = 0.2) -> None:
        self.uid, self.gid, self.root, self.interval = uid, gid, root, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="volume-ownership", daemon=True)

    def start(self) -> VolumeOwnership:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for path in hand_over(self.root, self.uid, self.gid):
                    log.info("volume %s handed to %d:%d (mode %o)", path, self.uid, self.gid, MODE)
            except OSError as exc:
                log.warning("volume ownership: %s", exc)
            self._stop.wait(self.interval)
