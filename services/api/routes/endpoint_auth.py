"""``/v1/endpoint-auth``: the ingress controller asks whether a request may reach a private endpoint.

The private Ingress of a container (:mod:`services.api.domain.endpoints`) carries the operator's
authentication annotations; with Traefik, a forwardAuth middleware that sends this route
the request's headers (``Authorization`` among them) and, in ``X-Forwarded-Host``, the
host it was sent to: ``<container id>-<port>.<endpoint domain>``. The answer is 204 when
the bearer token belongs to the container's tenancy, the container is running and declares
that port; 401 without a valid token; 404 for everything else — another tenancy's
container, one that has ended or never existed, an undeclared port — with one wording, so
that a token learns nothing about containers that are not its tenancy's. The controller
passes any answer but 2xx to the client as it is.
"""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Request, Response
from sqlmodel import Session

from services.api import errors
from services.api.domain import endpoints
from services.api.domain.models import ContainerStatus
from services.api.routes.deps import authenticate, bearer_of
from services.api.settings import Settings
from services.api.store import containers as container_store

router = APIRouter(tags=["endpoints"])


@router.get(
    "/v1/endpoint-auth",
    status_code=204,
    response_class=Response,
    summary="May this request reach a private endpoint? (asked by the ingress controller)",
    response_description="Yes: the token belongs to the container's tenancy and the container is running.",
)
async def endpoint_auth(
    request: Request,
    x_forwarded_host: Annotated[
        str | None,
        Header(
            max_length=300, description="The host the request was sent to: <container id>-<port>.<endpoint domain>."
        ),
    ] = None,
) -> Response:
    """The ingress controller's question for one request to a private endpoint (forwardAuth)."""
    settings: Settings = request.app.state.settings
    caller = await authenticate(request, bearer_of(request), "GET")
    where = endpoints.parse_host(x_forwarded_host or "", settings.endpoint_domain)
    gone = errors.NotFound(f"no endpoint at {(x_forwarded_host or '')[:300]!r}")
    if where is None or caller.tenancy is None:  # an operator's admin token is no tenant's
        raise gone
    container_id, port = where

    def served() -> bool:
        with Session(request.app.state.engine) as session:
            row = container_store.get_container(session, container_id=container_id, tenancy=caller.tenancy)
        return (
            row is not None
            and row.status == ContainerStatus.RUNNING
            and endpoints.declared(row.ports, port) is not None
        )

    if not await anyio.to_thread.run_sync(served):
        raise gone
    return Response(status_code=204)
