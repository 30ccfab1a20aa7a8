"""Verified bearer tokens, remembered briefly in-process so that most requests make no
token query.

An entry maps the token's SHA-256 digest (never the secret) to what authorisation
needs: id, name, tenancy, scope, expiry, last use. It lives ``ttl`` seconds
(``GPUCAAS_TOKEN_CACHE_SECONDS``, default 5; 0 turns the cache off). A revocation (a
token revoked, its tenancy deleted) holds on the next request on every replica:

* in this process, the entries are forgotten right after the commit (:func:`revoked`,
  called by ``store.tokens`` and ``store.tenancies``);
* on PostgreSQL, every other replica forgets them too before the revocation is answered
  (``services.api.security.revocations``: a notification each replica acknowledges). A cache is
  then *guarded*: it serves entries only until :attr:`TokenCache.valid_until`, which that
  replica's revocation listener pushes forward while it holds its lease; a replica that
  cannot hear revocations stops serving from its cache when the lease runs out, and starts
  again empty once it hears again (:meth:`TokenCache.resume`).

Expiry (``expires_at``) is checked on every request from the entry, so an expired
token stops at its time exactly. Unknown tokens are never cached: a guess always
costs a query and counts against the bad-token limiter. The entries of one process
are bounded (``max_entries``); the oldest go first.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime

_caches: weakref.WeakSet[TokenCache] = weakref.WeakSet()
_caches_lock = threading.Lock()


@dataclass(frozen=True)
class VerifiedToken:
    id: str
    tenancy: str | None  # None: an admin token
    scope: str | None
    expires_at: datetime | None
    last_used_at: datetime | None
    name: str | None = None


class TokenCache:
    def __init__(self, ttl: float, max_entries: int = 100_000, *, guarded: bool = False) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, VerifiedToken]] = OrderedDict()
        self._lock = threading.Lock()
        # bumped by every revocation: a lookup that began before one is not cached after it
        self.generation = 0
        # entries are served until then (time.monotonic()): always on one replica; with
        # several, only while the revocation listener holds its lease (``guarded``)
        self.valid_until = 0.0 if guarded else math.inf
        with _caches_lock:
            _caches.add(self)

    def get(self, digest: str) -> VerifiedToken | None:
        if self.ttl <= 0:
            return None
        now = time.monotonic()
        if now >= self.valid_until:
            return None
        with self._lock:
            hit = self._entries.get(digest)
            if hit is None:
                return None
            if now - hit[0] >= self.ttl:
                del self._entries[digest]
                return None
            return hit[1]

    def put(self, digest: str, token: VerifiedToken, *, generation: int) -> None:
        """Remember ``token``, read from the database after :attr:`generation` was
        ``generation`` (skipped when a revocation happened since: the row read may be gone)."""
        if self.ttl <= 0 or time.monotonic() >= self.valid_until:
            return
        with self._lock:
            if generation != self.generation:
                return
            self._entries[digest] = (time.monotonic(), token)
            self._entries.move_to_end(digest)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def used(self, digest: str, when: datetime) -> None:
        """Remember that the token's use was recorded at ``when`` (keeps its entry's age)."""
        with self._lock:
            hit = self._entries.get(digest)
            if hit is not None:
                self._entries[digest] = (hit[0], replace(hit[1], last_used_at=when))

    def suspend(self) -> None:
        """Serve nothing from now on (the revocation listener cannot hear), until :meth:`resume`."""
        self.valid_until = 0.0
        self.forget_all()

    def resume(self, valid_until: float) -> None:
        """Start again, empty (revocations may have been missed), serving until ``valid_until``."""
        self.forget_all()
        self.valid_until = valid_until

    def extend(self, valid_until: float) -> None:
        """The listener renewed its lease: serve entries until ``valid_until``."""
        self.valid_until = valid_until

    def forget_all(self) -> None:
        with self._lock:
            self.generation += 1
            self._entries.clear()

    def forget(self, *, token_id: str | None = None, tenancy: str | None = None) -> None:
        with self._lock:
            self.generation += 1
            stale = [
                d
                for d, (_, t) in self._entries.items()
                if (token_id is not None and t.id == token_id) or (tenancy is not None and t.tenancy == tenancy)
            ]
            for digest in stale:
                del self._entries[digest]


def revoked(*, token_id: str | None = None, tenancy: str | None = None) -> None:
    """A token (or every token of a tenancy) was deleted: every cache of this process
    forgets it now."""
    with _caches_lock:
        caches = list(_caches)
    for cache in caches:
        cache.forget(token_id=token_id, tenancy=tenancy)
