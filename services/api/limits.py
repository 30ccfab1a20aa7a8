"""Per-token and per-tenancy limits: request rate, concurrent streams, bad-token back-off,
and in-flight requests per client address.

Rates use the ``limits`` library (moving windows) with in-process storage: each API
replica enforces the configured rate on its own, so with N replicas behind a
load balancer a token gets at most N times the rate — the deployment's Ingress
rate limit (docs/abuse-and-limits.md) bounds the total. Streams and in-flight
requests are process-local resources (a thread and a socket each), so they are
counted in-process by nature.

Every refusal is ``errors.TooManyRequests``: HTTP 429 with ``Retry-After``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from services.api import errors


@dataclass(frozen=True)
class LimitSettings:
    token_rate: str  # e.g. "50/second;1000/minute"
    tenancy_rate: str
    bad_token_rate: str  # per client address: failed authentications before back-off
    streams_per_token: int
    streams_per_tenancy: int
    requests_per_client: int  # in flight at once, per client address


class Limiter:
    """The API's limits, shared by every request of one app instance."""

    def __init__(self, cfg: LimitSettings) -> None:
        self.cfg = cfg
        self._storage = MemoryStorage()
        self._window = MovingWindowRateLimiter(self._storage)
        self._token_rate = parse_many(cfg.token_rate) if cfg.token_rate else []
        self._tenancy_rate = parse_many(cfg.tenancy_rate) if cfg.tenancy_rate else []
        self._bad_token_rate = parse_many(cfg.bad_token_rate) if cfg.bad_token_rate else []
        self._lock = threading.Lock()
        self._streams: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()

    # --- rates ----------------------------------------------------------------------

    def _retry_after(self, item: RateLimitItem, *keys: str) -> int:
        reset, _remaining = self._window.get_window_stats(item, *keys)
        return max(1, math.ceil(reset - time.time()))

    def _hit(self, items: list[RateLimitItem], scope: str, key: str, what: str) -> None:
        for item in items:
            if not self._window.hit(item, scope, key):
                raise errors.TooManyRequests(
                    f"{what}: rate limit of {item} exceeded; retry later",
                    retry_after=self._retry_after(item, scope, key),
                )

    def request(self, *, token_id: str, tenancy: str | None) -> None:
        """Count one authenticated request against its token's and tenancy's rates."""
        self._hit(self._token_rate, "token", token_id, "this token")
        if tenancy is not None:
            self._hit(self._tenancy_rate, "tenancy", tenancy, f"tenancy {tenancy!r}")

    def check_bad_tokens(self, client: str) -> None:
        """Refuse (429) a client address that sent too many invalid tokens lately,
        before the token is even looked up."""
        for item in self._bad_token_rate:
            if not self._window.test(item, "badtoken", client):
                raise errors.TooManyRequests(
                    f"too many invalid tokens from this address; retry after the back-off ({item})",
                    retry_after=self._retry_after(item, "badtoken", client),
                )

    def bad_token(self, client: str) -> None:
        for item in self._bad_token_rate:
            self._window.hit(item, "badtoken", client)

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
                        f"{who} already has {cap} open log streams (the most allowed); close one first",
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
