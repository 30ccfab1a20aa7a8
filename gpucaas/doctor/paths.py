"""Where the doctor looks: every host path, each one configurable."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.kubelet_dirs import DEFAULT_ROOT, KubeletDirs


@dataclass(frozen=True)
class HostPaths:
    """The host trees and files the checks read.

    ``sysfs_root``/``dev_root``/``proc_root``/``etc_root`` are the mount points
    themselves (``/sys``, ``/dev``, ``/proc``, ``/etc``); the containerd config
    defaults to ``<etc_root>/containerd/config.toml``.
    """

    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    proc_root: Path = Path("/proc")
    etc_root: Path = Path("/etc")
    containerd_config: Path | None = None
    cdi_dir: Path = Path("/var/run/cdi")
    kubelet_dir: Path = DEFAULT_ROOT
    libvirt_socket: Path = Path("/var/run/libvirt/libvirt-sock")
    fabric_socket: Path = Path("/run/gpucaas/fabric.sock")
    #: kubeconfig for the Kubernetes API check; None = in-cluster credentials when run in a pod, else skipped.
    kubeconfig: Path | None = None

    @property
    def containerd_config_path(self) -> Path:
        return self.containerd_config or self.etc_root / "containerd" / "config.toml"

    @property
    def device_plugin_dir(self) -> Path:
        return KubeletDirs(self.kubelet_dir).device_plugins

    @property
    def pod_resources_socket(self) -> Path:
        return KubeletDirs(self.kubelet_dir).pod_resources_socket

    def under_etc(self, absolute: str) -> Path:
        """Map an absolute path from a config file (``/etc/...``) into ``etc_root``."""
        path = Path(absolute)
        if path.is_absolute() and path.parts[1:2] == ("etc",):
            return self.etc_root.joinpath(*path.parts[2:])
        return path
