"""DNS adapter: the addresses an NFS server host name resolves to (for the NetworkPolicy's ipBlocks)."""

from __future__ import annotations

import socket

from .errors import NFSServerUnresolvable


def resolve_host(host: str) -> list[str]:
    """Sorted unique addresses of ``host``; raises NFSServerUnresolvable when it has none."""
    try:
        infos = socket.getaddrinfo(host, 2049, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise NFSServerUnresolvable(f"spec.nfs.server {host!r} does not resolve: {exc}") from exc
    addresses = sorted({str(info[4][0]) for info in infos})
    if not addresses:
        raise NFSServerUnresolvable(f"spec.nfs.server {host!r} resolves to no address")
    return addresses
