"""Fixtures of the placement tests: a fleet index and the extender served over real HTTP."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from devtools.waiting import wait_for
from services.placement.fit import mask_of
from services.placement.fleet import FleetIndex, NodeFree
from services.placement.server import Binder, create_app


class ServedExtender:
    """uvicorn serving the extender app on 127.0.0.1, ephemeral port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServedExtender:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError("extender server thread ended before serving")
            return self.server.started

        wait_for(started, 30, interval=0.01, what="the extender server to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def small_fleet() -> FleetIndex:
    """Four nodes: an empty board, a free quad, free GPUs 1+2 (no partition), a lone pair."""
    index = FleetIndex()
    index.set_node(NodeFree("gpu-node-a", mask_of(range(1, 9))))
    index.set_node(NodeFree("gpu-node-b", mask_of({5, 6, 7, 8})))
    index.set_node(NodeFree("gpu-node-c", mask_of({1, 2})))
    index.set_node(NodeFree("gpu-node-d", mask_of({6, 8})))
    return index


def serve(index: FleetIndex, binder: Binder | None = None) -> ServedExtender:
    return ServedExtender(create_app(index, binder=binder))


@pytest.fixture
def extender_url(small_fleet: FleetIndex) -> Iterator[str]:
    with serve(small_fleet) as served:
        yield served.url


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c
