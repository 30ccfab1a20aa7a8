"""Lazy pulling on a real node: the stargz snapshotter as containerd's remote snapshotter.

A tenant's CUDA image is gigabytes, and its program reads a small part of it before it starts.
With :attr:`NodeOptions.lazy_pull <devtools.real_node.node.NodeOptions.lazy_pull>`, a node's
containerd pulls images through the stargz snapshotter (built from its pinned Go module by
``upstream/build.sh``: ``gpucaas-stargz-grpc``, upstream/stargz/snapshotter): for a layer in
the eStargz format, containerd fetches only the manifest and config, and the snapshotter mounts
the layer over FUSE, fetching the table of contents and the files marked to prefetch before
the container starts, then each file's chunks by HTTP range requests as they are read, and
the rest in the background. A layer in another format is pulled whole, as without it. Why
stargz and not nydus: docs/cold-start.md.

The wiring, as the snapshotter's own documentation gives it:

* containerd: a proxy snapshotter plugin ``stargz`` at the snapshotter's socket; the CRI's
  snapshotter is ``stargz``, with snapshot annotations on (the image's reference and each
  layer's digest reach the snapshotter) and the local pull path, which the annotations need;
* the kubelet's image service is the snapshotter's CRI proxy, which hands each call to
  containerd's CRI and keeps the pull's credentials (the pod's pull secret), so a private
  image's chunks are fetched with them, and only for that image's pulls;
* the snapshotter resolves registry names as containerd's host configuration does on the node
  (the sandbox's registries are plain HTTP on this machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devtools.processes import ReadyCheck, unix_socket_ready

SNAPSHOTTER = "gpucaas-stargz-grpc"
CONVERTER = "gpucaas-estargz"


@dataclass(frozen=True)
class LazyPull:
    """The snapshotter of one node, its files under ``folder``, its binary in ``bin_dir``."""

    folder: Path
    bin_dir: Path

    @property
    def socket(self) -> Path:
        """The snapshot service containerd's proxy plugin dials."""
        return self.folder / "stargz.sock"

    @property
    def image_service(self) -> Path:
        """The CRI image service proxy the kubelet calls."""
        return self.folder / "cri.sock"

    def config(self, mirrors: dict[str, str], containerd_socket: Path) -> Path:
        """The snapshotter's TOML: the registries' names to their plain-HTTP addresses, and the
        CRI keychain (the kubelet's pull credentials) in front of ``containerd_socket``."""
        lines = [
            "[cri_keychain]",
            "enable_keychain = true",
            f'image_service_path = "{containerd_socket}"',
            f'listen_path = "{self.image_service}"',
        ]
        for name, address in sorted(mirrors.items()):
            lines += [f'[[resolver.host."{name}".mirrors]]', f'host = "{address}"', "insecure = true"]
        path = self.folder / "config.toml"
        self.folder.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    def child(self, mirrors: dict[str, str], containerd_socket: Path) -> tuple[list[object], ReadyCheck]:
        """The snapshotter's command line and its readiness (its socket answers)."""
        command: list[object] = [
            self.bin_dir / SNAPSHOTTER,
            "-address",
            self.socket,
            "-root",
            self.folder / "root",
            "-config",
            self.config(mirrors, containerd_socket),
        ]
        return command, unix_socket_ready(self.socket)

    def containerd_proxy(self) -> str:
        """containerd's configuration of the proxy plugin."""
        return f"""[proxy_plugins.stargz]
  type = "snapshot"
  address = "{self.socket}"
"""

    def containerd_images(self) -> str:
        """The CRI image settings under ``[plugins.'io.containerd.cri.v1.images']`` that lazy pulls need."""
        return """  disable_snapshot_annotations = false
  use_local_image_pull = true
"""
