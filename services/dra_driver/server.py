"""The DRA driver's gRPC side, on unix sockets as the kubelet expects them.

* ``<registry_dir>/<driver>-reg.sock`` serves ``pluginregistration.Registration``: the
  kubelet's plugin watcher finds the socket, calls ``GetInfo`` (type ``DRAPlugin``, the
  driver name, the endpoint, the DRA services offered) and then
  ``NotifyRegistrationStatus``.
* ``<plugins_dir>/<driver>/dra.sock`` serves ``v1.DRAPlugin`` (NodePrepareResources,
  NodeUnprepareResources) and the device health services ``v1.DRAResourceHealth`` and
  ``v1alpha1.DRAResourceHealth``: one stream on which every GPU device's health is sent at
  once and again whenever a GPU's health changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from core.dra import DRIVER
from core.topology import HGX_H100_PARTITIONS
from services.dra_driver import api
from services.dra_driver.driver import ClaimRef, Driver
from services.dra_driver.errors import ClaimNotReady
from services.dra_driver.slices import device_name

log = logging.getLogger(__name__)

#: physical id -> (healthy, reason)
HealthMap = Mapping[int, tuple[bool, str]]


class HealthBoard:
    """GPU health as last reported; health streams wait on it for changes."""

    def __init__(self, initial: HealthMap | None = None) -> None:
        self._cond = threading.Condition()
        self._health: dict[int, tuple[bool, str]] = dict(initial or {})
        self._version = 0
        self._closed = False

    def update(self, health: HealthMap) -> None:
        with self._cond:
            if dict(health) != self._health:
                self._health = dict(health)
                self._version += 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def snapshot(self) -> tuple[int, dict[int, tuple[bool, str]]]:
        with self._cond:
            return self._version, dict(self._health)

    def wait_newer(self, version: int, timeout: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._closed, timeout)
            return not self._closed


def device_health(node_name: str, health: HealthMap, pb2: Any) -> list[Any]:
    now = int(time.time())
    out = []
    for partition in (p for p in HGX_H100_PARTITIONS if p.size == 1):  # the published devices: one per GPU
        states = [health.get(g, (False, f"GPU {g} not found")) for g in partition.sorted_gpus()]
        bad = [f"GPU {g}: {why}" for g, (ok, why) in zip(partition.sorted_gpus(), states, strict=True) if not ok]
        out.append(
            pb2.DeviceHealth(
                device=pb2.DeviceIdentifier(pool_name=node_name, device_name=device_name(partition)),
                health=pb2.UNHEALTHY if bad else pb2.HEALTHY,
                last_updated_time=now,
                message="; ".join(bad)[:1024],
            )
        )
    return out


class _Registration:
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error: str | None = None

    def GetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC names)
        return api.reg_pb2.PluginInfo(
            type=api.PLUGIN_TYPE, name=DRIVER, endpoint=str(self.endpoint), supported_versions=[api.DRA_SERVICE]
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        if request.plugin_registered:
            self.error = None
            self.registered.set()
            log.info("registered with the kubelet as DRA driver %s", DRIVER)
        else:
            self.error = request.error
            log.error("the kubelet refused the registration: %s", request.error)
        return api.reg_pb2.RegistrationStatusResponse()


class _DRAPlugin:
    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def NodePrepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802
        pb2 = api.dra_pb2
        out = {}
        for c in request.claims:
            try:
                prepared = self.driver.prepare(ClaimRef(c.namespace, c.uid, c.name))
                out[c.uid] = pb2.NodePrepareResourceResponse(
                    devices=[
                        pb2.Device(
                            request_names=list(d.request_names),
                            pool_name=d.pool_name,
                            device_name=d.device_name,
                            cdi_device_ids=list(d.cdi_device_ids),
                        )
                        for d in prepared.devices
                    ]
                )
            except ClaimNotReady as exc:
                out[c.uid] = pb2.NodePrepareResourceResponse(error=str(exc))
            except Exception as exc:  # the kubelet retries; say what failed
                log.exception("prepare of claim %s/%s failed", c.namespace, c.name)
                out[c.uid] = pb2.NodePrepareResourceResponse(error=f"prepare failed: {exc}")
        return pb2.NodePrepareResourcesResponse(claims=out)

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802
        pb2 = api.dra_pb2
        out = {}
        for c in request.claims:
            try:
                self.driver.unprepare(ClaimRef(c.namespace, c.uid, c.name))
                out[c.uid] = pb2.NodeUnprepareResourceResponse()
            except Exception as exc:
                log.exception("unprepare of claim %s/%s failed", c.namespace, c.name)
                out[c.uid] = pb2.NodeUnprepareResourceResponse(error=f"unprepare failed: {exc}")
        return pb2.NodeUnprepareResourcesResponse(claims=out)


class _Health:
    def __init__(self, node_name: str, board: HealthBoard, pb2: Any, period: float = 30.0) -> None:
        self.node_name, self.board, self.pb2, self.period = node_name, board, pb2, period

    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        version, health = self.board.snapshot()
        yield self.pb2.NodeWatchResourcesResponse(devices=device_health(self.node_name, health, self.pb2))
        while context.is_active():
            if not self.board.wait_newer(version, self.period):
                return
            new_version, health = self.board.snapshot()
            if new_version != version:
                version = new_version
                yield self.pb2.NodeWatchResourcesResponse(devices=device_health(self.node_name, health, self.pb2))


class DraServer:
    """Both sockets of the driver; ``start()``/``stop()``."""

    def __init__(self, driver: Driver, board: HealthBoard, *, registry_dir: Path, plugins_dir: Path) -> None:
        self.endpoint = plugins_dir / DRIVER / "dra.sock"
        self.registration_socket = registry_dir / f"{DRIVER}-reg.sock"
        self.registration = _Registration(self.endpoint)
        self.board = board
        self._plugin_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api.dra_grpc.add_DRAPluginServicer_to_server(_DRAPlugin(driver), self._plugin_server)
        api.health_grpc.add_DRAResourceHealthServicer_to_server(
            _Health(driver.node_name, board, api.health_pb2), self._plugin_server
        )
        api.health_alpha_grpc.add_DRAResourceHealthServicer_to_server(
            _Health(driver.node_name, board, api.health_alpha_pb2), self._plugin_server
        )
        self._reg_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api.reg_grpc.add_RegistrationServicer_to_server(self.registration, self._reg_server)

    def start(self) -> None:
        for sock, server in ((self.endpoint, self._plugin_server), (self.registration_socket, self._reg_server)):
            sock.parent.mkdir(parents=True, exist_ok=True)
            sock.unlink(missing_ok=True)
            server.add_insecure_port(f"unix://{sock}")
        # The plugin socket first: the kubelet may call the endpoint as soon as it sees the
        # registration socket.
        self._plugin_server.start()
        self._reg_server.start()

    def stop(self, grace: float = 1.0) -> None:
        self.board.close()
        self._reg_server.stop(grace).wait()
        self._plugin_server.stop(grace).wait()
        for sock in (self.registration_socket, self.endpoint):
            sock.unlink(missing_ok=True)
