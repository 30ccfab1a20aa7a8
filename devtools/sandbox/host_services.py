"""The Services whose backends run on this machine, kube-apiserver and PostgreSQL, as the pods of
the sandbox's node bridges reach them (``--install helm``).

kube-proxy (:mod:`.service_network`) sends a Service's address to its EndpointSlice's
endpoints. Both servers here listen on loopback only, and a loopback address is no endpoint a
pod can be sent to (a packet from a bridge to ``127.0.0.1`` is a martian the kernel drops), so
for each Service the sandbox listens on every node bridge's gateway, on one port of its own,
forwards each connection to the server's loopback port, and writes the Service's EndpointSlice
naming those gateways (as a platform team writes one for a database outside the cluster). The
servers stay on loopback: nothing else on the machine's network reaches them, and PostgreSQL
sees local connections (its trust rule for ``127.0.0.1``).

The ``kubernetes`` Service's EndpointSlice is kube-apiserver's own otherwise: it names its
``--advertise-address`` (loopback here), so the sandbox's kube-apiserver runs with
``--endpoint-reconciler-type=none`` (:data:`APISERVER_ARGS`) and this module writes it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.local_cluster.objects import replace_all
from devtools.ports import free_port

log = logging.getLogger(__name__)

#: kube-apiserver leaves the ``kubernetes`` Service's endpoints to the sandbox
APISERVER_ARGS = ["--endpoint-reconciler-type=none"]
#: the EndpointSlices' manager (the endpointslice controller leaves slices of other managers alone)
MANAGED_BY = "gpucaas-sandbox"


@dataclass(frozen=True)
class HostService:
    """The Service ``namespace/name`` (its port named ``port_name``) whose backend is ``127.0.0.1:target_port``."""

    namespace: str
    name: str
    port_name: str
    target_port: int


class Forwarder:
    """Accepts on ``address`` and copies each connection both ways to ``target_host:target_port``
    (this machine's loopback by default).

    Stopping it closes the connections it carries too: a pod's watch left open through it would
    otherwise keep kube-apiserver's graceful shutdown waiting for that request to end."""

    def __init__(self, address: tuple[str, int], target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.server = socket.create_server(address, reuse_port=False)
        self.server.settimeout(0.5)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, name=f"forward-{address[0]}:{address[1]}", daemon=True)
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2)
        self.server.close()
        with self.lock:
            carried, self.open = self.open, set()
        for s in carried:  # each pump then ends and closes its pair
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

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
            upstream = socket.create_connection((self.target_host, self.target_port), timeout=10)
        except OSError as exc:
            log.warning("forwarding to %s:%d: %s", self.target_host, self.target_port, exc)
            client.close()
            return
        upstream.settimeout(None)
        sockets = (client, upstream)
        with self.lock:
            carried = not self.stopping.is_set()  # once stopping, stop() has taken what is open
            if carried:
                self.open.update(sockets)
        if not carried:
            for s in sockets:
                s.close()
            return
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)
        with self.lock:
            self.open.difference_update(sockets)


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
    """``services`` reachable from the pods of the node bridges whose gateways are ``gateways``."""

    def __init__(self, kubeconfig: Path, services: list[HostService], gateways: list[str]) -> None:
        self.kubeconfig = kubeconfig
        self.services = services
        self.gateways = gateways
        self.forwarders: list[Forwarder] = []

    def start(self) -> HostServices:
        slices = []
        for svc in self.services:
            port = free_port()
            for gateway in self.gateways:
                forwarder = Forwarder((gateway, port), svc.target_port)
                forwarder.start()
                self.forwarders.append(forwarder)
            slices.append(endpoint_slice(svc.namespace, svc.name, self.gateways, {svc.port_name: ("TCP", port)}))
        replace_all(self.kubeconfig, slices)
        return self

    def stop(self) -> None:
        for forwarder in self.forwarders:
            forwarder.stop()


def endpoint_slice(
    namespace: str, service: str, addresses: list[str], ports: dict[str, tuple[str, int]]
) -> dict[str, Any]:
    """The EndpointSlice of the selector-less Service ``namespace/service``: ``addresses``, each
    serving ``ports`` (the Service's port name -> protocol and port)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": service,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": MANAGED_BY},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"name": name, "protocol": proto, "port": port} for name, (proto, port) in ports.items()],
    }
