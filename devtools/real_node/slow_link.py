"""A registry across a link of a stated bandwidth, as a node's registry is on a real fleet.

The sandbox's registries listen on loopback, where a 3 GB pull costs what copying memory costs.
A GPU node pulls its tenants' images across the datacenter network, so this one runs in a
network namespace of its own, at the far end of a veth pair whose registry side sends at
most ``mbit`` megabits a second (``tc``'s token bucket filter on that side's egress: what the
node downloads). The uploads that fill it are not limited. The registry is Debian's
``docker-registry``, as the others (:mod:`.registry`); its storage is a folder the caller
names, so that a large image is pushed once and served again by the next run.

Each link takes the first free /30 of ``10.86.0.0/16`` (its namespace's name says which),
so links of two runs on one machine do not clash.
"""

from __future__ import annotations

import fcntl
import ipaddress
import subprocess
from pathlib import Path

from devtools.processes import Supervisor
from devtools.real_node.registry import Registry

NETWORK = ipaddress.ip_network("10.86.0.0/16")
#: the registry's port in its namespace (the namespace has its own ports)
PORT = 5000
_LOCK = Path("/tmp/gpucaas-slow-links.lock")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class SlowLink(Supervisor):
    """A registry storing into ``storage``, reached at :attr:`address` through ``mbit`` Mbit/s."""

    def __init__(self, folder: Path, storage: Path, mbit: int = 1000) -> None:
        self.folder = folder.resolve()
        super().__init__(self.folder / "logs")
        self.storage = storage
        self.mbit = mbit
        self.index = -1

    @property
    def namespace(self) -> str:
        return f"gpucaas-link{self.index}"

    @property
    def host_veth(self) -> str:
        return f"gclink{self.index}"

    def _subnet(self) -> ipaddress.IPv4Network:
        """The link's /30: the ``index``-th of :data:`NETWORK`."""
        return ipaddress.IPv4Network((int(NETWORK.network_address) + 4 * self.index, 30))

    @property
    def far_address(self) -> str:
        """The registry's address: the namespace's end of the link."""
        return str(self._subnet()[2])

    @property
    def address(self) -> str:
        return f"{self.far_address}:{PORT}"

    def start(self, timeout: float = 60.0) -> SlowLink:
        """The namespace, the link with its limit, then the registry in it; a start that fails
        half-way takes down what it made."""
        try:
            self._make_link()
            registry = Registry("far", self.storage, PORT, bind=self.far_address)
            self.add("registry-far", ["ip", "netns", "exec", self.namespace, *registry.command()], registry.ready())
            self.start_all(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _make_link(self) -> None:
        with _LOCK.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            taken = _ip("netns", "list").stdout
            self.index = next(i for i in range(1, 1 << 14) if f"gpucaas-link{i} " not in taken + " ")
            _ip("netns", "add", self.namespace)
        subnet = self._subnet()
        host = f"{subnet[1]}/{subnet.prefixlen}"
        far = f"{subnet[2]}/{subnet.prefixlen}"
        n = ("-n", self.namespace)
        _ip("link", "add", self.host_veth, "type", "veth", "peer", "name", "eth0", "netns", self.namespace)
        _ip("addr", "add", host, "dev", self.host_veth)
        _ip("link", "set", self.host_veth, "up")
        _ip(*n, "link", "set", "lo", "up")
        _ip(*n, "addr", "add", far, "dev", "eth0")
        _ip(*n, "link", "set", "eth0", "up")
        # the token bucket: a burst of 1 MB (it must hold the largest segment veth offloads, 64 KB)
        subprocess.run(
            ["ip", "netns", "exec", self.namespace, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf"]
            + ["rate", f"{self.mbit}mbit", "burst", "1mb", "latency", "50ms"],
            check=True,
            capture_output=True,
        )

    def qdisc(self) -> str:
        """``tc``'s account of the limit on the registry's side."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.namespace, "tc", "qdisc", "show", "dev", "eth0"],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def stop(self) -> None:
        super().stop()
        if self.index >= 0:
            _ip("netns", "del", self.namespace, check=False)  # its eth0 goes, and the host side with it
            _ip("link", "del", self.host_veth, check=False)
