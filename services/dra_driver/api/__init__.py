"""Kubelet gRPC APIs the DRA driver serves: DRA v1, plugin registration v1, DRA health.

The ``.proto`` files live in ``protos/`` (the kubelet's interfaces, see each file's
header); stubs are generated into ``generated/`` at install time and, if absent or stale,
on first use of one of the names below::

    from services.dra_driver.api import dra_pb2, dra_grpc, reg_pb2, reg_grpc, health_pb2, health_grpc
"""

from __future__ import annotations

from core.grpc_stubs import lazy_stub_loader

#: The plugin type the kubelet's plugin manager routes to its DRA handler.
PLUGIN_TYPE = "DRAPlugin"
#: gRPC service names announced in PluginInfo.supported_versions (the kubelet picks one).
DRA_SERVICE = "v1.DRAPlugin"

_STUBS = {
    "dra_pb2": "dra.v1.api_pb2",
    "dra_grpc": "dra.v1.api_pb2_grpc",
    "reg_pb2": "pluginregistration.v1.api_pb2",
    "reg_grpc": "pluginregistration.v1.api_pb2_grpc",
    "health_pb2": "dra_health.v1.api_pb2",
    "health_grpc": "dra_health.v1.api_pb2_grpc",
    "health_alpha_pb2": "dra_health.v1alpha1.api_pb2",
    "health_alpha_grpc": "dra_health.v1alpha1.api_pb2_grpc",
}


__getattr__ = lazy_stub_loader(__name__, "services.dra_driver.api.build", _STUBS)

__all__ = ["DRA_SERVICE", "PLUGIN_TYPE", *_STUBS]
