"""The node-local API: HTTP/1.1 + JSON over a unix socket (FastAPI served by uvicorn).

Used by the device plugin (activate on Allocate, release, sync from the kubelet's
PodResources) and by ``caasctl`` (list, health, forced admin operations). The
wire contract is the one ``gpucaas.core.fabric_client`` speaks. Errors are
``{"code", "detail"}`` with 400 (bad input), 404, 409 (conflict, naming the
holder), 422 (unsupported partition), 503 (Fabric Manager or VM unavailable).

Routes are plain ``def``: FastAPI runs them in its thread pool and the
:class:`PartitionService` lock orders them, so racing requests are decided one
at a time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from services.fabric.errors import FabricServiceError
from services.fabric.partitions import PartitionService

log = logging.getLogger(__name__)


class ActivationCreate(BaseModel):
    holder: str = Field(min_length=1, max_length=512, description="Allocation key, e.g. gpus:0000:18:00.0+...")
    gpus: list[str] = Field(min_length=1, max_length=64, description="GPU PCI addresses")
    pod: str | None = Field(None, description="ns/name of the pod, when known")


class LiveHolder(BaseModel):
    holder: str = Field(min_length=1, max_length=512)
    pod: str | None = None


class SyncRequest(BaseModel):
    live: list[LiveHolder]
    grace_seconds: float | None = Field(None, ge=0, description="Default: the service's release_grace_s")


def create_app(service: PartitionService, vm_state: Callable[[], dict[str, Any]] | None = None,
               *, default_grace_s: float = 30.0) -> FastAPI:
    """The API over ``service``; ``vm_state`` reports the service VM (None: no VM managed)."""
    app = FastAPI(title="gpucaas fabric service", version="1", docs_url=None, redoc_url=None)

    @app.exception_handler(FabricServiceError)
    async def _service_error(_: Request, exc: FabricServiceError) -> JSONResponse:
        return JSONResponse({"code": exc.code, "detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {e.get('msg')}")
        return JSONResponse({"code": "invalid", "detail": "; ".join(parts)}, status_code=400)

    @app.get("/v1/topology")
    def topology() -> dict[str, Any]:
        """GPUs by physical id and PCI bus id, as Fabric Manager knows them, with NVLink health."""
        return service.topology()

    @app.get("/v1/partitions")
    def partitions() -> dict[str, Any]:
        """Every partition with its GPUs, NVLinks, active, supported and holder."""
        return {"partitions": service.list_partitions()}

    @app.get("/v1/activations")
    def activations() -> dict[str, Any]:
        """The activation records: which holder holds which partitions."""
        return {"activations": service.activations()}

    @app.post("/v1/activations")
    def activate(body: ActivationCreate) -> dict[str, Any]:
        """Activate the partition(s) for a GPU set on behalf of a holder (idempotent)."""
        return service.activate(body.holder, body.gpus, pod=body.pod)

    @app.post("/v1/activations/sync")
    def sync(body: SyncRequest) -> dict[str, Any]:
        """Release every activation whose holder is not live and older than the grace."""
        grace = default_grace_s if body.grace_seconds is None else body.grace_seconds
        return service.sync([h.model_dump() for h in body.live], grace)

    @app.delete("/v1/activations/{holder:path}")
    def release(holder: str) -> dict[str, Any]:
        """Deactivate what a holder holds (idempotent)."""
        return service.release(holder)

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        """Fabric Manager reachability, the service VM and GPUs with failed NVLinks."""
        reachable = service.probe()
        failed: list[str] = []
        if reachable:
            try:
                failed = service.failed_gpus()
            except FabricServiceError:
                reachable = False
        return {
            "fabric_manager": {"reachable": reachable, "backend": service.backend,
                               "message": service.status.message, "replays": service.status.replays},
            "service_vm": vm_state() if vm_state else {"state": "unmanaged", "restarts": 0},
            "failed_gpus": failed,
        }

    @app.post("/v1/partitions/{partition_id}/activate")
    def admin_activate(partition_id: int, force: bool = Query(False)) -> dict[str, Any]:
        """Admin: activate one partition (force evicts overlapping holders)."""
        return service.admin_activate(partition_id, force=force)

    @app.post("/v1/partitions/{partition_id}/deactivate")
    def admin_deactivate(partition_id: int, force: bool = Query(False)) -> dict[str, Any]:
        """Admin: deactivate one partition (force even when a holder holds it)."""
        return service.admin_deactivate(partition_id, force=force)

    return app


class UnixServer:
    """uvicorn on a unix socket, in a background thread: stale socket removed, mode set, removed on stop."""

    def __init__(self, app: FastAPI, socket_path: Path, mode: int = 0o660) -> None:
        import uvicorn

        self.socket_path = Path(socket_path)
        self.mode = mode
        config = uvicorn.Config(app, uds=str(self.socket_path), log_level="warning", lifespan="off",
                                access_log=False, timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._thread: threading.Thread | None = None

    def _remove_stale(self) -> None:
        try:
            st = self.socket_path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise FabricServiceError(f"{self.socket_path} exists and is not a socket; refusing to remove it")
        log.info("removing stale socket %s", self.socket_path)
        self.socket_path.unlink()

    def start(self, timeout_s: float = 30.0) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve()),
                                        name="fabric-api", daemon=True)
        self._thread.start()
        ev = threading.Event()
        deadline = timeout_s
        while not self._server.started and deadline > 0 and self._thread.is_alive():
            ev.wait(0.02)
            deadline -= 0.02
        if not self._server.started:
            raise FabricServiceError(f"local API did not start on {self.socket_path}")
        os.chmod(self.socket_path, self.mode)
        log.info("local API listening on %s", self.socket_path)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        log.info("local API on %s stopped", self.socket_path)

    def __enter__(self) -> UnixServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
