"""HTTP transport of the scheduler extender: the verbs kube-scheduler calls.

``POST /filter`` and ``POST /prioritize`` take ``ExtenderArgs``; ``POST /bind``
takes ``ExtenderBindingArgs`` (served when a binder is configured). The work is
in ``extender.py``; this module only moves bytes and maps errors to
``{code, detail}`` (plus the protocol's ``Error`` field, which is what the
scheduler logs). ``GET /healthz`` answers while the process runs, ``GET /readyz``
once the node states are loaded; ``GET /v1/nodes`` shows the fleet as the
extender sees it (free GPUs per node), for operators.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from services.placement import extender
from services.placement.errors import BindingDisabled, PlacementError
from services.placement.extender import BindingArgs
from services.placement.fit import gpus_of
from services.placement.fleet import FleetIndex

log = logging.getLogger(__name__)


class Binder(Protocol):
    """Binds a pod to a node (the Kubernetes adapter implements it), given the pods filtered."""

    def remember(self, pod: dict[str, Any]) -> None: ...

    def bind(self, args: BindingArgs) -> None: ...


def _json(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _error(exc: PlacementError) -> Response:
    return _json({"code": exc.code, "detail": exc.detail, "Error": exc.detail}, exc.status)


def create_app(
    index: FleetIndex,
    *,
    binder: Binder | None = None,
    ready: Callable[[], bool] = lambda: True,
    gpu_resource: str = extender.GPU_RESOURCE,
) -> FastAPI:
    """The extender's FastAPI application over one fleet index."""
    app = FastAPI(title="gpucaas scheduler extender", docs_url=None, redoc_url=None)

    @app.post("/filter")
    async def filter_nodes(request: Request) -> Response:
        """Keep the nodes that can give the pod a whole NVLink partition of its size."""
        try:
            args = extender.parse_extender_args(await request.body())
            result = orjson.dumps(extender.filter_result(index, args, gpu_resource))
        except PlacementError as exc:
            log.warning("filter request rejected: %s", exc.detail)
            return _error(exc)
        if binder is not None:
            binder.remember(args.pod)  # its bind comes next: no need to read it again then
        return Response(result, media_type="application/json")

    @app.post("/prioritize")
    async def prioritize_nodes(request: Request) -> Response:
        """Score the nodes 0..10, best fit (fewest free larger partitions broken) highest."""
        try:
            result = extender.handle_prioritize(index, await request.body(), gpu_resource)
        except PlacementError as exc:
            log.warning("prioritize request rejected: %s", exc.detail)
            return _error(exc)
        return Response(result, media_type="application/json")

    @app.post("/bind")
    async def bind_pod(request: Request) -> Response:
        """Bind the pod to the chosen node and count its GPUs as taken at once."""
        try:
            args = extender.parse_binding_args(await request.body())
            if binder is None:
                raise BindingDisabled("this extender does not bind (no Kubernetes binder configured)")
            await run_in_threadpool(binder.bind, args)
        except PlacementError as exc:
            log.warning("bind failed: %s", exc.detail)
            return _error(exc) if exc.status == 400 else _json(extender.build_binding_result(exc.detail), 200)
        log.info("bound pod %s/%s to node %s", args.pod_namespace, args.pod_name, args.node)
        return _json(extender.build_binding_result())

    @app.get("/healthz")
    async def healthz() -> Response:
        """Liveness."""
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        """Readiness: the node states have been loaded."""
        ok = ready()
        return _json({"ready": ok, "nodes": len(index)}, 200 if ok else 503)

    @app.get("/v1/nodes")
    async def nodes() -> Response:
        """The fleet as the extender sees it: free and healthy GPUs per node."""
        out = []
        for name in sorted(index.names()):
            node = index.node(name)
            if node is None:
                continue
            out.append(
                {
                    "node": name,
                    "free": sorted(gpus_of(node.free_mask)),
                    "healthy": sorted(gpus_of(node.healthy_mask)),
                    "usable": node.usable,
                    "reason": node.reason,
                }
            )
        return _json({"nodes": out})

    return app
