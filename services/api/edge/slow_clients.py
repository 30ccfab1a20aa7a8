"""A header read timeout for uvicorn: a connection that has not sent a complete request
head within ``header_timeout`` seconds of opening (or of starting a request) is closed.

uvicorn times out idle keep-alive connections but not a client that sends its
headers a byte at a time ("slowloris"): every byte resets nothing and completes
nothing, and the connection is held forever. This subclass of uvicorn's httptools
protocol (the one ``uvicorn[standard]`` uses) arms a timer when a connection opens
and when a new request begins, and disarms it when the head is complete
(``on_headers_complete``, httptools' callback). Slow *bodies* are timed out in the
ASGI edge (``services.api.edge.middleware``), where the response can still say why (408).
TLS handshakes are bounded by asyncio's ``ssl_handshake_timeout`` (60 s).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


def protocol_class(header_timeout: float) -> type[asyncio.Protocol] | str:
    """The uvicorn ``http`` protocol to serve with (``"auto"`` when httptools is absent)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools
        log.warning("httptools is not installed: no header read timeout")
        return "auto"

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._header_timed_out)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timed_out(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                log.info(
                    "closing a connection from %s: no complete request head in %.0fs",
                    (self.client or ("?",))[0],
                    header_timeout,
                )
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
