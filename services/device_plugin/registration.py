"""Adapter + lifecycle towards the kubelet: serve the plugin socket, register, re-register.

Explicit, logged lifecycle (as NVIDIA's k8s-device-plugin): the socket is named
after the resource (``gpucaas-nvidia.com_gpu.sock``), a stale one is removed,
then serve -> register. A watcher thread checks ``kubelet.sock`` and our own
socket every ``kubelet_watch_interval``: when the kubelet restarts it removes the
plugin sockets and recreates ``kubelet.sock``, so either sign restarts the gRPC
server and registers again. Registration failures are retried, never fatal.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path

import grpc

from services.device_plugin.api import VERSION, dp_grpc, dp_pb2
from services.device_plugin.errors import RegistrationFailed
from services.device_plugin.metrics import Metrics
from services.device_plugin.server import DevicePluginServicer, options

logger = logging.getLogger(__name__)

KUBELET_SOCKET = "kubelet.sock"


def endpoint_name(resource_name: str) -> str:
    return "gpucaas-" + resource_name.replace("/", "_") + ".sock"


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


class KubeletRegistrar:
    def __init__(
        self,
        servicer: DevicePluginServicer,
        *,
        plugin_dir: Path,
        resource_name: str,
        metrics: Metrics,
        node: str,
        watch_interval: float = 0.5,
        max_workers: int = 8,
    ) -> None:
        self.servicer = servicer
        self.plugin_dir = Path(plugin_dir)
        self.resource_name = resource_name
        self.endpoint = endpoint_name(resource_name)
        self.socket_path = self.plugin_dir / self.endpoint
        self.kubelet_socket = self.plugin_dir / KUBELET_SOCKET
        self.metrics = metrics
        self.node = node
        self.watch_interval = watch_interval
        self.max_workers = max_workers
        self._server: grpc.Server | None = None
        self._served: tuple[int, int] | None = None
        self._registered_with: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.registrations = 0
        self.registered = threading.Event()
        self._last_failure: str | None = None

    # --- server ----------------------------------------------------------------------
    def serve(self) -> None:
        with self._lock:
            self._stop_server()
            self.plugin_dir.mkdir(parents=True, exist_ok=True)
            if self.socket_path.exists() or self.socket_path.is_symlink():
                logger.info("node=%s removing stale socket %s", self.node, self.socket_path)
                self.socket_path.unlink()
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="dp-grpc"))
            dp_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
            server.add_insecure_port(f"unix://{self.socket_path}")
            server.start()
            self._server = server
            self._served = _inode(self.socket_path)
            logger.info("node=%s serving device plugin for %s on %s", self.node, self.resource_name, self.socket_path)

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait(5)
            self._server = None

    # --- registration ----------------------------------------------------------------
    def register(self, timeout: float = 5.0) -> None:
        target = f"unix://{self.kubelet_socket}"
        kubelet = _inode(self.kubelet_socket)
        if kubelet is None:
            raise RegistrationFailed(f"kubelet socket {self.kubelet_socket} does not exist")
        try:
            with grpc.insecure_channel(target) as channel:
                dp_grpc.RegistrationStub(channel).Register(
                    dp_pb2.RegisterRequest(
                        version=VERSION, endpoint=self.endpoint, resource_name=self.resource_name, options=options()
                    ),
                    timeout=timeout,
                    wait_for_ready=False,
                )
        except grpc.RpcError as exc:
            raise RegistrationFailed(
                f"kubelet at {self.kubelet_socket} refused registration of "
                f"{self.resource_name}: {exc.code().name} {exc.details()}"
            ) from exc
        self._registered_with = kubelet
        self.registrations += 1
        self.metrics.registrations.labels(self.node).inc()
        self.registered.set()
        logger.info(
            "node=%s registered %s (endpoint %s) with the kubelet", self.node, self.resource_name, self.endpoint
        )

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self.serve()
        self._stop.clear()
        self._try_register()
        self._thread = threading.Thread(target=self._watch, name="dp-kubelet-watch", daemon=True)
        self._thread.start()

    def _try_register(self) -> bool:
        try:
            self.register()
            self._last_failure = None
            return True
        except RegistrationFailed as exc:
            # Logged once per distinct failure; retried every watch interval.
            level = logging.DEBUG if str(exc) == self._last_failure else logging.WARNING
            logger.log(level, "node=%s %s; will retry", self.node, exc)
            self._last_failure = str(exc)
            return False

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_interval):
            try:
                self.check()
            except Exception:  # the watcher never dies
                logger.exception("node=%s kubelet watch failed; retrying", self.node)

    def check(self) -> None:
        """One watch step: restart/re-register if the kubelet or our socket changed."""
        kubelet = _inode(self.kubelet_socket)
        ours = _inode(self.socket_path)
        if ours is None or ours != self._served:
            logger.warning(
                "node=%s plugin socket %s vanished (kubelet restart?): serving again", self.node, self.socket_path
            )
            self.serve()
            self._registered_with = None
        if kubelet is not None and kubelet != self._registered_with:
            if self._registered_with is not None:
                logger.warning(
                    "node=%s kubelet.sock was recreated (kubelet restart): restarting server and registering again",
                    self.node,
                )
                self.serve()
                # Served anew once per kubelet restart: a registration that fails (a kubelet slow to
                # answer on a loaded machine) is retried as is, not by restarting the server again.
                self._registered_with = None
            self._try_register()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            self._stop_server()
        self.socket_path.unlink(missing_ok=True)
        logger.info("node=%s device plugin socket %s removed", self.node, self.socket_path)
