"""The web console, served by the API under ``/console`` on the same HTTPS port.

It is a handful of static files (``static/``: one HTML page, one style sheet, plain ES
modules) that talk to the public API with the token the tenant signs in with; the
server side is only this: the files, with security headers on every answer.

Why no framework and nothing vendored: the console is small (a table per resource, a
form, a log view, one bar chart drawn as SVG), the browser's own DOM and ``fetch`` do it
in a few hundred lines, and with no third-party file there is nothing to fetch from a
CDN, nothing to ``npm ci`` at install time and nothing to keep patched. Everything is in
this package, so the console works offline and on air-gapped clusters as it is.

Content Security Policy (``CSP`` below): scripts, styles, images and connections from
the API's own origin only, no ``unsafe-inline``, no framing. The page holds no inline
script or style (``tests/api/test_console.py`` checks both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

STATIC = Path(__file__).parent / "static"

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    # the files are small: always revalidate (ETag), so an upgraded API serves its own console
    (b"cache-control", b"no-cache"),
]


class _Secured:
    """The static files, with :data:`HEADERS` added to every answer (404s included)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in HEADERS}
                kept = [(n, v) for n, v in message.get("headers", []) if n.lower() not in names]
                message = {**message, "headers": kept + HEADERS}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except HTTPException as exc:  # a missing file: answered here, with the headers too
            await PlainTextResponse(str(exc.detail), status_code=exc.status_code)(scope, receive, send_with_headers)


def install(app: FastAPI) -> None:
    """Serve the console at ``/console/`` (``/console`` redirects there)."""

    @app.get("/console", include_in_schema=False)
    async def console_root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=308)

    app.mount("/console/", _Secured(StaticFiles(directory=STATIC, html=True)), name="console")
