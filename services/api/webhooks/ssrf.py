"""Which URLs and addresses a webhook may reach: the platform's own must stay out of reach.

A webhook makes the platform send requests wherever a tenant says, so a URL could be
aimed at the cloud metadata service (169.254.169.254), the Kubernetes API, the database
or any in-cluster service (OWASP, "Server Side Request Forgery Prevention Cheat Sheet").
The rules:

* at registration: http(s) only, no ``user:password@``, no cluster or local names
  (``localhost``, ``*.svc``, ``*.cluster.local``, ``*.internal``, ``*.local``, one-label
  names that a cluster's DNS search path would complete), no literal address outside the
  public unicast space, and a name that resolves now must resolve to public addresses only;
* at each delivery: the name is resolved again, every address is checked, and the
  request goes to the checked address itself (Host header and TLS SNI keep the name), so
  a DNS answer that changes between check and connection (DNS rebinding) gains nothing.

"Public" is ``ipaddress``'s ``is_global`` (the IANA special-purpose registries, RFC 6890):
it excludes loopback, link-local, the private ranges (10/8, 172.16/12, 192.168/16,
fc00::/7), shared address space (100.64/10), and more. Multicast is refused too. IPv4
addresses mapped into IPv6 (``::ffff:10.0.0.1``) are judged as the IPv4 address.
``allow_loopback`` (the admin setting ``webhook_allow_loopback``, for the sandbox and
tests) lets loopback addresses and ``localhost`` through; ``networks`` (the admin setting
``webhook_allow_networks``) lets the addresses of the operator's own ranges through, for
receivers on a private network the platform reaches (a literal address, or a name resolving
into them; cluster and local names stay refused). Nothing else.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

CLUSTER_SUFFIXES = (".svc", ".cluster.local", ".internal", ".local", ".localhost", ".localdomain")
LOOPBACK_NAMES = ("localhost",)


class Refused(ValueError):
    """The URL or address may not be reached; the message says why (for the ``url`` field)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # lowercase, no brackets, no trailing dot
    port: int
    ip: IPAddress | None  # when the URL names an address


def kind_of(ip: IPAddress) -> str:
    """A word for an address class, for messages."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for attr, word in (
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_multicast", "multicast"),
        ("is_unspecified", "unspecified"),
        ("is_reserved", "reserved"),
        ("is_private", "private"),
    ):
        if getattr(ip, attr):
            return word
    return "public" if ip.is_global else "non-public"


def check_address(ip: IPAddress, *, allow_loopback: bool, networks: Sequence[IPNetwork] = ()) -> None:
    """Refused unless ``ip`` is a public unicast address (or loopback, when allowed, or in one
    of ``networks``)."""
    plain = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None else ip
    if plain.is_loopback and allow_loopback:
        return
    if not plain.is_multicast and any(plain in n for n in networks):
        return
    if not plain.is_global or plain.is_multicast:
        raise Refused(f"{ip} is a {kind_of(ip)} address; webhooks may only reach public addresses")


def parse(url: str) -> Target:
    """The URL's scheme, host and port, or Refused saying what is wrong with it."""
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise Refused("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise Refused("must start with https:// (or http://)")
    if "@" in parts.netloc:
        raise Refused("must not contain user:password@ (the signature authenticates the platform)")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Refused("must name a host, e.g. https://hooks.example.com/gpucaas")
    scheme = parts.scheme.lower()
    try:
        ip: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    return Target(scheme=scheme, host=host, port=port or (443 if scheme == "https" else 80), ip=ip)


def check_name(host: str, *, allow_loopback: bool) -> None:
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        if allow_loopback:
            return
        raise Refused(f"{host!r} is a local name; webhooks may only reach public hosts")
    if "." not in host:
        raise Refused(f"{host!r} is not a fully qualified public host name (e.g. hooks.example.com)")
    if host.endswith(CLUSTER_SUFFIXES):
        raise Refused(f"{host!r} is a cluster or local name; webhooks may only reach public hosts")


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to now (socket.gaierror when it does not resolve)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip not in seen:
            seen.append(ip)
    return seen


def check_registration(url: str, *, allow_loopback: bool, networks: Sequence[IPNetwork] = ()) -> Target:
    """The registration-time check: Refused, or the parsed target.

    A name that does not resolve now is accepted (DNS may not know it yet); delivery
    checks again."""
    target = parse(url)
    if target.ip is not None:
        check_address(target.ip, allow_loopback=allow_loopback, networks=networks)
        return target
    check_name(target.host, allow_loopback=allow_loopback)
    try:
        addresses = resolve(target.host, target.port)
    except (OSError, UnicodeError, ValueError):
        return target
    for ip in addresses:
        try:
            check_address(ip, allow_loopback=allow_loopback, networks=networks)
        except Refused as exc:
            raise Refused(f"host {target.host!r} resolves to {exc}") from None
    return target


def delivery_address(url: str, *, allow_loopback: bool, networks: Sequence[IPNetwork] = ()) -> tuple[Target, IPAddress]:
    """The delivery-time check: the address to connect to, every resolved address checked."""
    target = parse(url)
    if target.ip is not None:
        check_address(target.ip, allow_loopback=allow_loopback, networks=networks)
        return target, target.ip
    check_name(target.host, allow_loopback=allow_loopback)
    try:
        addresses = resolve(target.host, target.port)
    except (OSError, UnicodeError, ValueError) as exc:
        raise Refused(f"host {target.host!r} does not resolve ({exc})") from None
    if not addresses:
        raise Refused(f"host {target.host!r} has no address")
    for ip in addresses:
        try:
            check_address(ip, allow_loopback=allow_loopback, networks=networks)
        except Refused as exc:
            raise Refused(f"host {target.host!r} resolves to {exc}") from None
    return target, addresses[0]
