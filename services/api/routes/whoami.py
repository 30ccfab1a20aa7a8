"""``GET /v1/whoami``: the token in use, described to its holder (tenancy, name, scope,
expiry; never a secret). It only ever describes the caller, so it needs no tenancy
argument and can tell nothing about another tenancy; any scope may ask (``read`` and up).
The console reads it at sign-in to offer only what the token's scope allows."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.domain.models import WhoAmI
from services.api.routes.deps import CurrentTenant

router = APIRouter(prefix="/v1/whoami", tags=["tokens"])


@router.get("", response_model=WhoAmI)
async def whoami(caller: CurrentTenant) -> WhoAmI:
    """The token in use: its id, name, tenancy (null: an operator's admin token), scope and expiry."""
    # validated as the response is: the stored scope is one of WhoAmI's
    return WhoAmI.model_validate(
        {
            "token_id": caller.token_id,
            "token_name": caller.token_name,
            "tenancy": caller.tenancy,
            "scope": caller.scope or "admin",
            "expires_at": caller.expires_at,
        }
    )
