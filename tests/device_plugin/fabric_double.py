"""A test-local stand-in for the node's fabric service, speaking its documented contract.

HTTP/1.1 + JSON on a unix socket (the contract in the project brief), with the
real partition rules from ``gpucaas.core.topology``: a GPU set that is a partition
activates that partition, any other set one single-GPU partition per GPU; a
needed partition overlapping another holder's active one is a 409; activation is
idempotent per holder; sync releases holders not alive and older than grace.
It exists because the fabric service's server (services/fabric) is being written
in parallel; the plugin reaches it through the real ``FabricClient``.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from gpucaas.core import topology


class FabricDouble:
    def __init__(self, socket_path: Path, physical_map: dict[int, str]) -> None:
        self.socket_path = Path(socket_path)
        self.physical_map = dict(physical_map)  # physical id -> pci
        self.failed: dict[str, str] = {}
        self.unavailable = False  # answer 503 (Fabric Manager down)
        self.activations: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        self._server: socketserver.UnixStreamServer | None = None
        self._thread: threading.Thread | None = None

    # --- rules -----------------------------------------------------------------------
    def _active(self) -> dict[int, str]:
        return {pid: holder for holder, a in self.activations.items() for pid in a["partition_ids"]}

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path, body))
            if self.unavailable and path != "/v1/health":
                return 503, {"code": "fabric_manager_unavailable", "detail": "Fabric Manager unreachable"}
            by_pci = {pci: pid for pid, pci in self.physical_map.items()}
            if method == "GET" and path == "/v1/topology":
                return 200, {"source": "fabric-manager", "gpus": [
                    {"physical_id": pid, "pci_bus_id": pci, "healthy": pci not in self.failed,
                     "reason": self.failed.get(pci)} for pid, pci in sorted(self.physical_map.items())]}
            if method == "GET" and path == "/v1/health":
                return 200, {"fabric_manager": {"reachable": not self.unavailable, "backend": "simulator"},
                             "service_vm": {"state": "running", "restarts": 0},
                             "failed_gpus": sorted(self.failed)}
            if method == "GET" and path == "/v1/activations":
                return 200, {"activations": [dict(a, holder=h) for h, a in self.activations.items()]}
            if method == "POST" and path == "/v1/activations":
                return self._activate(body, by_pci)
            if method == "POST" and path == "/v1/activations/sync":
                live = {x["holder"]: x.get("pod") for x in body.get("live", [])}
                now = time.monotonic()
                for holder in list(self.activations):
                    a = self.activations[holder]
                    if holder in live:
                        a["pod"] = live[holder] or a["pod"]
                    elif now - a["_t"] >= float(body.get("grace_seconds", 0)):
                        del self.activations[holder]
                return 200, {"released": []}
            if method == "DELETE" and path.startswith("/v1/activations/"):
                self.activations.pop(unquote(path.rsplit("/", 1)[1]), None)
                return 200, {}
            return 404, {"code": "not_found", "detail": f"{method} {path}"}

    def _activate(self, body: dict[str, Any], by_pci: dict[str, int]) -> tuple[int, Any]:
        holder, gpus = body.get("holder"), body.get("gpus") or []
        unknown = [g for g in gpus if g not in by_pci]
        if not holder or not gpus or unknown:
            return 400, {"code": "invalid", "detail": f"holder and known gpus required (unknown: {unknown})"}
        parts = topology.partitions_for_gpus(by_pci[g] for g in gpus)
        ids = sorted(p.id for p in parts)
        existing = self.activations.get(holder)
        if existing is not None and sorted(existing["gpus"]) == sorted(gpus):
            return 200, {"holder": holder, "gpus": existing["gpus"], "partition_ids": existing["partition_ids"],
                         "nvlink": any(p.size > 1 for p in parts)}
        active = self._active()
        for p in parts:
            for pid, other in active.items():
                if other != holder and topology.partition_by_id(pid).overlaps(p):
                    return 409, {"code": "conflict", "detail": f"partition {p.id} overlaps partition {pid} "
                                                               f"held by {other}"}
        self.activations[holder] = {"gpus": sorted(gpus), "partition_ids": ids, "pod": None,
                                    "since": datetime.now(UTC).isoformat(), "_t": time.monotonic()}
        return 200, {"holder": holder, "gpus": sorted(gpus), "partition_ids": ids,
                     "nvlink": any(p.size > 1 for p in parts)}

    # --- server ----------------------------------------------------------------------
    def start(self) -> FabricDouble:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _do(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                status, payload = double.handle(self.command, urlparse(self.path).path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _do  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return None

            def address_string(self) -> str:
                return "unix"

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.socket_path.unlink(missing_ok=True)
        self._server = Server(str(self.socket_path), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.socket_path.unlink(missing_ok=True)
