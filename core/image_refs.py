"""Image references as a node names them, and the WarmImage objects named after them.

A tenant writes ``busybox:1.36``; the container runtime records the image as
``docker.io/library/busybox:1.36`` and the kubelet reports that name (and the
``repo@sha256:...`` digest form) in the Node's ``status.images``. :func:`normalized` applies
the distribution library's rules (github.com/distribution/reference, ``normalize.go``): a
first component holding ``.`` or ``:``, or ``localhost``, is a registry, otherwise the
registry is ``docker.io`` and a one-component Docker Hub path gets ``library/``; a reference
with neither tag nor digest gets ``:latest``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

DOCKER_HUB = "docker.io"
LEGACY_DOCKER_HUB = "index.docker.io"


def normalized(reference: str) -> str:
    """The fully qualified form of ``reference``, as the runtime stores and the kubelet reports it."""
    ref = reference.strip()
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = DOCKER_HUB, ref
    if domain == LEGACY_DOCKER_HUB:
        domain = DOCKER_HUB
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    name, at, digest = path.partition("@")
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name = f"{name}:latest"
    return f"{domain}/{name}{at}{digest}"


def _match_keys(reference: str) -> tuple[str, ...]:
    """The names under which a node's ``status.images`` lists the image: ``repo@digest`` for a
    reference with a digest (a tag beside it is not what the runtime keys it by), else ``repo:tag``."""
    full = normalized(reference)
    name, at, digest = full.partition("@")
    if not at:
        return (full,)
    repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return (f"{repo}@{digest}",)


def node_image_names(node: Mapping[str, Any]) -> frozenset[str]:
    """Every name the Node's ``status.images`` reports, normalised."""
    names: set[str] = set()
    for image in (node.get("status") or {}).get("images") or []:
        for name in (image or {}).get("names") or []:
            if isinstance(name, str) and name:
                names.add(normalized(name))
    return frozenset(names)


def held(reference: str, node_names: Iterable[str]) -> bool:
    """Whether a node whose ``status.images`` names are ``node_names`` (normalised) holds ``reference``."""
    names = node_names if isinstance(node_names, (set, frozenset)) else frozenset(node_names)
    return any(key in names for key in _match_keys(reference))


def warm_image_name(reference: str) -> str:
    """The WarmImage object's name for ``reference``: a hash of its normalised form, so that
    ``busybox`` and ``docker.io/library/busybox:latest`` are one object."""
    return "wi-" + hashlib.sha256(normalized(reference).encode()).hexdigest()[:20]
