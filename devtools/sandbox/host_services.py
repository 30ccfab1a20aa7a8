"""The Services whose backends run on this machine, as the pods of the sandbox's bridge network
reach them: the sandbox's stand-in for kube-proxy, for those Services only.

The chart's pods reach kube-apiserver at the ``kubernetes`` Service (``10.96.0.1:443``, which
the kubelet puts in every container's ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the API
server's certificate names), and the API reaches its PostgreSQL at a Service's address too.
No kube-proxy runs here and both servers listen on loopback only, so for each Service the
sandbox listens on each node's bridge gateway (a port of its own) and forwards each connection
to the server's loopback port, and one iptables rule per node bridge sends the Service's
address and port there (DNAT, as kube-proxy's rules would send it to an endpoint). The servers
stay on loopback: nothing else on the machine's network reaches them, and PostgreSQL sees
local connections (its trust rule for ``127.0.0.1``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import threading
from dataclasses import dataclass

from devtools.ports import free_port

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostService:
    """A Service address (``cluster_ip:port``) whose backend is ``127.0.0.1:target_port``."""

    name: str
    cluster_ip: str
    port: int
    target_port: int


class _Forwarder:
    """Accepts on ``address`` and copies each connection both ways to ``127.0.0.1:target_port``."""

    def __init__(self, address: tuple[str, int], target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server(address, reuse_port=False)
        self.server.settimeout(0.5)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, name=f"forward-{address[0]}:{address[1]}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2)
        self.server.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError as exc:
            log.warning("forwarding to 127.0.0.1:%d: %s", self.target_port, exc)
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either closes; then close both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class HostServices:
    """``services`` reachable from the pods of the node bridges ``bridges`` (name -> gateway)."""

    def __init__(self, services: list[HostService], bridges: dict[str, str]) -> None:
        self.services = services
        self.bridges = bridges
        self.forwarders: list[_Forwarder] = []
        self.chains: list[str] = []

    def start(self) -> HostServices:
        for bridge, gateway in self.bridges.items():
            chain = f"GPUCAAS-SVC-{bridge}"[:28]
            _iptables("-N", chain, check=False)
            _iptables("-F", chain)
            self.chains.append(chain)
            if not _iptables("-C", "PREROUTING", "-i", bridge, "-j", chain, check=False):
                _iptables("-A", "PREROUTING", "-i", bridge, "-j", chain)
            for svc in self.services:
                port = free_port()
                forwarder = _Forwarder((gateway, port), svc.target_port)
                forwarder.start()
                self.forwarders.append(forwarder)
                _iptables(
                    *("-A", chain, "-d", f"{svc.cluster_ip}/32", "-p", "tcp", "--dport", str(svc.port)),
                    *("-m", "comment", "--comment", f"gpucaas sandbox: {svc.name}"),
                    *("-j", "DNAT", "--to-destination", f"{gateway}:{port}"),
                )
        return self

    def stop(self) -> None:
        for forwarder in self.forwarders:
            forwarder.stop()
        for bridge, chain in zip(self.bridges, self.chains, strict=False):
            _iptables("-D", "PREROUTING", "-i", bridge, "-j", chain, check=False)
            _iptables("-F", chain, check=False)
            _iptables("-X", chain, check=False)


def _iptables(*args: str, check: bool = True) -> bool:
    """One command on the nat table; with ``check=False`` its failure is an answer (False)."""
    result = subprocess.run(["iptables", "-w", "-t", "nat", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise OSError(f"iptables -t nat {' '.join(args)}: {result.stderr.strip()}")
    return result.returncode == 0
