"""Kubelet gRPC APIs used by the device plugin: device plugin v1beta1, PodResources v1.

The ``.proto`` files live in ``protos/``; stubs are generated into ``generated/``
at install time (``python -m services.device_plugin.api.build``) and, if absent or
stale (another protobuf version), on first use of one of the names below:

    from services.device_plugin.api import dp_pb2, dp_grpc, pr_pb2, pr_grpc
"""

from __future__ import annotations

from core.grpc_stubs import lazy_stub_loader

#: The device plugin API version sent in RegisterRequest.version.
VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_STUBS = {
    "dp_pb2": "deviceplugin.v1beta1.api_pb2",
    "dp_grpc": "deviceplugin.v1beta1.api_pb2_grpc",
    "pr_pb2": "podresources.v1.api_pb2",
    "pr_grpc": "podresources.v1.api_pb2_grpc",
}


__getattr__ = lazy_stub_loader(__name__, "services.device_plugin.api.build", _STUBS)

__all__ = ["HEALTHY", "UNHEALTHY", "VERSION", "dp_grpc", "dp_pb2", "pr_grpc", "pr_pb2"]
