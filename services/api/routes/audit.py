"""The tenancy's audit trail (``GET /v1/audit``): scope ``admin``, newest first, keyset pages.

``admin`` because the trail says which token did what from which address — what an
attacker holding a ``read`` token would like to know. An operator's admin token names
the tenancy with ``?tenancy=``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from services.api.domain.models import AuditAction, AuditEventPublic, AuditPage
from services.api.routes import pagination, tenant_scope
from services.api.routes.containers import After
from services.api.routes.deps import CurrentTenant, SessionDep
from services.api.routes.secrets import TenancyQuery
from services.api.store import audit

router = APIRouter(prefix="/v1/audit", tags=["audit"])

AuditLimit = Annotated[int, Query(ge=1, le=500, description="Page size (1-500).")]
ActionFilter = Annotated[AuditAction | None, Query(description="Only events of this action.")]


@router.get("", response_model=AuditPage)
def list_audit_events(
    session: SessionDep,
    caller: CurrentTenant,
    action: ActionFilter = None,
    limit: AuditLimit = 50,
    after: After = None,
    tenancy: TenancyQuery = None,
) -> Response:
    """What was changed in your tenancy, by which token, from which address: newest first.
    Pass the answer's ``next`` back as ``after`` for the next page."""
    name = tenant_scope.resolve(session, caller, tenancy)
    key = pagination.decode(after) if after is not None else None
    rows, last = audit.page(session, tenancy=name, action=action, limit=limit, after=key)
    page = AuditPage(
        data=[AuditEventPublic.model_validate(dict(r._mapping)) for r in rows],
        limit=limit,
        next=pagination.encode(last) if last is not None else None,
    )
    return Response(page.model_dump_json(), media_type="application/json")
