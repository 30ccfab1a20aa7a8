"""Serve the API for tests: uvicorn with TLS on 127.0.0.1:0 in a thread, stoppable and restartable."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from devtools.waiting import wait_for
from services.api.app import create_app, uvicorn_config
from services.api.settings import Settings

ADMIN_TOKEN = "admin-test-token-0123456789"


class ApiServer:
    """One API process stand-in: start() serves on a fresh port, stop() shuts down cleanly."""

    def __init__(self, settings: Settings, *, ca: Any) -> None:
        self.settings = settings
        self.ca = ca  # trustme.CA, to verify the server's certificate
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.app: Any = None
        self.port: int | None = None
        self._trust: ssl.SSLContext | None = None

    @property
    def trust(self) -> ssl.SSLContext:
        """A client TLS context that trusts the test CA alone (made once: loading the system's
        CA store for every client cost about 50 ms a client on slow machines)."""
        if self._trust is None:
            self._trust = ssl.create_default_context(cadata=self.ca.cert_pem.bytes().decode())
        return self._trust

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        self.app = create_app(self.settings)
        config = uvicorn_config(self.app, self.settings, port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():  # type: ignore[union-attr]
                raise RuntimeError("API server thread ended before serving")
            return self.server.started  # type: ignore[union-attr]

        wait_for(started, 60, interval=0.02, what="the API server to start")
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(60)
            assert not self.thread.is_alive(), "API server did not stop"
        self.server = None
        self.thread = None

    def client(self, token: str | None = ADMIN_TOKEN, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, verify=self.trust, timeout=30, **kwargs)

    def refused_upgrade(self, path: str, token: str | None, protocols: tuple[str, ...]) -> tuple[int, bytes]:
        """The status and body of a refused WebSocket upgrade (the test fails if it was accepted).

        websockets' asyncio client: its sync client reads and writes one TLS session from two
        threads, which OpenSSL forbids, and now and then lost its request (caasctl's exec did)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        ctx = self.trust
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        async def upgrade() -> tuple[int, bytes]:
            try:
                ws = await connect(
                    f"wss://127.0.0.1:{self.port}{path}",
                    ssl=ctx,
                    additional_headers=headers,
                    subprotocols=list(protocols),  # type: ignore[arg-type]  # websockets' Subprotocol is a str
                    open_timeout=30,
                )
            except InvalidStatus as exc:
                return exc.response.status_code, bytes(exc.response.body or b"")
            await ws.close()
            raise AssertionError(f"the upgrade of {path} was accepted")

        return asyncio.run(upgrade())

    @property
    def worker(self) -> Any:
        return self.app.state.worker


def write_dead_kubeconfig(path: Path) -> Path:
    """A kubeconfig whose API server refuses connections: Kubernetes is down."""
    path.write_text(
        """apiVersion: v1
kind: Config
clusters:
- name: down
  cluster: {server: "http://127.0.0.1:9"}
users:
- name: nobody
  user: {token: nothing}
contexts:
- name: down
  context: {cluster: down, user: nobody}
current-context: down
"""
    )
    return path
