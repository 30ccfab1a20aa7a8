"""The in-process cache of verified tokens: entries expire, revocations drop them at once
(in every cache of the process) and win over a lookup that was in flight, the size is
bounded; a guarded cache (several replicas) serves only while its revocation listener
holds its lease."""

from __future__ import annotations

import time

from devtools.waiting import wait_for
from services.api.security.token_cache import TokenCache, VerifiedToken, revoked


def token(token_id: str, tenancy: str | None = "acme") -> VerifiedToken:
    return VerifiedToken(id=token_id, tenancy=tenancy, scope="submit", expires_at=None, last_used_at=None)


def test_an_entry_lives_for_the_cache_time_only() -> None:
    cache = TokenCache(ttl=0.2)
    cache.put("d1", token("tok_1"), generation=cache.generation)
    assert cache.get("d1") == token("tok_1")
    wait_for(lambda: cache.get("d1") is None, what="the entry to expire")


def test_zero_turns_the_cache_off() -> None:
    cache = TokenCache(ttl=0)
    cache.put("d1", token("tok_1"), generation=cache.generation)
    assert cache.get("d1") is None


def test_revoking_a_token_or_its_tenancy_empties_every_cache_of_the_process() -> None:
    one, two = TokenCache(ttl=60), TokenCache(ttl=60)
    for cache in (one, two):
        cache.put("d1", token("tok_1"), generation=cache.generation)
        cache.put("d2", token("tok_2"), generation=cache.generation)
        cache.put("d3", token("tok_3", tenancy="other"), generation=cache.generation)
    revoked(token_id="tok_1")
    assert one.get("d1") is None and two.get("d1") is None and one.get("d2") is not None
    revoked(tenancy="acme")
    assert one.get("d2") is None and two.get("d2") is None
    assert one.get("d3") is not None  # another tenancy's token stays


def test_a_lookup_that_began_before_a_revocation_is_not_cached() -> None:
    cache = TokenCache(ttl=60)
    began = cache.generation  # the database read happens here, the token still exists
    revoked(token_id="tok_1")  # ... and is revoked before the read is cached
    cache.put("d1", token("tok_1"), generation=began)
    assert cache.get("d1") is None


def test_the_oldest_entries_go_first_beyond_the_bound() -> None:
    cache = TokenCache(ttl=60, max_entries=2)
    for i in range(3):
        cache.put(f"d{i}", token(f"tok_{i}"), generation=cache.generation)
    assert cache.get("d0") is None and cache.get("d1") is not None and cache.get("d2") is not None


def test_a_guarded_cache_serves_only_while_its_listener_holds_the_lease() -> None:
    cache = TokenCache(ttl=60, guarded=True)
    cache.put("d1", token("tok_1"), generation=cache.generation)
    assert cache.get("d1") is None  # not listening yet: nothing is kept or served
    cache.resume(time.monotonic() + 60)
    cache.put("d1", token("tok_1"), generation=cache.generation)
    assert cache.get("d1") == token("tok_1")
    cache.extend(time.monotonic() - 1)  # the lease ran out without a renewal
    assert cache.get("d1") is None
    cache.extend(time.monotonic() + 60)
    assert cache.get("d1") == token("tok_1")
    began = cache.generation
    cache.suspend()  # the listener lost its connection: everything goes
    cache.resume(time.monotonic() + 60)
    assert cache.get("d1") is None
    cache.put("d1", token("tok_1"), generation=began)  # read before the suspension: not kept
    assert cache.get("d1") is None
