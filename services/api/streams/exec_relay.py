"""Relay a tenant's exec WebSocket to the pod's ``exec`` subresource on the API server.

The tenant speaks Kubernetes' own exec stream protocol to the API
(``v5.channel.k8s.io``, or ``v4.channel.k8s.io`` for older clients): every binary
message starts with one channel byte (0 stdin, 1 stdout, 2 stderr, 3 the final status
as a ``metav1.Status`` JSON, 4 terminal resize as ``{"Width", "Height"}``; in v5, 255
closes the channel named by the next byte). The API opens the same protocol towards
kube-apiserver under its own identity and forwards the messages unchanged in both
directions, so the exit code (channel 3: ``NonZeroExitCode`` with an ``ExitCode``
cause) reaches the tenant exactly as kubectl would read it. The subprotocol kube-apiserver
picks among those the tenant offered is the one the tenant gets.

Only the command, the flags and the target come from the tenant: the namespace and pod are
the container's own (its tenancy's namespace), the container is always ``main``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import websockets
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import connect

log = logging.getLogger(__name__)

#: the stream protocols relayed, newest first (v5 adds closing stdin: channel 255)
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STATUS_CHANNEL = 3
MAX_MESSAGE = 1 << 20  # one frame of a terminal or a command's output; kubelet sends 32 KiB at most


@dataclass(frozen=True)
class Upstream:
    """Where and how the API opens a pod's exec: the URL, TLS context and its credentials."""

    url: str
    ssl_context: ssl.SSLContext | None
    headers: dict[str, str]


def upstream_for(
    cfg: Any, *, namespace: str, pod: str, container: str, command: Sequence[str], stdin: bool, tty: bool
) -> Upstream:
    """The exec request for the official client's ``Configuration`` ``cfg`` (its server,
    CA, client certificate or token, refreshed as the client would)."""
    host = str(cfg.host).rstrip("/")
    query = [
        ("container", container),
        *(("command", c) for c in command),
        ("stdout", "true"),
        ("stderr", "false" if tty else "true"),
    ]
    if stdin:
        query.append(("stdin", "true"))
    if tty:
        query.append(("tty", "true"))
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
    scheme, _, rest = host.partition("://")
    url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}?{urlencode(query)}"
    context = None
    if scheme == "https":
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
    # the credentials the client would send: its auth settings' headers (a bearer token)
    headers = {a["key"]: a["value"] for a in cfg.auth_settings().values() if a.get("in") == "header" and a.get("value")}
    return Upstream(url, context, headers)


def offered(client: WebSocket) -> list[str]:
    """The stream protocols the tenant offered that the API relays, in its order (the ASGI scope's
    ``subprotocols``: a server may keep the handshake's own headers to itself, as wsproto does)."""
    asked = [str(p).strip() for p in client.scope.get("subprotocols") or ()]
    return [p for p in asked if p in PROTOCOLS]


async def open_upstream(target: Upstream, protocols: Sequence[str], *, open_timeout: float) -> Any:
    """The API server's exec WebSocket (``websockets`` client connection)."""
    return await connect(
        target.url,
        ssl=target.ssl_context,
        additional_headers=target.headers,
        subprotocols=list(protocols),  # type: ignore[arg-type]
        open_timeout=open_timeout,
        max_size=MAX_MESSAGE,
        compression=None,
        ping_interval=20,
        close_timeout=2,
        proxy=None,  # the API server is reached directly, as every other call of the API
    )


async def relay(client: WebSocket, upstream: Any) -> None:
    """Forward messages both ways until either side closes; then close the other."""

    async def down() -> None:  # the API server -> the tenant
        async for message in upstream:
            if isinstance(message, str):
                message = message.encode()
            await client.send_bytes(message)

    async def up() -> None:  # the tenant -> the API server
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None and message.get("text") is not None:
                data = message["text"].encode()
            if data:
                await upstream.send(data)

    tasks = [asyncio.create_task(down()), asyncio.create_task(up())]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            exc = task.exception()
            if exc is not None and not isinstance(exc, (websockets.ConnectionClosed, WebSocketDisconnect)):
                log.info("exec relay ended: %s", exc)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        # the tenant first: it must not wait on the API server's closing handshake
        with contextlib.suppress(Exception):
            await client.close()
        with contextlib.suppress(Exception):
            await upstream.close()
