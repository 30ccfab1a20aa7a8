"""ASGI middleware at the edge: control characters in the request target (400), requests
in flight per client address (429), the request-body size limit (413) and read timeout
(408), and Prometheus request metrics.

A plain ASGI middleware rather than ``BaseHTTPMiddleware``: it adds no task or
stream copy per request, which matters for the submission hot path.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import unquote_to_bytes

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.api import errors
from services.api.domain import validation
from services.api.edge.limits import Limiter


class Metrics:
    """The API's metrics, in a registry of its own (one per app instance)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gpucaas_api_requests_total",
            "HTTP requests by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpucaas_api_request_seconds",
            "HTTP request latency by route.",
            ["method", "route"],
            registry=self.registry,
        )
        self.submissions = Counter(
            "gpucaas_api_submissions_total", "Containers accepted (202, new).", registry=self.registry
        )
        self.queued = Gauge(
            "gpucaas_api_queued_containers", "Containers committed but without a pod yet.", registry=self.registry
        )
        self.oldest_queued = Gauge(
            "gpucaas_api_oldest_queued_container_age_seconds",
            "How long the longest-waiting queued container has waited for its pod (0: none queued).",
            registry=self.registry,
        )
        self.pods_created = Gauge(
            "gpucaas_api_pods_created", "Pods this replica's worker created since start.", registry=self.registry
        )


class Edge:
    def __init__(
        self,
        app: Any,
        *,
        max_body_bytes: int,
        metrics: Metrics,
        limiter: Limiter | None = None,
        body_timeout: float | None = None,
    ) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.metrics = metrics
        self.limiter = limiter
        self.body_timeout = body_timeout

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_holder = [500]
        limit = self.max_body

        bad = _control_in_target(scope)
        if bad is not None:
            await _reply(send, 400, errors.BadRequest(f"{bad}: {validation.CONTROL_RULE}"))
            self._observe(scope, 400, start)
            return
        client = (scope.get("client") or ("unknown", 0))[0]
        if self.limiter is not None and not self.limiter.enter_client(client):
            cap = self.limiter.cfg.requests_per_client
            await _reply(
                send,
                429,
                errors.TooManyRequests(
                    f"this address already has {cap} requests in flight (the most allowed)", retry_after=1
                ),
            )
            self._observe(scope, 429, start)
            return
        try:
            await self._limited(scope, receive, send, start, status_holder, limit)
        finally:
            if self.limiter is not None:
                self.limiter.leave_client(client)

    async def _limited(
        self, scope: dict[str, Any], receive: Any, send: Any, start: float, status_holder: list[int], limit: int
    ) -> None:

        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -1
                if length > limit:
                    await _reply(send, 413, errors.PayloadTooLarge(_too_large(length, limit)))
                    self._observe(scope, 413, start)
                    return
                break

        seen = [0]
        rejected = [False]

        body_done = [False]

        async def limited_receive() -> dict[str, Any]:
            if rejected[0]:
                return {"type": "http.disconnect"}
            if self.body_timeout is None or body_done[0]:
                message = await receive()
            else:
                try:
                    with anyio.fail_after(self.body_timeout):
                        message = await receive()
                except TimeoutError:
                    # A body that stalls mid-way: answer 408 and let the app see a disconnect.
                    rejected[0] = True
                    status_holder[0] = 408
                    await _reply(
                        send,
                        408,
                        errors.RequestTimeout(
                            f"body: no data for {self.body_timeout:.0f}s; send the request body without pauses"
                        ),
                    )
                    return {"type": "http.disconnect"}
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_done[0] = True
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > limit:
                    # Answer 413 now; the app sees a disconnect and whatever it sends is dropped.
                    rejected[0] = True
                    status_holder[0] = 413
                    await _reply(send, 413, errors.PayloadTooLarge(_too_large(-1, limit)))
                    return {"type": "http.disconnect"}
            return message

        async def send_wrapper(message: dict[str, Any]) -> None:
            if rejected[0]:
                return
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, limited_receive, send_wrapper)
        finally:
            self._observe(scope, status_holder[0], start)

    def _observe(self, scope: dict[str, Any], status: int, start: float) -> None:
        route = scope.get("route")
        path = getattr(route, "path", None) or "unmatched"
        method = scope.get("method", "")
        self.metrics.requests.labels(method, path, str(status)).inc()
        self.metrics.latency.labels(method, path).observe(time.perf_counter() - start)


def _control_in_target(scope: dict[str, Any]) -> str | None:
    """``path`` or ``query`` when the (percent-decoded) request target holds a control
    character: no identifier, name or filter of this API contains one, and PostgreSQL
    refuses NUL in text outright."""
    if validation.has_control(scope.get("path", "")):
        return "path"
    query = scope.get("query_string", b"")
    if query and validation.has_control(unquote_to_bytes(query).decode("utf-8", "replace")):
        return "query"
    return None


def _too_large(size: int, limit: int) -> str:
    shown = f"is {size} bytes" if size >= 0 else "is too large"
    return f"body: request body {shown}; at most {limit} bytes are allowed"


async def _reply(send: Any, status: int, err: errors.ApiError) -> None:
    body = json.dumps({"code": err.code, "detail": err.detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if isinstance(err, errors.TooManyRequests):
        headers.append((b"retry-after", str(err.retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
