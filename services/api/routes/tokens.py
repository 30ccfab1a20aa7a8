"""Self-service tokens: a tenancy's ``admin`` token mints, lists and revokes the tenancy's
tokens (``/v1/tokens``); operators keep ``/v1/admin/tenancies/{name}/tokens``.

A minted token is named, no wider in scope than the token minting it, and may expire; its
secret is in the answer to the ``POST`` only (the database keeps its SHA-256 digest).
Revoking holds on the next request on every API replica (``store.tokens.delete_token``). Another
tenancy's token id answers exactly like a missing one (404). Both are audited
(``token.create``, ``token.revoke``).
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from services.api import errors
from services.api.domain.models import TenantTokenCreate, TokenIssued, TokenPublic, TokensPublic
from services.api.routes import tenant_scope
from services.api.routes.deps import CurrentTenant, SessionDep
from services.api.routes.secrets import TenancyQuery
from services.api.routes.tenancies import TokenId
from services.api.security import scopes
from services.api.store import tokens as token_store

#: tokens a tenancy may hold (its operator's included): a bound on the table and on listings
TOKENS_PER_TENANCY = 100

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post("", status_code=201, response_model=TokenIssued)
def create_token(
    body: TenantTokenCreate, session: SessionDep, caller: CurrentTenant, tenancy: TenancyQuery = None
) -> TokenIssued:
    """Mint a token for your tenancy, no wider than your own; the secret is shown only here."""
    name = tenant_scope.resolve(session, caller, tenancy)
    if not scopes.within(body.scope, caller.scope):
        raise errors.Forbidden(
            f"scope: this token's scope is {caller.scope!r}; it may mint tokens of that scope "
            "or narrower (read < submit < admin)"
        )
    if token_store.count_tokens(session, tenancy=name) >= TOKENS_PER_TENANCY:
        raise errors.Conflict(
            f"tenancy {name!r} has {TOKENS_PER_TENANCY} tokens, the most allowed; revoke one "
            "first (DELETE /v1/tokens/{id})"
        )
    row, secret = token_store.create_token(
        session, tenancy=name, name=body.name, scope=body.scope, expires_at=body.expires_at, actor=caller.actor
    )
    return TokenIssued.model_validate(row, update={"token": secret})


@router.get("", response_model=TokensPublic)
def list_tokens(session: SessionDep, caller: CurrentTenant, tenancy: TenancyQuery = None) -> TokensPublic:
    """Your tenancy's tokens: id, name, scope, expiry, last use, who minted them (never a secret)."""
    rows = token_store.list_tokens(session, tenancy=tenant_scope.resolve(session, caller, tenancy))
    return TokensPublic(data=[TokenPublic.model_validate(r) for r in rows], count=len(rows))


@router.delete("/{token_id}", status_code=204)
def revoke_token(
    token_id: TokenId, session: SessionDep, caller: CurrentTenant, tenancy: TenancyQuery = None
) -> Response:
    """Revoke one of your tenancy's tokens (the one in use too); its next request, on any
    replica, is refused (401)."""
    name = tenant_scope.resolve(session, caller, tenancy)
    if not token_store.delete_token(session, tenancy=name, token_id=token_id, actor=caller.actor):
        raise errors.NotFound(f"token {token_id!r} not found")
    return Response(status_code=204)
