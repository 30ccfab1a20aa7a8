"""The gpucaas API as a benchmark's tenants and admin reach it: HTTPS with the sandbox's CA,
a bearer token per request, each request to the next replica.

Retried, on the next replica, until ``deadline_s``: a connection error (a replica gone or not
answering yet), a 429 and a 503 with ``Retry-After`` (the API shedding load or draining; the
wait it asks for, at most 5 s). A POST may carry an ``Idempotency-Key``, so that a retry can
never submit twice. Any other answer is the caller's (:class:`Answer`), except, when
``retry_server_errors`` is set, any other 5xx: counted in the :class:`Tally` as a server error,
then retried (the chaos soak, where every component is killed on purpose).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any

from benchmarks.kit.report import say

REQUEST_DEADLINE_S = 180.0

#: no HTTP answer: the replica is gone or not listening yet
_CONNECTION_ERRORS = (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError, OSError)


class GaveUp(RuntimeError):
    """No answer that was not retryable within the deadline."""


class Refused(RuntimeError):
    """An answer other than the one the caller expected (:meth:`GpucaasApi.expect`)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the JSON answer (text when it is not JSON; None when empty)
    sent_at: float  # monotonic time the answered request was sent
    answered_at: float


@dataclass
class Tally:
    """What the requests met, shared by every thread."""

    server_errors: list[str] = field(default_factory=list)
    retries: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def server_error(self, what: str) -> None:
        with self.lock:
            self.server_errors.append(what)
        say(f"server error: {what}")

    def retry(self, why: str) -> None:
        with self.lock:
            self.retries[why] += 1


class GpucaasApi:
    """The API through its replicas (``urls``), trusting ``ca_file``; thread-safe."""

    def __init__(
        self,
        urls: list[str],
        ca_file: Path,
        *,
        tally: Tally | None = None,
        retry_server_errors: bool = False,
        server_name: str | None = None,
    ) -> None:
        self.urls = urls
        self.ctx = (
            ssl.create_default_context(cafile=str(ca_file)) if server_name is None else _named(ca_file, server_name)
        )
        self.tally = tally or Tally()
        self.retry_server_errors = retry_server_errors
        self._next = 0
        self._lock = threading.Lock()

    @classmethod
    def of(cls, sb: Any, **kwargs: Any) -> GpucaasApi:
        """The API of a running sandbox (every replica)."""
        return cls(list(sb.api_urls or [sb.api_url]), sb.tls.ca_cert, **kwargs)

    def url(self) -> str:
        with self._lock:
            self._next += 1
            return self.urls[self._next % len(self.urls)]

    def call(
        self,
        method: str,
        path: str,
        token: str,
        body: Any = None,
        *,
        idempotency_key: str | None = None,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> Answer:
        """The first answer that is not retried (see the module docstring); :class:`GaveUp` past the deadline."""
        deadline = time.monotonic() + deadline_s
        data = json.dumps(body).encode() if body is not None else None
        while True:
            req = urllib.request.Request(self.url() + path, data=data, method=method)
            req.add_header("Authorization", f"Bearer {token}")
            if data is not None:
                req.add_header("Content-Type", "application/json")
            if idempotency_key:
                req.add_header("Idempotency-Key", idempotency_key)
            wait = 0.5
            sent = time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:
                    return Answer(resp.status, _decoded(resp.read()), sent, time.monotonic())
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                answered = time.monotonic()
                retry_after = exc.headers.get("Retry-After")
                if exc.code == 429 or (exc.code == 503 and retry_after):
                    self.tally.retry(str(exc.code))
                    wait = min(float(retry_after or 1), 5.0)
                elif exc.code >= 500 and self.retry_server_errors:
                    self.tally.server_error(f"{method} {path}: {exc.code} {raw[:300]!r}")
                else:
                    return Answer(exc.code, _decoded(raw), sent, answered)
            except _CONNECTION_ERRORS as exc:
                self.tally.retry(type(exc).__name__)
            if time.monotonic() + wait > deadline:
                raise GaveUp(f"{method} {path}: no answer for {deadline_s:.0f}s")
            time.sleep(wait)

    def expect(
        self, method: str, path: str, token: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201, 202, 204)
    ) -> Any:
        """The JSON answer of a request that must succeed (:class:`Refused` otherwise)."""
        answer = self.call(method, path, token, body)
        if answer.status not in ok:
            raise Refused(f"{method} {path}: {answer.status} {str(answer.body)[:300]}")
        return answer.body

    def follow_logs(self, cid: str, token: str) -> str | None:
        """The log followed to its end (None when a stream could not be opened or broke)."""
        req = urllib.request.Request(self.url() + f"/v1/containers/{cid}/logs?follow=true")
        req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=120, context=self.ctx) as resp:
                return str(resp.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 and not (exc.code == 503 and exc.headers.get("Retry-After")):
                self.tally.server_error(f"GET logs?follow: {exc.code} {exc.read()[:300]!r}")
            return None
        except _CONNECTION_ERRORS:
            return None

    def exec(self, cid: str, token: str, command: list[str]) -> str | None:
        """stdout of ``command`` run in the container over the API's exec WebSocket (None: refused or broken).

        websockets' asyncio client: its sync one reads and writes one TLS session from two
        threads (OpenSSL forbids it), lost a request now and then and could then hang."""
        return asyncio.run(self._exec(cid, token, command))

    async def _exec(self, cid: str, token: str, command: list[str]) -> str | None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import (
            ConnectionClosed,
            InvalidHandshake,
            InvalidStatus,
        )

        query = urllib.parse.urlencode([("command", c) for c in command])
        url = self.url().replace("https://", "wss://") + f"/v1/containers/{cid}/exec?{query}"
        out = b""
        try:
            async with connect(
                url,
                ssl=self.ctx,
                additional_headers={"Authorization": f"Bearer {token}"},
                subprotocols=["v5.channel.k8s.io"],  # type: ignore[list-item]  # websockets' Subprotocol is a str
                compression=None,
                open_timeout=30,
                max_size=1 << 20,
            ) as ws:
                while True:
                    msg = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(msg, bytes) and msg[:1] == b"\x01":
                        out += msg[1:]
                    elif isinstance(msg, bytes) and msg[:1] == b"\x03":
                        break
        except InvalidStatus as exc:
            code = exc.response.status_code
            if code >= 500 and not (code == 503 and exc.response.headers.get("Retry-After")):
                self.tally.server_error(f"exec: {code} {bytes(exc.response.body or b'')[:300]!r}")
            return None
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError):
            return out.decode(errors="replace") if out else None
        return out.decode(errors="replace")


class _NamedContext(ssl.SSLContext):
    """A client context that asks for, and verifies, one server name whatever address the URL
    has: a Service's ClusterIP reached as its DNS name (which its certificate names)."""

    server_name = ""

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(*args, **kwargs)


def _named(ca_file: Path, server_name: str) -> ssl.SSLContext:
    ctx = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.server_name = server_name
    ctx.load_verify_locations(cafile=str(ca_file))
    return ctx


def _decoded(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
