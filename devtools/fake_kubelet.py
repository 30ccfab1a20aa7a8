"""A fake kubelet for device plugin tests and the sandbox: real gRPC on unix sockets.

It plays the two kubelet roles a device plugin meets:

* the device manager: a ``v1beta1.Registration`` server on ``<plugin_dir>/kubelet.sock``.
  On Register it checks the request like the kubelet (API version, resource name,
  endpoint), then dials the plugin's socket, calls ``GetDevicePluginOptions`` and
  consumes the ``ListAndWatch`` stream in a thread. ``admit()`` then acts like pod
  admission: free healthy devices -> ``GetPreferredAllocation`` (when the plugin
  offers it; an invalid answer is ignored as the kubelet does) -> ``Allocate`` ->
  ``PreStartContainer`` (when required), and records the devices against the pod.
* the PodResources v1 server (``List``, ``Get``, ``GetAllocatableResources``) on its
  own socket, fed by what ``admit()`` allocated.

``restart()`` is a kubelet restart: the registration server stops, every plugin
socket in the directory and ``kubelet.sock`` are removed (the kubelet's device
manager empties its socket directory on start), registrations are forgotten, and
a fresh ``kubelet.sock`` is served. Plugins must notice and register again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from services.device_plugin.api import dp_grpc, dp_pb2, pr_grpc, pr_pb2

logger = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"


class AdmissionError(Exception):
    """The kubelet would fail the pod's admission (UnexpectedAdmissionError)."""


