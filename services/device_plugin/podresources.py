"""Adapter: the kubelet PodResources API v1 (which pod holds which device)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from services.device_plugin.api import pr_grpc, pr_pb2
from services.device_plugin.errors import DevicePluginError


class PodResourcesUnavailable(DevicePluginError):
    """The kubelet's PodResources socket cannot be reached."""


@dataclass(frozen=True)
class ContainerDevices:
    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


class PodResourcesReader:
    """One kept-open channel to the kubelet's PodResources socket, shared by its callers (a
    gRPC channel is thread-safe). A channel per call cost a connection set-up and tear-down
    on every scan of an idle node; after a failed call (e.g. the kubelet restarted) the
    channel is dropped and the next call opens a fresh one, without gRPC's reconnect backoff."""

    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: pr_grpc.PodResourcesListerStub | None = None

    def _lister(self) -> pr_grpc.PodResourcesListerStub:
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
                self._stub = pr_grpc.PodResourcesListerStub(self._channel)
            return self._stub

    def close(self) -> None:
        with self._lock:
            channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def list(self, resource_name: str | None = None) -> list[ContainerDevices]:
        """Every container's devices (of ``resource_name`` when given), one entry per container
        and resource.

        The kubelet answers one ``ContainerDevices`` per device (per device and NUMA node where
        the plugin reports topology: ``containerDevicesFromResourceDeviceInstances`` in
        ``pkg/kubelet/cm``), so a container's entries are merged here: a 4-GPU container is one
        holder of four GPUs, not four holders of one."""
        if not self.socket_path.exists():
            self.close()
            raise PodResourcesUnavailable(f"PodResources socket {self.socket_path} does not exist")
        try:
            resp = self._lister().List(pr_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            self.close()
            raise PodResourcesUnavailable(
                f"PodResources List on {self.socket_path} failed: {exc.code().name} {exc.details()}"
            ) from exc
        merged: dict[tuple[str, str, str, str], set[str]] = {}
        for pod in resp.pod_resources:
            for c in pod.containers:
                for d in c.devices:
                    if resource_name is None or d.resource_name == resource_name:
                        merged.setdefault((pod.namespace, pod.name, c.name, d.resource_name), set()).update(
                            d.device_ids
                        )
        return [
            ContainerDevices(ns, pod, container, resource, tuple(sorted(ids)))
            for (ns, pod, container, resource), ids in merged.items()
        ]
