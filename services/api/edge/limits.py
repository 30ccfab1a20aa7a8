"""Per-token and per-tenancy limits: request rate, concurrent streams, bad-token back-off,
and in-flight requests per client address.

Rates use the ``limits`` library (moving windows). With a shared storage
(``GPUCAAS_RATE_LIMIT_STORAGE_URL``, a Redis URI) every replica counts in the same
windows, so a token's rate holds for all the API replicas together, not for each.
Without one each replica counts in its own memory: N replicas behind a load balancer
allow a token N times its rate, and the Ingress rate limit (docs/abuse-and-limits.md)
bounds the total.

The rates are counted on the event loop (the authentication dependency is async), so
the shared storage is reached through the library's asyncio storage, never a blocking
client. When it does not answer — refused, timed out, any client error — the request
is counted in the replica's own memory instead (fail open: a Redis outage must not
take the API down, and each replica still enforces the full rate on its own); a
warning is logged when that starts and an info line when the storage answers again,
``gpucaas_api_rate_limit_storage_errors_total`` counts the failures and
``gpucaas_api_rate_limit_shared`` is 0 meanwhile. After a failure the shared storage
is tried again by one request every ``retry_seconds``; the others count locally.

Streams and in-flight requests are process-local resources (a thread and a socket
each), so they are counted in-process by nature, with or without a shared storage.

Every refusal is ``errors.TooManyRequests``: HTTP 429 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import anyio
from limits import RateLimitItem, errors as limits_errors, parse_many
from limits.aio.strategies import MovingWindowRateLimiter as SharedWindow
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import MovingWindowRateLimiter
from prometheus_client import CollectorRegistry, Counter as MetricCounter, Gauge

from services.api import errors

log = logging.getLogger(__name__)

# Keys in the shared storage start with this (several deployments may share one Redis
# database; give each its own database number in the URI).
KEY_PREFIX = "gpucaas"


@dataclass(frozen=True)
class LimitSettings:
    token_rate: str  # e.g. "50/second;1000/minute"
    tenancy_rate: str
    bad_token_rate: str  # per client address: failed authentications before back-off
    streams_per_token: int
    streams_per_tenancy: int
    requests_per_client: int  # in flight at once, per client address
    storage_url: str = ""  # a limits Redis URI shared by the replicas; "" = this process's memory


def shared_storage(url: str, *, timeout: float) -> Any:
    """The limits library's asyncio storage for a Redis URI (``redis://...`` and its
    siblings; ``async+`` is added here). Creating it does no I/O. Its client answers or
    fails within ``timeout`` and never retries on its own: a failure falls back at once."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    uri = url if url.startswith("async+") else "async+" + url
    return storage_from_string(
        uri,
        implementation="redispy",
        key_prefix=KEY_PREFIX,
        wrap_exceptions=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),  # type: ignore[arg-type]  # passed on to redis-py, which takes a Retry
    )