@dataclass
class PluginConnection:
    """One registered plugin as the kubelet sees it."""

    request: dp_pb2.RegisterRequest
    socket_path: Path
    channel: grpc.Channel
    stub: dp_grpc.DevicePluginStub
    options: dp_pb2.DevicePluginOptions | None = None
    devices: dict[str, dp_pb2.Device] = field(default_factory=dict)
    updates: int = 0
    stream_ended: bool = False
    stream_error: str | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    _call: object | None = None

    @property
    def resource_name(self) -> str:
        return self.request.resource_name

    def healthy(self) -> list[str]:
        with self.cond:
            return sorted(i for i, d in self.devices.items() if d.health == HEALTHY)

    def health(self) -> dict[str, str]:
        with self.cond:
            return {i: d.health for i, d in self.devices.items()}

    def wait_for(self, predicate: Callable[[PluginConnection], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate(self)`` holds after a ListAndWatch update (or now)."""
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self), timeout)

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()  # type: ignore[attr-defined]
        self.channel.close()


@dataclass(frozen=True)
class Allocation:
    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]
    response: dp_pb2.ContainerAllocateResponse
    preferred: tuple[str, ...] | None


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def Register(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC names
        if request.version != API_VERSION:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unsupported API version {request.version!r}, expected {API_VERSION}"
            )
        if "/" not in request.resource_name:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid resource name {request.resource_name!r}")
        if not request.endpoint or "/" in request.endpoint:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid endpoint {request.endpoint!r}")
        self.kubelet._registered(request)
        return dp_pb2.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pr_pb2.ListPodResourcesResponse(pod_resources=self.kubelet._pod_resources())

    def Get(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        for pod in self.kubelet._pod_resources():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pr_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        out = []
        for conn in self.kubelet.plugins.values():
            out.append(pr_pb2.ContainerDevices(resource_name=conn.resource_name, device_ids=conn.healthy()))
        return pr_pb2.AllocatableResourcesResponse(devices=out)


class FakeKubelet:
    def __init__(
        self, plugin_dir: Path, pod_resources_socket: Path | None = None, *, wipe_on_restart: bool = True
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.socket_path = self.plugin_dir / "kubelet.sock"
        self.pod_resources_socket = Path(pod_resources_socket) if pod_resources_socket else None
        self.wipe_on_restart = wipe_on_restart
        self.plugins: dict[str, PluginConnection] = {}
        self.registrations: list[dp_pb2.RegisterRequest] = []
        self.allocations: list[Allocation] = []
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._server: grpc.Server | None = None
        self._pr_server: grpc.Server | None = None

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._serve_registration()
        if self.pod_resources_socket is not None:
            self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
            self.pod_resources_socket.unlink(missing_ok=True)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fk-podres"))
            pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), server)
            server.add_insecure_port(f"unix://{self.pod_resources_socket}")
            server.start()
            self._pr_server = server
        return self

    def _serve_registration(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fk-reg"))
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def _forget_plugins(self) -> None:
        with self._lock:
            plugins, self.plugins = self.plugins, {}
        for conn in plugins.values():
            conn.close()

    def restart(self) -> None:
        """Kubelet restart: drop registrations, empty the socket dir, serve a new kubelet.sock."""
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        self._forget_plugins()
        self.socket_path.unlink(missing_ok=True)
        if self.wipe_on_restart:
            for p in self.plugin_dir.iterdir():
                if p.is_socket():
                    p.unlink()
        self._serve_registration()

    def stop(self) -> None:
        for server in (self._server, self._pr_server):
            if server is not None:
                server.stop(grace=None).wait(5)
        self._server = self._pr_server = None
        self._forget_plugins()
        self.socket_path.unlink(missing_ok=True)
        if self.pod_resources_socket is not None:
            self.pod_resources_socket.unlink(missing_ok=True)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- registration ----------------------------------------------------------------
    def _registered(self, request: dp_pb2.RegisterRequest) -> None:
        path = self.plugin_dir / request.endpoint
        channel = grpc.insecure_channel(f"unix://{path}")
        conn = PluginConnection(
            request=request, socket_path=path, channel=channel, stub=dp_grpc.DevicePluginStub(channel)
        )
        with self._lock:
            old = self.plugins.get(request.resource_name)
            self.plugins[request.resource_name] = conn
            self.registrations.append(request)
            self._cond.notify_all()
        if old is not None:
            old.close()
        threading.Thread(target=self._run_plugin, args=(conn,), name="fk-listandwatch", daemon=True).start()

    def _run_plugin(self, conn: PluginConnection) -> None:
        try:
            while True:
                try:
                    conn.options = conn.stub.GetDevicePluginOptions(dp_pb2.Empty(), timeout=10, wait_for_ready=True)
                    break
                except grpc.RpcError as exc:
                    # A plugin that is slow to answer (a loaded machine) is asked again while its
                    # socket is there; one that went away ends the connection (it registers anew).
                    if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED or not conn.socket_path.exists():
                        raise
                    logger.warning(
                        "fake kubelet: %s: GetDevicePluginOptions timed out; asking again", conn.resource_name
                    )
            call = conn.stub.ListAndWatch(dp_pb2.Empty(), wait_for_ready=True)
            conn._call = call
            for resp in call:
                with conn.cond:
                    conn.devices = {d.ID: d for d in resp.devices}
                    conn.updates += 1
                    conn.cond.notify_all()
        except grpc.RpcError as exc:
            conn.stream_error = f"{exc.code().name}: {exc.details()}"
        except ValueError as exc:  # channel closed under us
            conn.stream_error = str(exc)
        finally:
            with conn.cond:
                conn.stream_ended = True
                conn.cond.notify_all()

    def wait_for_plugin(self, resource_name: str, *, registrations: int = 1, timeout: float = 15.0) -> PluginConnection:
        """The plugin once it has registered ``registrations`` times and its first list arrived."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (
                    resource_name in self.plugins
                    and sum(r.resource_name == resource_name for r in self.registrations) >= registrations
                ),
                timeout,
            )
            if not ok:
                raise TimeoutError(f"no registration #{registrations} of {resource_name} within {timeout}s")
            conn = self.plugins[resource_name]
        if not conn.wait_for(lambda c: c.updates > 0 and c.options is not None, timeout):
            raise TimeoutError(f"{resource_name}: no ListAndWatch update within {timeout}s ({conn.stream_error})")
        return conn

    # --- admission -------------------------------------------------------------------
    def allocated_ids(self, resource_name: str) -> set[str]:
        with self._lock:
            return {d for a in self.allocations if a.resource_name == resource_name for d in a.device_ids}

    def admit(
        self,
        namespace: str,
        pod: str,
        resource_name: str,
        count: int,
        *,
        container: str = "main",
        devices: Sequence[str] | None = None,
        timeout: float | None = 10.0,
    ) -> Allocation:
        """Admit one container asking ``count`` devices (or exactly ``devices``), like the kubelet.
        ``timeout``: seconds per call to the plugin; None for none (the kubelet's device manager
        sets no deadline on GetPreferredAllocation and Allocate)."""
        conn = self.plugins.get(resource_name)
        if conn is None:
            raise AdmissionError(f"resource {resource_name} has no registered device plugin")
        with self._lock:
            available = [d for d in conn.healthy() if d not in self.allocated_ids(resource_name)]
        preferred: tuple[str, ...] | None = None
        if devices is None:
            if len(available) < count:
                raise AdmissionError(f"requested {count} {resource_name}, only {len(available)} available")
            chosen = available[:count]
            if conn.options is not None and conn.options.get_preferred_allocation_available:
                try:
                    resp = conn.stub.GetPreferredAllocation(
                        dp_pb2.PreferredAllocationRequest(
                            container_requests=[
                                dp_pb2.ContainerPreferredAllocationRequest(
                                    available_deviceIDs=available, must_include_deviceIDs=[], allocation_size=count
                                )
                            ]
                        ),
                        timeout=timeout,
                    )
                    preferred = tuple(resp.container_responses[0].deviceIDs)
                    if len(preferred) == count and set(preferred) <= set(available):
                        chosen = list(preferred)
                    else:
                        logger.warning("fake kubelet: preferred allocation %s invalid, ignored", preferred)
                except grpc.RpcError as exc:
                    logger.warning("fake kubelet: GetPreferredAllocation failed: %s", exc.details())
        else:
            chosen = list(devices)
        try:
            resp = conn.stub.Allocate(
                dp_pb2.AllocateRequest(container_requests=[dp_pb2.ContainerAllocateRequest(devices_ids=chosen)]),
                timeout=timeout,
            )
            if conn.options is not None and conn.options.pre_start_required:
                conn.stub.PreStartContainer(dp_pb2.PreStartContainerRequest(devices_ids=chosen), timeout=timeout)
        except grpc.RpcError as exc:
            raise AdmissionError(f"Allocate failed: {exc.code().name}: {exc.details()}") from exc
        alloc = Allocation(
            namespace, pod, container, resource_name, tuple(chosen), resp.container_responses[0], preferred
        )
        with self._lock:
            self.allocations.append(alloc)
        return alloc

    def remove_pod(self, namespace: str, pod: str) -> None:
        with self._lock:
            self.allocations = [a for a in self.allocations if (a.namespace, a.pod) != (namespace, pod)]

    def _pod_resources(self) -> list[pr_pb2.PodResources]:
        with self._lock:
            pods: dict[tuple[str, str], pr_pb2.PodResources] = {}
            for a in self.allocations:
                pod = pods.setdefault((a.namespace, a.pod), pr_pb2.PodResources(name=a.pod, namespace=a.namespace))
                cont = next((c for c in pod.containers if c.name == a.container), None)
                if cont is None:
                    cont = pod.containers.add(name=a.container)
                for device in a.device_ids:  # one entry per device, as the kubelet answers
                    cont.devices.add(resource_name=a.resource_name, device_ids=[device])
            return list(pods.values())
