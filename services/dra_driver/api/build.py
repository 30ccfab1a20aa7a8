"""The DRA driver's kubelet stubs (DRA v1, plugin registration v1, DRA health v1alpha1/v1).

``python -m services.dra_driver.api.build`` generates them (the Makefile runs it after
``pip install``); :mod:`core.grpc_stubs` says how and why.
"""

from __future__ import annotations

from pathlib import Path

from core.grpc_stubs import StubSet

HERE = Path(__file__).resolve().parent
STUBS = StubSet(
    proto_root=HERE / "protos",
    generated=HERE / "generated",
    protos=(
        "dra/v1/api.proto",
        "pluginregistration/v1/api.proto",
        "dra_health/v1alpha1/api.proto",
        "dra_health/v1/api.proto",
    ),
    build_module=__name__,
)

if __name__ == "__main__":
    raise SystemExit(STUBS.main())
