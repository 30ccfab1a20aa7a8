"""``/v1/containers/{id}/exec``: run a command in a running container, over a WebSocket.

The query names the command (``command``, repeated: one argument each) and the streams
(``stdin``, ``tty``); the WebSocket carries Kubernetes' exec stream protocol
(:mod:`services.api.streams.exec_relay`), offered by the client as a subprotocol
(``v5.channel.k8s.io``). It needs a token of scope ``submit`` or wider in the
``Authorization`` header. Everything refused is refused before the upgrade, with the HTTP
status and the ``{code, detail}`` body of every other route: another tenancy's container
gets the same 404 as one that does not exist; a container that is not Running, 409.
Each exec that starts is recorded in the tenancy's audit trail, its command line with it.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Path as FPath, Query, Response, WebSocket
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlmodel import Session
from websockets.exceptions import InvalidHandshake, InvalidStatus

from core import crds
from core.kube import KubeError
from services.api import errors
from services.api.domain import validation
from services.api.domain.models import Container, ContainerStatus
from services.api.edge.limits import Limiter, StreamSlot
from services.api.kube import Kube
from services.api.routes.deps import Caller, CurrentTenant, SessionDep, authenticate, bearer_of
from services.api.store import audit, containers as container_store
from services.api.streams import exec_relay

log = logging.getLogger(__name__)

PROTOCOL_DOC = (
    "A WebSocket (subprotocol `v5.channel.k8s.io`, or `v4.channel.k8s.io`) carrying Kubernetes' exec "
    "stream protocol: each binary message is one channel byte and its data: 0 stdin, 1 stdout, 2 stderr, "
    "3 the final Status (JSON; `reason: NonZeroExitCode` with an `ExitCode` cause carries the exit code), "
    '4 a terminal size (`{"Width": 80, "Height": 24}`), 255 (v5) closes the stream named by the next '
    "byte. Needs a token of scope `submit` or wider; each exec is in the audit trail with its command line."
)

router = APIRouter(prefix="/v1/containers", tags=["containers"])

MAX_ARGS = 256
MAX_COMMAND_BYTES = 64 * 1024  # the whole command line (a shell's ARG_MAX is far above any typed one)
UPSTREAM_OPEN_TIMEOUT_S = 15.0
_FLAGS = {"true": True, "1": True, "false": False, "0": False, "": False}


def _flag(socket: WebSocket, name: str) -> bool:
    raw = socket.query_params.get(name, "false").lower()
    if raw not in _FLAGS:
        raise errors.Invalid(f"query.{name}: expected true or false, got {raw[:20]!r}")
    return _FLAGS[raw]


def _command(socket: WebSocket) -> list[str]:
    command = socket.query_params.getlist("command")
    if not command or not command[0]:
        raise errors.Invalid(
            "query.command: name the command to run, one argument per 'command' parameter "
            "(e.g. ?command=sh&command=-c&command=date)"
        )
    if len(command) > MAX_ARGS:
        raise errors.Invalid(f"query.command: at most {MAX_ARGS} arguments, got {len(command)}")
    if sum(len(c.encode()) for c in command) > MAX_COMMAND_BYTES:
        raise errors.Invalid(f"query.command: the command line is over {MAX_COMMAND_BYTES} bytes")
    if any(validation.find_control(c) for c in command):
        raise errors.Invalid(f"query.command: {validation.CONTROL_RULE} (tabs and newlines are)")
    return command


def _running(engine: Any, caller: Caller, container_id: str) -> Container:
    with Session(engine, expire_on_commit=False) as session:
        row = container_store.get_container(session, container_id=container_id, tenancy=caller.tenancy)
    if row is None:
        raise errors.NotFound(f"container {container_id!r} not found")
    if row.status != ContainerStatus.RUNNING or not row.pod_created:
        raise errors.Conflict(f"container {container_id!r} is {row.status}: exec needs a Running container")
    return row


def _record(engine: Any, caller: Caller, row: Container, command: list[str], tty: bool) -> None:
    with Session(engine) as session:
        audit.exec_started(session, caller.actor, tenancy=row.tenancy, container_id=row.id, command=command, tty=tty)
        session.commit()


def _refused_upstream(exc: Exception, container_id: str) -> errors.ApiError:
    """What the tenant is told when the API server would not open the exec."""
    status = exc.response.status_code if isinstance(exc, InvalidStatus) else None
    if status in (400, 404):  # the pod or its container went, or the container is not running any more
        return errors.Conflict(f"container {container_id!r} is no longer running: exec needs a Running container")
    if status in (401, 403):
        log.error(
            "the API server refused the API's own exec (HTTP %s): check the API's role in tenant "
            "namespaces (pods/exec: get, create)",
            status,
        )
    else:
        log.warning("exec could not be opened on the API server: %s", exc)
    return errors.Unavailable("exec: the cluster did not open the session; retry shortly")


@router.get(
    "/{container_id}/exec",
    summary="Run a command in a running container (WebSocket)",
    description=(
        "Run a command in a running container of the caller's tenancy. "
        + PROTOCOL_DOC
        + " Refused upgrades answer with the status and `{code, detail}` body of every route: "
        "401, 403 (a `read` token), 404 (also another tenancy's container), 409 (not Running), "
        "429 (too many open streams), 503. Asked over plain HTTP, it answers 426."
    ),
    response_class=Response,
    status_code=101,
    response_description="Switching Protocols: the exec session, a WebSocket.",
    responses={426: {"model": errors.ErrorBody, "description": "Asked without a WebSocket upgrade."}},
)
def exec_without_upgrade(
    container_id: Annotated[
        str,
        FPath(
            description="The container's id (lowercase hex).",
            json_schema_extra={"pattern": r"^[0-9a-f]{1,64}$", "maxLength": 64},
        ),
    ],
    session: SessionDep,
    caller: CurrentTenant,
    command: Annotated[
        list[Annotated[str, Query(pattern=r"^[^\x00-\x1f\x7f]*$")]],
        Query(
            min_length=1,
            max_length=MAX_ARGS,
            description="The command, one argument per parameter. Over the WebSocket an argument may also hold "
            "tabs and newlines (a multi-line `sh -c` script); no other control character.",
        ),
    ],
    stdin: Annotated[bool, Query(description="Send the client's channel 0 to the command.")] = False,
    tty: Annotated[bool, Query(description="Give the command a terminal (stderr then comes on stdout).")] = False,
) -> Response:
    """The exec endpoint asked without a WebSocket upgrade: 426 once the token and the
    container check out (a WebSocket's refused upgrade answers the same 401/403/404 first)."""
    if container_store.get_container(session, container_id=container_id, tenancy=caller.tenancy) is None:
        raise errors.NotFound(f"container {container_id!r} not found")
    raise errors.UpgradeRequired(
        "exec is a WebSocket: open it with the Upgrade: websocket header and the "
        f"subprotocol {exec_relay.PROTOCOLS[0]} (caasctl exec does)"
    )


@router.websocket("/{container_id}/exec")
async def exec_in_container(socket: WebSocket, container_id: str) -> None:
    app = socket.app
    slot: StreamSlot | None = None
    upstream: Any = None
    try:
        protocols = exec_relay.offered(socket)
        if not protocols:
            raise errors.BadRequest(
                "exec speaks Kubernetes' stream protocol: offer the WebSocket subprotocol "
                f"{exec_relay.PROTOCOLS[0]} (Sec-WebSocket-Protocol)"
            )
        caller = await authenticate(socket, bearer_of(socket), "GET")
        command, stdin, tty = _command(socket), _flag(socket, "stdin"), _flag(socket, "tty")
        row = await anyio.to_thread.run_sync(_running, app.state.engine, caller, container_id)
        limiter: Limiter = app.state.limiter
        slot = limiter.stream(token_id=caller.token_id, tenancy=caller.tenancy)
        kube: Kube = app.state.kube
        try:
            target = kube.exec_upstream(
                crds.tenant_namespace(row.tenancy), row.pod_name, command=command, stdin=stdin, tty=tty
            )
            upstream = await exec_relay.open_upstream(target, protocols, open_timeout=UPSTREAM_OPEN_TIMEOUT_S)
        except KubeError as exc:
            raise errors.Unavailable(f"exec: {exc}") from exc
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            raise _refused_upstream(exc, container_id) from exc
        await anyio.to_thread.run_sync(_record, app.state.engine, caller, row, command, tty)
    except (errors.ApiError, OperationalError, InterfaceError, DisconnectionError) as exc:
        if slot is not None:
            slot.release()
        if upstream is not None:
            await upstream.close()
        if not isinstance(exc, errors.ApiError):  # the database went away
            log.warning("database unavailable: %s", exc)
            exc = errors.Unavailable("database: unavailable; retry shortly")
        await socket.send_denial_response(errors.response_of(exc))
        return
    try:
        await socket.accept(subprotocol=upstream.subprotocol)
        await exec_relay.relay(socket, upstream)
    finally:
        slot.release()
        await upstream.close()
