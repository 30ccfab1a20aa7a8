"""Where things are under a kubelet's root directory (``--root-dir``, ``/var/lib/kubelet`` by
default): the folder device plugins register in, the PodResources API's socket, and the DRA
plugin watcher's registration folder and plugins' folder. The kubelet fixes these names; the
node daemons' defaults, ``gpucaas doctor`` and the development tools' nodes all read them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/var/lib/kubelet")


@dataclass(frozen=True)
class KubeletDirs:
    """The layout under one kubelet root directory."""

    root: Path = DEFAULT_ROOT

    @property
    def device_plugins(self) -> Path:
        """``kubelet.sock`` and the device plugins' own sockets."""
        return self.root / "device-plugins"

    @property
    def pod_resources_socket(self) -> Path:
        return self.root / "pod-resources" / "kubelet.sock"

    @property
    def plugins_registry(self) -> Path:
        """Where DRA drivers (any kubelet plugin) put their registration sockets."""
        return self.root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        """Where kubelet plugins put their endpoint sockets (``<plugins>/<driver>/``)."""
        return self.root / "plugins"
