"""Compile the kubelet ``.proto`` files kept in the repo into Python gRPC stubs.

Stubs made by ``grpcio-tools`` pin the protobuf/grpcio versions they were made
with, so they are generated at install time (``python -m
services.device_plugin.api.build``, run by the Makefile after ``pip install``)
into the git-ignored ``generated/`` package, and regenerated on first import if
missing (a plain ``pip install -e .``). Imports between generated modules are
rewritten to be package-relative so the stubs live under this package.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE / "protos"
GENERATED = HERE / "generated"
PROTOS = ("deviceplugin/v1beta1/api.proto", "podresources/v1/api.proto")
_STAMP = "_stamp.txt"


class StubGenerationError(RuntimeError):
    """protoc failed to compile the kubelet protos."""


def _fingerprint() -> str:
    import grpc_tools
    from google.protobuf import __version__ as pb_version

    sources = "".join((PROTO_ROOT / p).read_text() for p in PROTOS)
    digest = hashlib.sha256(sources.encode()).hexdigest()[:16]
    return f"protos={digest} protobuf={pb_version} grpc_tools={getattr(grpc_tools, '__version__', '?')}"


def is_current(out: Path = GENERATED) -> bool:
    stamp = out / _STAMP
    try:
        return stamp.read_text().strip() == _fingerprint()
    except OSError:
        return False


def generate(out: Path = GENERATED) -> Path:
    """(Re)generate the stubs into ``out`` atomically and return it."""
    import grpc_tools
    from grpc_tools import protoc

    include = str(Path(grpc_tools.__file__).resolve().parent / "_proto")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".generated-", dir=out.parent))
    try:
        for proto in PROTOS:
            rc = protoc.main([
                "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}",
                f"--python_out={tmp}", f"--grpc_python_out={tmp}", str(PROTO_ROOT / proto),
            ])
            if rc != 0:
                raise StubGenerationError(f"protoc failed (exit {rc}) on {PROTO_ROOT / proto}")
        for proto in PROTOS:
            pkg = tmp
            (pkg / "__init__.py").write_text("")
            for part in Path(proto).parent.parts:
                pkg = pkg / part
                (pkg / "__init__.py").write_text("")
            _relativise(pkg / "api_pb2_grpc.py")
        (tmp / _STAMP).write_text(_fingerprint() + "\n")
        old = out.parent / f".old-generated-{os.getpid()}"
        if out.exists():
            out.rename(old)
        try:
            tmp.rename(out)
        except OSError:
            # Another process generated the same stubs at the same moment.
            if not is_current(out):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("generated kubelet gRPC stubs in %s", out)
    return out


def _relativise(path: Path) -> None:
    """``from deviceplugin.v1beta1 import api_pb2`` -> ``from . import api_pb2``."""
    text = path.read_text()
    text = re.sub(r"^from [\w.]+ import api_pb2 as", "from . import api_pb2 as", text, flags=re.M)
    path.write_text(text)


def ensure() -> None:
    """Generate the stubs unless current ones exist; a read-only install keeps what it has."""
    if is_current():
        return
    try:
        generate()
    except OSError as exc:
        if not (GENERATED / "deviceplugin" / "v1beta1" / "api_pb2.py").exists():
            raise StubGenerationError(
                f"kubelet gRPC stubs missing and {GENERATED} not writable ({exc}); run "
                "`python -m services.device_plugin.api.build` at install time") from exc
        logger.warning("kubelet gRPC stubs in %s are stale and cannot be regenerated (%s); using them",
                       GENERATED, exc)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    generate()
    sys.stdout.write(f"kubelet gRPC stubs generated in {GENERATED}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
