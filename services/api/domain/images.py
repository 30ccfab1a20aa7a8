"""Which registries a tenant's image may come from.

The node's container runtime pulls a tenant's image, from the node's network
position: an image reference naming an internal address turns the kubelet into a
tenant-controlled HTTP client inside the cluster (cloud metadata at
169.254.169.254, a Docker daemon on 2375, the kubelet on 10250, in-cluster
services). So a reference whose registry is

* an IP literal that is not a public address (loopback, link-local, private,
  shared, reserved, multicast, unspecified — in any notation ``inet_aton`` accepts,
  e.g. ``2852039166`` or ``0251.0376.0251.0376``),
* ``localhost`` or a name under ``.localhost``, ``.local``, ``.internal``,
* a cluster service name (``*.svc``, ``*.svc.cluster.local``, ``*.cluster.local``,
  ``kubernetes.default…``),
* or any host on a port daemons listen on (Docker 2375/2376, etcd 2379/2380,
  kubelet 10250/10255, kube-apiserver 6443, ...)

is refused, unless its host (or ``host:port``) is on the operator's allow-list
(``GPUCAAS_IMAGE_REGISTRY_ALLOWLIST``, for a private registry).

A public name that resolves to an internal address is beyond what the API can
see (DNS may change after the check); the nodes' egress policy has to cover that.
The domain rule follows docker's normalisation (github.com/distribution/reference,
``normalize.go``: a first component with ``.`` or ``:``, or ``localhost``, is a registry).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

DAEMON_PORTS = frozenset({2375, 2376, 2377, 2379, 2380, 4243, 6443, 10248, 10249, 10250, 10255, 10256, 10257, 10259})
INTERNAL_SUFFIXES = (".svc", ".cluster.local", ".localhost", ".local", ".internal", ".localdomain")
INTERNAL_NAMES = frozenset({"localhost", "kubernetes", "metadata", "metadata.google.internal"})


def registry_of(reference: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of the registry a reference names explicitly, or None (Docker Hub)."""
    first, sep, _rest = reference.partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        return None
    if first.startswith("["):  # [v6]:port
        host, _, tail = first[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = first.partition(":")
    return host.lower().rstrip("."), int(port) if port.isdigit() else None


def _ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:  # the notations a resolver accepts too: 2852039166, 0xa9.254.169.254, 169.254.43518
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def refusal(reference: str, allow: Iterable[str] = ()) -> str | None:
    """Why the reference's registry is not allowed, or None when it is."""
    found = registry_of(reference)
    if found is None:
        return None
    host, port = found
    allowed = {a.lower().rstrip(".") for a in allow}
    if host in allowed or (port is not None and f"{host}:{port}" in allowed):
        return None
    ip = _ip_literal(host)
    if ip is not None:
        mapped = getattr(ip, "ipv4_mapped", None)
        if not (mapped or ip).is_global:
            return f"registry {host!r} is not a public address (loopback, link-local, private or reserved)"
    elif host in INTERNAL_NAMES or host.endswith(INTERNAL_SUFFIXES) or host.startswith("kubernetes.default"):
        return f"registry {host!r} is an internal or cluster service name"
    if port in DAEMON_PORTS:
        return f"registry port {port} is a daemon's port (Docker, etcd, kubelet or API server), not a registry's"
    return None
