"""What the DRA driver has prepared, kept on disk so Unprepare works after a restart.

The kubelet calls NodeUnprepareResources with only the claim's namespace, name and UID;
by then the ResourceClaim may be gone from the API server. The checkpoint keeps, per
claim UID, the devices handed out and the fabric holder whose partition must be
released. Written atomically (temporary file, fsync, rename) before a Prepare answers
and after an Unprepare released, so a crash between the two at worst repeats a step
(both are idempotent).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

VERSION = 1


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    holder: str
    pci_addresses: tuple[str, ...]
    devices: tuple[PreparedDevice, ...] = field(default_factory=tuple)
    pod: str = ""  # the pod the claim was reserved for when prepared (for GPU leases)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreparedClaim:
        devices = tuple(
            PreparedDevice(tuple(d["request_names"]), d["pool_name"], d["device_name"], tuple(d["cdi_device_ids"]))
            for d in data["devices"]
        )
        return cls(
            data["uid"],
            data["namespace"],
            data["name"],
            data["holder"],
            tuple(data["pci_addresses"]),
            devices,
            data.get("pod", ""),
        )


class Checkpoint:
    """Claim UID -> :class:`PreparedClaim`, persisted in one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = {}
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("version") != VERSION:
                raise ValueError(f"{path}: checkpoint version {data.get('version')!r}, expected {VERSION}")
            self._claims = {uid: PreparedClaim.from_json(c) for uid, c in data["claims"].items()}

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def all(self) -> list[PreparedClaim]:
        with self._lock:
            return list(self._claims.values())

    def put(self, claim: PreparedClaim) -> None:
        with self._lock:
            self._claims[claim.uid] = claim
            self._write()

    def remove(self, uid: str) -> None:
        with self._lock:
            if self._claims.pop(uid, None) is not None:
                self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps(
            {"version": VERSION, "claims": {u: asdict(c) for u, c in self._claims.items()}}, indent=1, sort_keys=True
        )
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
