"""Request dependencies as ``Annotated`` aliases: the session, the caller, the adapters.

Dependencies that do no I/O are ``async`` so that FastAPI does not hop to a worker
thread for each of them on the submission hot path.

``CurrentTenant`` is whoever holds a valid token (a tenant token bound to its
tenancy, or an admin token with ``tenancy=None``); ``AdminUser`` additionally
requires an admin token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlmodel import Session
from starlette.requests import HTTPConnection

from services.api import errors
from services.api.domain.models import _as_utc, utcnow
from services.api.edge.limits import Limiter
from services.api.kube import Kube
from services.api.security import bearer, scopes
from services.api.security.token_cache import TokenCache, VerifiedToken
from services.api.settings import Settings
from services.api.store import tokens as token_store
from services.api.store.audit import Actor
from services.api.worker import SubmissionWorker

_bearer = HTTPBearer(auto_error=False, description="A tenant or admin token.")


async def get_session(request: Request) -> AsyncIterator[Session]:
    """The request's session. Creating one does no I/O (it connects on first use), so
    this runs on the event loop; the sync route that uses it runs in a worker thread.
    Rows stay readable after commit without a reload: a request's session is short-lived."""
    session = Session(request.app.state.engine, expire_on_commit=False)
    try:
        yield session
    finally:
        if session.in_transaction():  # a rollback to send: not on the event loop
            await anyio.to_thread.run_sync(session.close)
        else:
            session.close()


SessionDep = Annotated[Session, Depends(get_session)]


@dataclass(frozen=True)
class Caller:
    token_id: str
    tenancy: str | None  # None: an admin token
    scope: str | None = None  # None: admin
    token_name: str | None = None
    client: str | None = None  # the client's address
    expires_at: datetime | None = None  # the token's expiry (None: none)

    @property
    def is_admin(self) -> bool:
        return self.tenancy is None

    @property
    def actor(self) -> Actor:
        """Who the audit trail says did it."""
        return Actor(token_id=self.token_id, token_name=self.token_name, client=self.client)


def client_address(request: HTTPConnection) -> str:
    """The client's address (the proxy's, unless uvicorn trusts its forwarded headers)."""
    return request.client.host if request.client else "unknown"


async def get_caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The token's holder (:func:`authenticate`)."""
    return await authenticate(request, credentials.credentials if credentials else None, request.method)


def bearer_of(conn: HTTPConnection) -> str | None:
    """The bearer token of a request or WebSocket upgrade (``Authorization: Bearer <token>``)."""
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


async def authenticate(request: HTTPConnection, secret: str | None, method: str) -> Caller:
    """The holder of the bearer token ``secret``, allowed ``method`` on the request's path
    (an HTTP request, or a WebSocket's upgrade, which FastAPI's security classes do not read).

    A token verified in the last few seconds is served from the in-process cache
    (:mod:`services.api.security.token_cache`) on the event loop; otherwise (and once a minute, to
    record its use) the database is asked from a worker thread. The rates are counted here,
    on the event loop (:class:`Limiter` awaits the shared storage when there is one)."""
    if not secret:
        raise errors.Unauthorized("missing bearer token (Authorization: Bearer <token>)")
    limiter: Limiter = request.app.state.limiter
    client = client_address(request)
    cache: TokenCache = request.app.state.token_cache
    digest = bearer.hash_token(secret)
    now = utcnow()
    token = cache.get(digest)
    if token is None or token_store.touch_due(token.last_used_at, now):
        if token is None:
            # back-off before the lookup: a guesser costs no database query (a cached
            # token was verified, so it is no guess and skips this storage round trip)
            await limiter.check_bad_tokens(client)
        token = await anyio.to_thread.run_sync(_verify, request.app.state.engine, cache, digest, now)
    if token is None:
        await limiter.bad_token(client)
        raise errors.Unauthorized("invalid or revoked token")
    await limiter.request(token_id=token.id, tenancy=token.tenancy)
    expires = _as_utc(token.expires_at)
    if expires is not None and expires <= now:
        raise errors.Unauthorized(f"token expired at {expires.strftime('%Y-%m-%dT%H:%M:%SZ')}; ask for a new one")
    if token.tenancy is not None and not scopes.allows(token.scope, method, request.url.path):
        need = scopes.needed(method, request.url.path)
        raise errors.Forbidden(
            f"this token's scope is {token.scope!r}; {method} {request.url.path} needs a token with scope {need!r}"
        )
    return Caller(
        token_id=token.id,
        tenancy=token.tenancy,
        scope=token.scope,
        token_name=token.name,
        client=client,
        expires_at=expires,
    )


def _verify(engine: Engine, cache: TokenCache, digest: str, now: datetime) -> VerifiedToken | None:
    """Look the token up (an index hit on its digest), record its use when due, cache it."""
    generation = cache.generation
    with Session(engine, expire_on_commit=False) as session:
        row = token_store.token_by_digest(session, digest=digest)
        if row is None:
            return None
        token = VerifiedToken(
            id=row.id,
            tenancy=row.tenancy,
            scope=row.scope,
            expires_at=row.expires_at,
            last_used_at=row.last_used_at,
            name=row.name,
        )
        session.rollback()
        if token_store.touch_due(token.last_used_at, now):
            token_store.touch_token(session, token_id=token.id, now=now)
            token = replace(token, last_used_at=now)
    cache.put(digest, token, generation=generation)
    return token


CurrentTenant = Annotated[Caller, Depends(get_caller)]


async def get_admin(caller: CurrentTenant) -> Caller:
    if not caller.is_admin:
        raise errors.Forbidden("this endpoint needs an admin token")
    return caller


AdminUser = Annotated[Caller, Depends(get_admin)]


async def get_kube(request: Request) -> Kube:
    return request.app.state.kube


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_worker(request: Request) -> SubmissionWorker | None:
    return request.app.state.worker


KubeDep = Annotated[Kube, Depends(get_kube)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
WorkerDep = Annotated[SubmissionWorker | None, Depends(get_worker)]
