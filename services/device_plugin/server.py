"""Transport: the DevicePlugin gRPC servicer (device plugin API v1beta1).

Thin: it converts messages to calls on ``PluginCore`` and the service's errors
to gRPC status codes with a clear message (the kubelet shows it in the pod's
admission error).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc

from services.device_plugin.api import HEALTHY, UNHEALTHY, dp_grpc, dp_pb2
from services.device_plugin.errors import (
    ActivationConflict,
    ActivationRejected,
    DevicePluginError,
    DeviceReleasing,
    DeviceUnhealthy,
    FabricUnavailable,
    InvalidRequest,
)
from services.device_plugin.plugin import DeviceState, PluginCore

logger = logging.getLogger(__name__)

_STATUS: list[tuple[type[DevicePluginError], grpc.StatusCode]] = [
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    # before DeviceUnhealthy, its base: a wait, not a refusal for good (the API remakes a pod
    # whose start is refused with FailedPrecondition, see services.api.domain.pods.refused_before_start)
    (DeviceReleasing, grpc.StatusCode.UNAVAILABLE),
    (DeviceUnhealthy, grpc.StatusCode.FAILED_PRECONDITION),
    (FabricUnavailable, grpc.StatusCode.UNAVAILABLE),
    (ActivationConflict, grpc.StatusCode.ABORTED),
    (ActivationRejected, grpc.StatusCode.FAILED_PRECONDITION),
]

#: How long a ListAndWatch stream waits before checking its client is still there.
STREAM_POLL_SECONDS = 1.0


def _abort(context: grpc.ServicerContext, exc: DevicePluginError) -> None:
    code = next((c for t, c in _STATUS if isinstance(exc, t)), grpc.StatusCode.INTERNAL)
    context.abort(code, str(exc))


def device_message(d: DeviceState) -> dp_pb2.Device:
    msg = dp_pb2.Device(ID=d.bdf, health=HEALTHY if d.healthy else UNHEALTHY)
    if d.numa_node is not None:
        msg.topology.nodes.add(ID=d.numa_node)
    return msg


class DevicePluginServicer(dp_grpc.DevicePluginServicer):
    def __init__(self, core: PluginCore) -> None:
        self.core = core

    def GetDevicePluginOptions(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC names
        return options()

    def ListAndWatch(self, request: Any, context: grpc.ServicerContext) -> Iterator[dp_pb2.ListAndWatchResponse]:  # noqa: N802
        devices, version = self.core.snapshot()
        yield dp_pb2.ListAndWatchResponse(devices=[device_message(d) for d in devices])
        while context.is_active() and not self.core.stopped:
            new = self.core.wait_for_change(version, STREAM_POLL_SECONDS)
            if new != version and not self.core.stopped:
                devices, version = self.core.snapshot()
                yield dp_pb2.ListAndWatchResponse(devices=[device_message(d) for d in devices])

    def GetPreferredAllocation(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        resp = dp_pb2.PreferredAllocationResponse()
        try:
            for req in request.container_requests:
                ids = self.core.preferred(
                    list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
                )
                resp.container_responses.add(deviceIDs=ids)
        except DevicePluginError as exc:
            _abort(context, exc)
        return resp

    def Allocate(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        resp = dp_pb2.AllocateResponse()
        try:
            for req in request.container_requests:
                alloc = self.core.allocate(list(req.devices_ids))
                c = resp.container_responses.add()
                c.cdi_devices.extend(dp_pb2.CDIDevice(name=n) for n in alloc.cdi_devices)
                c.envs.update(alloc.envs)
                c.annotations.update(alloc.annotations)
        except DevicePluginError as exc:
            logger.warning(
                "node=%s Allocate %s refused: %s",
                self.core.node,
                [list(r.devices_ids) for r in request.container_requests],
                exc,
            )
            _abort(context, exc)
        return resp

    def PreStartContainer(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            self.core.pre_start(list(request.devices_ids))
        except DevicePluginError as exc:
            _abort(context, exc)
        return dp_pb2.PreStartContainerResponse()


def options() -> dp_pb2.DevicePluginOptions:
    # PreStartContainer re-checks health between Allocate and container start.
    return dp_pb2.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)
