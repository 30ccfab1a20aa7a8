"""Which tenancy a per-tenancy request acts on: the token's own, or (admin) the named one.

A tenant naming another tenancy gets the same 404 as for one that does not exist.
"""

from __future__ import annotations

from sqlmodel import Session

from services.api import errors
from services.api.routes.deps import Caller
from services.api.store import tenancies as tenancy_store


def resolve(session: Session, caller: Caller, tenancy: str | None) -> str:
    if caller.is_admin:
        if tenancy is None:
            raise errors.Invalid("tenancy: query parameter required with an admin token (a tenancy name)")
        if tenancy_store.get_tenancy(session, name=tenancy) is None:
            raise errors.NotFound(f"tenancy {tenancy!r} not found")
        return tenancy
    if tenancy is not None and tenancy != caller.tenancy:
        raise errors.NotFound(f"tenancy {tenancy!r} not found")
    return caller.tenancy or ""
