"""OCI registries on loopback, from Debian's ``docker-registry`` (the CNCF distribution registry).

Two run beside a node: a public one that stands in for every upstream registry the node's
images name (``docker.io``, ``registry.k8s.io``, ``nvcr.io``, and ``ghcr.io``, the product's
own image's with ``gpucaas sandbox --install helm``: containerd's registry host configuration
sends those names here), and a private one that answers only with a user
and password (htpasswd, bcrypt), under a registry name tenants may use
(:data:`PRIVATE_REGISTRY`): containerd reaches it on loopback through its host
configuration, while the loopback address itself stays refused by the API's image rules.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtools.local_cluster.cluster import free_port
from devtools.processes import ReadyCheck, Supervisor, http_ready
from devtools.real_node import images

#: the private registry's name in image references: a public-looking name (``.test`` is
#: reserved for testing, RFC 2606) that containerd maps to the loopback registry
PRIVATE_REGISTRY = "registry.gpucaas.test"
PRIVATE_IMAGE = f"{PRIVATE_REGISTRY}/acme/private-app:1.0"
PRIVATE_USER = "acme-ci"
#: the upstream registries the node's images name, all served by the public one
PUBLIC_NAMES = ("docker.io", "registry.k8s.io", "nvcr.io", "ghcr.io")


@dataclass
class Registry:
    name: str
    folder: Path
    port: int
    htpasswd: Path | None = None
    #: where it listens: loopback, or the machine's address on the uplink the nodes of the
    #: Cilium network hang on (:mod:`.cilium`)
    bind: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.bind}:{self.port}"

    def config(self) -> Path:
        cfg = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.folder / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.address, "secret": secrets.token_hex(16)},
        }
        if self.htpasswd is not None:
            cfg["auth"] = {"htpasswd": {"realm": f"gpucaas-{self.name}", "path": str(self.htpasswd)}}
        path = self.folder / "config.yml"
        self.folder.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg))
        return path

    def command(self) -> list[str]:
        return ["docker-registry", "serve", str(self.config())]

    def ready(self) -> ReadyCheck:
        """Ready when ``/v2/`` answers; the private one answers 401, asking for credentials."""
        return http_ready(f"http://{self.address}/v2/", statuses=(200, 401))


def write_htpasswd(path: Path, user: str, password: str) -> None:
    """An htpasswd file with one bcrypt entry (the only scheme the registry accepts)."""
    out = subprocess.run(["htpasswd", "-nbB", user, password], check=True, capture_output=True, text=True).stdout
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(out.strip() + "\n")
    path.chmod(0o600)


class Registries(Supervisor):
    """The public and the private registry, filled with the images a node here runs."""

    def __init__(self, folder: Path, bind: str = "127.0.0.1", estargz_from: Path | None = None) -> None:
        self.folder = folder.resolve()
        super().__init__(self.folder / "logs")
        #: the folder of ``gpucaas-estargz``: each image but the pause image then has an eStargz
        #: copy beside it, its tag ending ``-esgz``, for nodes that pull lazily (:mod:`.lazy_pull`)
        self.estargz_from = estargz_from
        password_file = self.folder / "private-password"
        if not password_file.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            password_file.write_text(secrets.token_urlsafe(18))
            password_file.chmod(0o600)
        self.password = password_file.read_text().strip()
        self.public = Registry("public", self.folder / "public", free_port(), bind=bind)
        self.private = Registry(
            "private", self.folder / "private", free_port(), htpasswd=self.folder / "htpasswd", bind=bind
        )

    def start(self, timeout: float = 60.0) -> Registries:
        write_htpasswd(self.private.htpasswd, PRIVATE_USER, self.password)  # type: ignore[arg-type]
        for reg in (self.public, self.private):
            self.add(f"registry-{reg.name}", reg.command(), reg.ready())
        self.start_all(timeout)
        layout = self.folder / "oci-layout"
        public = images.public_images()
        private = images.Image.named(PRIVATE_IMAGE, cmd=("sh", "-c", "echo 'private image: pulled with credentials'"))
        images.write_layout(layout, [*public.values(), private])
        publics, privates = list(public.values()), [private]
        if self.estargz_from is not None:
            # the pause image is the CRI's own, pinned and pulled whole
            publics += [images.estargz_copy(layout, i, self.estargz_from) for i in publics if i != public[images.PAUSE]]
            privates.append(images.estargz_copy(layout, private, self.estargz_from))
        for image in publics:
            images.push(layout, image, self.public.address)
        for image in privates:
            images.push(layout, image, self.private.address, creds=f"{PRIVATE_USER}:{self.password}")
        return self

    def mirrors(self) -> dict[str, str]:
        """Registry name -> address, for containerd's host configuration."""
        return {**{name: self.public.address for name in PUBLIC_NAMES}, PRIVATE_REGISTRY: self.private.address}

    def info(self) -> dict[str, str]:
        """``registry.json``: what a tenant needs to pull the private image (and its eStargz
        copy, ``private_lazy_image``, when there is one)."""
        info = {
            "server": PRIVATE_REGISTRY,
            "username": PRIVATE_USER,
            "password": self.password,
            "private_image": PRIVATE_IMAGE,
        }
        if self.estargz_from is not None:
            info["private_lazy_image"] = PRIVATE_IMAGE + images.ESTARGZ_SUFFIX
        return info
