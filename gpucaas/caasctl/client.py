"""HTTP clients of `caasctl`: the API's admin endpoints (HTTPS) and a node's fabric socket.

caasctl is a REST client only: it never imports the database or Kubernetes
adapters. Errors come back as ``CaasctlError`` with the server's one-line detail.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from gpucaas.caasctl.errors import CaasctlError
from gpucaas.caasctl.settings import CaasctlSettings

__all__ = ["CaasctlError", "Config", "RestClient", "fabric_socket_for"]

#: The configuration (flag > env > file > default): see gpucaas/caasctl/settings.py.
Config = CaasctlSettings


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:300] or resp.reason_phrase
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, list):  # FastAPI validation errors
            return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg')}" for e in detail)
        if detail:
            return str(detail)
    return str(body)[:300]


#: ``--attempt`` of the logs commands
ATTEMPT_HELP = "An earlier run's log (1: the first) of a container the queue preempted and put back."


class RestClient:
    """The gpucaas REST API over HTTPS (httpx): caasctl's only client; no Kubernetes access."""

    def __init__(self, cfg: Config, timeout: float = 30.0) -> None:
        if not cfg.url:
            raise CaasctlError("no API URL: pass --url, set GPUCAAS_URL, or put url: in ~/.config/gpucaas/config.yaml")
        if not cfg.token:
            raise CaasctlError("no token: pass --token, set GPUCAAS_TOKEN, or put token: in the config file")
        verify: bool | ssl.SSLContext = True
        if cfg.insecure:
            verify = False
        elif cfg.ca_cert:
            try:
                verify = ssl.create_default_context(cafile=cfg.ca_cert)
            except (OSError, ssl.SSLError) as exc:
                raise CaasctlError(f"CA certificate {cfg.ca_cert} cannot be loaded: {exc}") from exc
        self.http = httpx.Client(
            base_url=cfg.url.rstrip("/"),
            timeout=timeout,
            verify=verify,
            headers={"Authorization": f"Bearer {cfg.token_value}"},
        )
        self._verify = verify
        self._token = cfg.token_value

    async def websocket(self, path: str, query: list[tuple[str, str]], subprotocols: list[str]) -> Any:
        """A WebSocket to the API, with this client's TLS and token; a refused upgrade raises
        :class:`CaasctlError` with the API's status and detail.

        websockets' asyncio client, not its sync one: the sync client reads the socket in a
        thread while another writes, and one TLS session must not be used by two threads at
        once (OpenSSL's rule). With TLS 1.3 the server's session tickets arrive right after
        the handshake, and a read handling them while the upgrade request was written lost
        the request now and then: the API never answered and closed the connection."""
        from urllib.parse import urlencode

        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus
        from websockets.typing import Subprotocol

        base = str(self.http.base_url).rstrip("/")
        scheme, _, rest = base.partition("://")
        url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}?{urlencode(query)}"
        context: ssl.SSLContext | None = None
        if scheme == "https":
            if isinstance(self._verify, ssl.SSLContext):
                context = self._verify
            else:
                context = ssl.create_default_context()
                if not self._verify:
                    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            return await connect(
                url,
                ssl=context,
                additional_headers={"Authorization": f"Bearer {self._token}"},
                subprotocols=[Subprotocol(p) for p in subprotocols],
                compression=None,
                open_timeout=30,
                max_size=1 << 20,
            )
        except InvalidStatus as exc:
            refusal = httpx.Response(exc.response.status_code, content=bytes(exc.response.body or b""))
            raise CaasctlError(f"{refusal.status_code}: {_detail(refusal)}") from exc
        except (InvalidHandshake, OSError, TimeoutError) as exc:
            raise CaasctlError(f"cannot reach the API at {base}: {exc}") from exc

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CaasctlError(f"cannot reach the API at {self.http.base_url}: {exc}") from exc
        if resp.status_code == 403 and path.startswith("/v1/admin"):
            raise CaasctlError(
                "this is an admin command and the token in use is not an admin token "
                "(a tenant token runs: run, ps, logs, exec, cancel, usage, secrets, registry, webhooks, "
                "tokens, audit)"
            )
        if resp.status_code >= 400:
            raise CaasctlError(f"{resp.status_code}: {_detail(resp)}")
        return resp.json() if resp.content else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def get_all(self, path: str, *, page_size: int = 500, **params: Any) -> list[Any]:
        """Every row of a paged listing: follows the API's ``next`` cursor (``?after=``)
        page by page until the last one, so that a listing is never cut at one page."""
        rows: list[Any] = []
        after = None
        while True:
            page = self.get(path, limit=page_size, after=after, **params)
            rows += page["data"]
            after = page.get("next")
            if not after or not page["data"]:
                return rows

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body if body is not None else {})

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def log_lines(self, container_id: str, *, follow: bool, attempt: int | None = None) -> Iterator[str]:
        """A container's log, line by line (``attempt``: an earlier run's kept log)."""
        params: dict[str, str] = {"follow": str(follow).lower()}
        if attempt is not None:
            params["attempt"] = str(attempt)
        return self.stream_lines(f"/v1/containers/{container_id}/logs", **params)

    def stream_lines(self, path: str, **params: Any) -> Iterator[str]:
        try:
            with self.http.stream("GET", path, params=params, timeout=None) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise CaasctlError(f"{resp.status_code}: {_detail(resp)}")
                yield from resp.iter_lines()
        except httpx.HTTPError as exc:
            raise CaasctlError(f"log stream broke: {exc}") from exc


def fabric_socket_for(cfg: Config, node: str | None, explicit: str | None) -> str:
    """The node's fabric socket: --fabric-socket, the config's nodes.<node>.fabric_socket, or the local default."""
    if explicit:
        return explicit
    if node and node in cfg.fabric_sockets:
        return cfg.fabric_sockets[node]
    local = cfg.fabric_socket
    if Path(local).exists():
        return local
    where = f" for node {node}" if node else ""
    raise CaasctlError(
        f"no fabric service socket{where}: run caasctl on the node, pass --fabric-socket, "
        "or add nodes.<node>.fabric_socket to the config file"
    )
