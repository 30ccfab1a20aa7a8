"""The product's OCI image as ``deploy/image/build.sh`` builds it, and what its layout holds.

``build()`` runs the recipe, which reuses a clean commit's image and otherwise builds the
product layer on the cached base (docs/image.md), and reads the line it ends with:
``gpucaas:<tag> <manifest digest> oci:<layout>:<tag>``. The last of those is what skopeo copies
from (``skopeo copy oci:<layout>:<tag> docker://...``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "image" / "build.sh"


class ImageBuildFailed(RuntimeError):
    """deploy/image/build.sh failed; the message ends with what it printed."""


@dataclass(frozen=True)
class BuiltImage:
    """One tag of the OCI image layout the recipe writes."""

    layout: Path
    tag: str
    digest: str

    @property
    def reference(self) -> str:
        """The image as skopeo names a tag of an OCI layout."""
        return f"oci:{self.layout}:{self.tag}"

    def blob(self, digest: str) -> Path:
        algorithm, hexdigest = digest.split(":", 1)
        return self.layout / "blobs" / algorithm / hexdigest

    def manifest(self) -> dict[str, Any]:
        return json.loads(self.blob(self.digest).read_text())

    def config(self) -> dict[str, Any]:
        return json.loads(self.blob(self.manifest()["config"]["digest"]).read_text())

    def layers(self) -> list[Path]:
        """The layer archives (gzip-compressed tar), lowest first."""
        return [self.blob(layer["digest"]) for layer in self.manifest()["layers"]]


def build(env: Mapping[str, str] | None = None, timeout: float = 1800, script: Path = BUILD_SCRIPT) -> BuiltImage:
    """The image of the work tree (built unless a clean commit's is there); ``env`` is added to
    this process's environment (``GPUCAAS_IMAGE_REBUILD=1`` builds the product layer again).
    ``script``: another work tree's recipe builds that tree's image (into the same cache)."""
    result = subprocess.run(
        [str(script)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise ImageBuildFailed(f"{script} exited {result.returncode}: {result.stderr[-4000:]}")
    _name, digest, reference = result.stdout.strip().splitlines()[-1].split()
    layout, tag = reference.removeprefix("oci:").rsplit(":", 1)
    return BuiltImage(layout=Path(layout), tag=tag, digest=digest)
