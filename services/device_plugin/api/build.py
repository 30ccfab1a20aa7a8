"""The device plugin's kubelet stubs (device plugin v1beta1, PodResources v1).

``python -m services.device_plugin.api.build`` generates them (the Makefile runs it
after ``pip install``); :mod:`core.grpc_stubs` says how and why.
"""

from __future__ import annotations

from pathlib import Path

from core.grpc_stubs import StubGenerationError, StubSet

HERE = Path(__file__).resolve().parent
STUBS = StubSet(
    proto_root=HERE / "protos",
    generated=HERE / "generated",
    protos=("deviceplugin/v1beta1/api.proto", "podresources/v1/api.proto"),
    build_module=__name__,
)
GENERATED = STUBS.generated
generate = STUBS.generate
is_current = STUBS.is_current
ensure = STUBS.ensure

__all__ = ["GENERATED", "STUBS", "StubGenerationError", "ensure", "generate", "is_current"]

if __name__ == "__main__":
    raise SystemExit(STUBS.main())
