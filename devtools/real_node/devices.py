"""The fake board's ``/dev`` entries as real character devices, for a node whose container runtime injects them.

containerd's CDI injection stats each ``hostPath`` to learn the device's type and numbers,
and runc creates the node inside the container and allows it in the device cgroup. The
fake board writes plain files; a real node needs character devices. They are made with
``mknod`` under the board's own dev root, with major 240 (the range Linux reserves for
local and experimental use, ``Documentation/admin-guide/devices.txt``) and the IOMMU
group as minor, as ``/dev/vfio/<group>`` is numbered by the vfio driver (``/dev/vfio/vfio``
is the vfio container, 10:196 as the kernel's misc device). No driver is behind them:
opening one fails, listing them shows exactly what the container was handed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

VFIO_GROUP_MAJOR = 240
VFIO_CONTAINER = (10, 196)


def make_char_devices(dev_root: Path) -> list[Path]:
    """Replace every plain file under ``dev_root/vfio`` (and ``dev_root/iommu``) by a character device."""
    made = []
    candidates = [p for p in (dev_root / "vfio").rglob("*") if p.is_file()] if (dev_root / "vfio").exists() else []
    if (dev_root / "iommu").is_file():
        candidates.append(dev_root / "iommu")
    for path in sorted(candidates):
        if path.name == "vfio" and path.parent.name == "vfio":
            major, minor = VFIO_CONTAINER
        elif path.name.isdigit():
            major, minor = VFIO_GROUP_MAJOR, int(path.name)
        else:  # vfio/devices/vfioN, iommu (iommufd boards)
            digits = "".join(ch for ch in path.name if ch.isdigit())
            major, minor = VFIO_GROUP_MAJOR + 1, int(digits or 0)
        path.unlink()
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        made.append(path)
    return made
