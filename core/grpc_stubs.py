"""Compile ``.proto`` files kept in the repo into Python gRPC stubs, at install time.

Stubs made by ``grpcio-tools`` pin the protobuf/grpcio versions they were made with,
so each service keeps its kubelet ``.proto`` files in ``<service>/api/protos/`` and has
them generated into its git-ignored ``<service>/api/generated/`` package: by the
Makefile after ``pip install`` (``python -m services.<svc>.api.build``) and again on
first import if missing or stale (a plain ``pip install -e .``). Imports between
generated modules are rewritten to be package-relative so the stubs live under the
service's package. The device plugin and the DRA driver each own one :class:`StubSet`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_STAMP = "_stamp.txt"


class StubGenerationError(RuntimeError):
    """protoc failed to compile the kubelet protos."""


@dataclass(frozen=True)
class StubSet:
    """The ``.proto`` files of one service and where their stubs go.

    ``build_module``: what to run at install time (named in error messages).
    """

    proto_root: Path
    generated: Path
    protos: tuple[str, ...]
    build_module: str

    def fingerprint(self) -> str:
        import grpc_tools
        from google.protobuf import __version__ as pb_version

        sources = "".join((self.proto_root / p).read_text() for p in self.protos)
        digest = hashlib.sha256(sources.encode()).hexdigest()[:16]
        return f"protos={digest} protobuf={pb_version} grpc_tools={getattr(grpc_tools, '__version__', '?')}"

    def is_current(self, out: Path | None = None) -> bool:
        stamp = (out or self.generated) / _STAMP
        try:
            return stamp.read_text().strip() == self.fingerprint()
        except OSError:
            return False

    def generate(self, out: Path | None = None) -> Path:
        """(Re)generate the stubs into ``out`` (default: ``generated``) atomically."""
        import grpc_tools
        from grpc_tools import protoc

        out = out or self.generated
        include = str(Path(grpc_tools.__file__).resolve().parent / "_proto")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".generated-", dir=out.parent))
        # mkdtemp's folder is its owner's alone; the stubs are read by whoever runs the
        # services (in the image, uid 65532 reads what root generated at build time)
        tmp.chmod(0o755)
        try:
            for proto in self.protos:
                rc = protoc.main(
                    [
                        "grpc_tools.protoc",
                        f"-I{self.proto_root}",
                        f"-I{include}",
                        f"--python_out={tmp}",
                        f"--grpc_python_out={tmp}",
                        str(self.proto_root / proto),
                    ]
                )
                if rc != 0:
                    raise StubGenerationError(f"protoc failed (exit {rc}) on {self.proto_root / proto}")
            for proto in self.protos:
                pkg = tmp
                (pkg / "__init__.py").write_text("")
                for part in Path(proto).parent.parts:
                    pkg = pkg / part
                    (pkg / "__init__.py").write_text("")
                _relativise(pkg / "api_pb2_grpc.py")
            (tmp / _STAMP).write_text(self.fingerprint() + "\n")
            old = out.parent / f".old-generated-{os.getpid()}"
            if out.exists():
                out.rename(old)
            try:
                tmp.rename(out)
            except OSError:
                # Another process generated the same stubs at the same moment.
                if not self.is_current(out):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        logger.info("generated gRPC stubs in %s", out)
        return out

    def ensure(self) -> None:
        """Generate the stubs unless current ones exist; a read-only install keeps what it has."""
        if self.is_current():
            return
        try:
            self.generate()
        except OSError as exc:
            first = self.generated / Path(self.protos[0]).with_name("api_pb2.py")
            if not first.exists():
                raise StubGenerationError(
                    f"gRPC stubs missing and {self.generated} not writable ({exc}); run "
                    f"`python -m {self.build_module}` at install time"
                ) from exc
            logger.warning("gRPC stubs in %s are stale and cannot be regenerated (%s); using them", self.generated, exc)

    def main(self) -> int:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        self.generate()
        sys.stdout.write(f"gRPC stubs generated in {self.generated}\n")
        return 0


def _relativise(path: Path) -> None:
    """``from deviceplugin.v1beta1 import api_pb2`` -> ``from . import api_pb2``."""
    text = path.read_text()
    text = re.sub(r"^from [\w.]+ import api_pb2 as", "from . import api_pb2 as", text, flags=re.M)
    path.write_text(text)


def lazy_stub_loader(package: str, build_module: str, stubs: dict[str, str]) -> Any:
    """A module ``__getattr__`` (PEP 562) serving generated stub modules by short name.

    ``stubs`` maps a short name (``dra_pb2``) to a module under ``<package>.generated``;
    the stubs are (re)generated on first use when missing or stale. The :class:`StubSet`
    lives in ``build_module`` and is imported only then, so ``python -m <build_module>``
    never imports stale stubs before regenerating them.
    """
    import importlib

    def __getattr__(name: str) -> Any:  # noqa: N807
        if name not in stubs:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        importlib.import_module(build_module).STUBS.ensure()
        module = importlib.import_module(f"{package}.generated.{stubs[name]}")
        sys.modules[package].__dict__[name] = module
        return module

    return __getattr__
