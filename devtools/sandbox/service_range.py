"""Each ``--install helm`` sandbox's Service range, and the network namespace its kube-proxy runs in.

kube-proxy's nftables rules are one table of a fixed name (``ip kube-proxy``): two kube-proxies in
one network namespace would each rewrite the other's. So each such sandbox's kube-proxy runs in a
network namespace of its own, ``gpucaas-svc<N>``, joined to this machine by a veth pair
(``gsvc<N>``: ``10.95.N.1`` on this side, ``10.95.N.2`` on the other), and each sandbox has a
Service range of its own, ``10.<96+N>.0.0/16``, which this machine routes into that namespace.

A connection to a Service, from a pod on one of the sandbox's node bridges or from this machine
(kube-scheduler calling the extender, a test calling the API's Service), is routed there;
kube-proxy's rules send it on to an endpoint, with its source rewritten to ``10.95.N.2``
(``masqueradeAll``) so that the reply comes back through the same rules; the namespace's default
route brings it back here, to a pod's bridge or a server of this machine.

The first sandbox gets N = 0: kubeadm's default range, ``10.96.0.0/16``, in whose static band
deploy/scheduler's configuration and docs/deploy.md name their fixed addresses (the cluster DNS at
``10.96.0.10``, the extender at ``10.96.0.88``). Another sandbox has them at the same offsets of
its own range (:meth:`ServiceRange.moved`).

A range is claimed by the process that runs the sandbox: ``/run/gpucaas-service-ranges/<N>``
names its pid and state folder, and a range whose process is gone is free again. A state folder
keeps its N (``<state>/service-range``): its etcd holds Service addresses of that range.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: the first range's, kubeadm's default Service range
BASE = ipaddress.ip_network("10.96.0.0/16")
#: as many sandboxes with kube-proxy as one machine runs at once (10.96 to 10.127)
RANGES = 32
OWNERS = Path("/run/gpucaas-service-ranges")
RECORD = "service-range"


class RangeTaken(RuntimeError):
    """The state folder's cluster has its Services in a range another running sandbox holds."""


@dataclass(frozen=True)
class ServiceRange:
    index: int

    @property
    def cidr(self) -> str:
        return str(self.network)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((int(BASE.network_address) + (self.index << 16), BASE.prefixlen))

    def moved(self, address: str) -> str:
        """``address`` of the first range (a fixed one a shipped file names), at the same offset of this one."""
        ip = ipaddress.IPv4Address(address)
        if ip not in BASE:
            raise ValueError(f"{address} is not in {BASE}")
        return str(self.network.network_address + (int(ip) - int(BASE.network_address)))

    @property
    def kubernetes(self) -> str:
        """The ``kubernetes`` Service's address: the first of the range."""
        return str(self.network.network_address + 1)

    @property
    def namespace(self) -> str:
        return f"gpucaas-svc{self.index}"

    @property
    def veth(self) -> str:
        return f"gsvc{self.index}"

    @property
    def link(self) -> str:
        """The veth pair's network, which the sandbox's pods route through their gateway."""
        return f"10.95.{self.index}.0/30"

    @property
    def host_address(self) -> str:
        """This machine's end of the veth pair: also where every pod of the sandbox, on whichever
        node, reaches this machine (a tenant's webhook receiver here, say)."""
        return f"10.95.{self.index}.1"

    @property
    def proxy_address(self) -> str:
        """The namespace's end: the source kube-proxy gives the connections it sends on."""
        return f"10.95.{self.index}.2"


def claim(state_dir: Path, *, kept: bool) -> ServiceRange:
    """A range for the sandbox in ``state_dir``, its namespace made: the one the folder recorded
    when its cluster is ``kept`` (a folder of before the record: the first), else the first free
    one. Raises :class:`RangeTaken` when a kept cluster's range is another running sandbox's."""
    record = state_dir / RECORD
    recorded = int(record.read_text()) if record.exists() else (0 if kept else None)
    with _owners_locked():
        owners = {n: _owner(n) for n in range(RANGES)}
        free = [n for n, owner in owners.items() if owner is None or owner == str(state_dir.resolve())]
        if kept and recorded is not None:
            if recorded not in free:
                raise RangeTaken(
                    f"this sandbox's cluster has its Services in {ServiceRange(recorded).cidr}, which the "
                    f"sandbox in {owners[recorded]} uses now: stop that one first, or start this one afresh"
                )
            index = recorded
        elif free:
            index = recorded if recorded in free else free[0]
        else:
            raise RuntimeError(f"all {RANGES} Service ranges are held by running sandboxes")
        (OWNERS / str(index)).write_text(json.dumps({"pid": os.getpid(), "state": str(state_dir.resolve())}))
    record.write_text(f"{index}\n")
    service_range = ServiceRange(index)
    make_namespace(service_range)
    return service_range


def release(service_range: ServiceRange) -> None:
    """The namespace gone (its kube-proxy rules, veth pair and the route with it) and the range free."""
    remove_namespace(service_range)
    with _owners_locked():
        (OWNERS / str(service_range.index)).unlink(missing_ok=True)


def make_namespace(r: ServiceRange) -> None:
    """The namespace (made afresh: a crashed sandbox's is removed), joined to this machine, with
    forwarding on and redirects off (it sends connections back out the way they came), and the
    range routed into it."""
    remove_namespace(r)
    ns = r.namespace
    _ip("netns", "add", ns)
    _ip("link", "add", r.veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("addr", "add", f"{r.host_address}/30", "dev", r.veth)
    _ip("link", "set", r.veth, "up")
    _ip("-n", ns, "addr", "add", f"{r.proxy_address}/30", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "route", "add", "default", "via", r.host_address)
    subprocess.run(
        [
            *in_namespace(r),
            *("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
            *("net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"),
        ],
        check=True,
        capture_output=True,
    )
    _ip("route", "replace", r.cidr, "via", r.proxy_address)


def remove_namespace(r: ServiceRange) -> None:
    if Path("/run/netns", r.namespace).exists():
        subprocess.run(["ip", "netns", "del", r.namespace], check=False, capture_output=True)
    subprocess.run(["ip", "link", "del", r.veth], check=False, capture_output=True)


def in_namespace(r: ServiceRange) -> list[str]:
    """The command prefix that runs a command in the range's namespace."""
    return ["ip", "netns", "exec", r.namespace]


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _owner(index: int) -> str | None:
    """The state folder of the running sandbox that holds range ``index``; None when none does."""
    try:
        owner = json.loads((OWNERS / str(index)).read_text())
        pid, state = int(owner["pid"]), str(owner["state"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return state


@contextlib.contextmanager
def _owners_locked() -> Iterator[None]:
    OWNERS.mkdir(parents=True, exist_ok=True)
    with (OWNERS / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
