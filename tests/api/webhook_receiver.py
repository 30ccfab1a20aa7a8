"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 that records every POST,
and answers 500 to the first ``fail_first`` of them (a receiver that is down for a while)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)


class Receiver:
    def __init__(self, *, fail_first: int = 0, port: int = 0, host: str = "127.0.0.1") -> None:
        self.fail_first = fail_first
        self.host = host
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    code = 500 if len(receiver.requests) < receiver.fail_first else 200
                    receiver.requests.append(Received(self.path, dict(self.headers.items()), body, code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hooks/gpucaas"

    def start(self) -> Receiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(self, event_type: str | None = None, *, ok: bool = True) -> list[Received]:
        with self._lock:
            found = list(self.requests)
        return [
            r for r in found if (event_type is None or r.event["type"] == event_type) and (not ok or r.answered == 200)
        ]