class Limiter:
    """The API's limits, shared by every request of one app instance."""

    def __init__(
        self,
        cfg: LimitSettings,
        *,
        registry: CollectorRegistry | None = None,
        timeout: float = 0.5,
        retry_seconds: float = 5.0,
    ) -> None:
        self.cfg = cfg
        self._local = MovingWindowRateLimiter(MemoryStorage())
        self._shared_storage = shared_storage(cfg.storage_url, timeout=timeout) if cfg.storage_url else None
        self._shared = SharedWindow(self._shared_storage) if self._shared_storage is not None else None
        self._shared_errors: tuple[type[BaseException], ...] = (
            limits_errors.StorageError,
            TimeoutError,
            OSError,
            *_as_tuple(self._shared_storage.base_exceptions if self._shared_storage is not None else ()),
        )
        self._timeout = timeout
        self._retry_seconds = retry_seconds
        self._shared_up = True
        self._retry_at = 0.0
        self._token_rate = parse_many(cfg.token_rate) if cfg.token_rate else []
        self._tenancy_rate = parse_many(cfg.tenancy_rate) if cfg.tenancy_rate else []
        self._bad_token_rate = parse_many(cfg.bad_token_rate) if cfg.bad_token_rate else []
        self._lock = threading.Lock()
        self._streams: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()
        registry = registry if registry is not None else CollectorRegistry()
        self.storage_errors = MetricCounter(
            "gpucaas_api_rate_limit_storage_errors_total",
            "Rate-limit operations the shared storage failed (each was counted in this replica instead).",
            registry=registry,
        )
        self.shared_gauge = Gauge(
            "gpucaas_api_rate_limit_shared",
            "1 while the rates are counted in the shared storage; 0 while this replica counts alone "
            "(no storage configured, or it does not answer).",
            registry=registry,
        )
        self.shared_gauge.set(1 if self._shared is not None else 0)

    @property
    def shared(self) -> bool:
        """Whether the rates are counted in the shared storage right now."""
        return self._shared is not None and self._shared_up

    async def close(self) -> None:
        """Close the shared storage's connections (on the loop that used them)."""
        client = getattr(getattr(self._shared_storage, "bridge", None), "storage", None)
        if client is not None and hasattr(client, "aclose"):
            await client.aclose()

    # --- rates ----------------------------------------------------------------------

    def _use_shared(self) -> bool:
        if self._shared is None:
            return False
        if self._shared_up:
            return True
        now = time.monotonic()
        if now < self._retry_at:
            return False
        # this request tries the storage again; the others keep counting here meanwhile
        self._retry_at = now + self._retry_seconds
        return True

    async def _window(self, op: str, item: RateLimitItem, *keys: str) -> Any:
        """``hit``, ``test`` or ``get_window_stats`` in the shared windows, or in this
        replica's own when there are none or they do not answer."""
        if self._use_shared():
            try:
                with anyio.fail_after(self._timeout):
                    result = await getattr(self._shared, op)(item, *keys)
            except self._shared_errors as exc:
                self._shared_failed(exc)
            else:
                if not self._shared_up:
                    self._shared_up = True
                    self.shared_gauge.set(1)
                    log.info("rate limits: the shared storage answers again; the replicas count together")
                return result
        return getattr(self._local, op)(item, *keys)

    def _shared_failed(self, exc: BaseException) -> None:
        self.storage_errors.inc()
        self._retry_at = time.monotonic() + self._retry_seconds
        if self._shared_up:
            self._shared_up = False
            self.shared_gauge.set(0)
            log.warning(
                "rate limits: the shared storage does not answer (%s: %s); this replica counts alone, "
                "so the replicas together allow more than the rates, until it answers (tried every %.0f s)",
                type(exc).__name__,
                exc,
                self._retry_seconds,
            )

    async def _retry_after(self, item: RateLimitItem, *keys: str) -> int:
        reset, _remaining = await self._window("get_window_stats", item, *keys)
        return max(1, math.ceil(reset - time.time()))

    async def _hit(self, items: list[RateLimitItem], scope: str, key: str, what: str) -> None:
        for item in items:
            if not await self._window("hit", item, scope, key):
                raise errors.TooManyRequests(
                    f"{what}: rate limit of {item} exceeded; retry later",
                    retry_after=await self._retry_after(item, scope, key),
                )

    async def request(self, *, token_id: str, tenancy: str | None) -> None:
        """Count one authenticated request against its token's and tenancy's rates."""
        await self._hit(self._token_rate, "token", token_id, "this token")
        if tenancy is not None:
            await self._hit(self._tenancy_rate, "tenancy", tenancy, f"tenancy {tenancy!r}")

    async def check_bad_tokens(self, client: str) -> None:
        """Refuse (429) a client address that sent too many invalid tokens lately,
        before the token is even looked up."""
        for item in self._bad_token_rate:
            if not await self._window("test", item, "badtoken", client):
                raise errors.TooManyRequests(
                    f"too many invalid tokens from this address; retry after the back-off ({item})",
                    retry_after=await self._retry_after(item, "badtoken", client),
                )

    async def bad_token(self, client: str) -> None:
        for item in self._bad_token_rate:
            await self._window("hit", item, "badtoken", client)

    # --- concurrency ------------------------------------------------------------------

    def stream(self, *, token_id: str, tenancy: str | None) -> StreamSlot:
        """Take one stream slot of the token and of its tenancy (429 when either is full);
        the caller releases it (idempotently) when the stream ends."""
        keys = [("token:" + token_id, self.cfg.streams_per_token)]
        if tenancy is not None:
            keys.append(("tenancy:" + tenancy, self.cfg.streams_per_tenancy))
        with self._lock:
            for key, cap in keys:
                if self._streams[key] >= cap:
                    who = "this token" if key.startswith("token:") else f"tenancy {tenancy!r}"
                    raise errors.TooManyRequests(
                        f"{who} already has {cap} open streams (log follows and exec sessions; the most allowed); "
                        "close one first",
                        retry_after=5,
                    )
            for key, _cap in keys:
                self._streams[key] += 1
        return StreamSlot(self, [k for k, _ in keys])

    def _release(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._streams[key] -= 1
                if self._streams[key] <= 0:
                    del self._streams[key]

    def open_streams(self, *, tenancy: str) -> int:
        with self._lock:
            return self._streams.get("tenancy:" + tenancy, 0)

    def enter_client(self, client: str) -> bool:
        """Count one in-flight request of a client address; False when it has too many."""
        with self._lock:
            if self._in_flight[client] >= self.cfg.requests_per_client:
                return False
            self._in_flight[client] += 1
            return True

    def leave_client(self, client: str) -> None:
        with self._lock:
            self._in_flight[client] -= 1
            if self._in_flight[client] <= 0:
                del self._in_flight[client]


class StreamSlot:
    """One held stream slot; ``release`` may be called any number of times."""

    def __init__(self, limiter: Limiter, keys: list[str]) -> None:
        self._limiter = limiter
        self._keys: list[str] | None = keys

    def release(self) -> None:
        keys, self._keys = self._keys, None
        if keys is not None:
            self._limiter._release(keys)


def _as_tuple(exceptions: Any) -> tuple[type[BaseException], ...]:
    return tuple(exceptions) if isinstance(exceptions, tuple) else (exceptions,)
