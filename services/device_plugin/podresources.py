"""Adapter: the kubelet PodResources API v1 (which pod holds which device)."""

from __future__ import annotations

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
    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout

    def list(self, resource_name: str | None = None) -> list[ContainerDevices]:
        """Every container's devices (of ``resource_name`` when given)."""
        if not self.socket_path.exists():
            raise PodResourcesUnavailable(f"PodResources socket {self.socket_path} does not exist")
        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                resp = pr_grpc.PodResourcesListerStub(channel).List(pr_pb2.ListPodResourcesRequest(),
                                                                    timeout=self.timeout)
        except grpc.RpcError as exc:
            raise PodResourcesUnavailable(
                f"PodResources List on {self.socket_path} failed: {exc.code().name} {exc.details()}") from exc
        out = []
        for pod in resp.pod_resources:
            for c in pod.containers:
                for d in c.devices:
                    if resource_name is None or d.resource_name == resource_name:
                        out.append(ContainerDevices(pod.namespace, pod.name, c.name, d.resource_name,
                                                    tuple(sorted(d.device_ids))))
        return out
