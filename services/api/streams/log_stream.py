"""Relay a followed pod log (a urllib3 streaming response) to an HTTP client, ending cleanly.

Each blocking read runs in a worker thread. The relay ends with a complete chunked
body (the terminating zero-length chunk) in every case: the pod ended (the API server
closes the log), the pod was deleted (cancel), the API server went away, or the
client left. When the upstream body ended by itself urllib3 has already handed the
connection back to its pool (urllib3 2.x ``HTTPResponse.release_conn`` on a drained
chunked body), so ``shutdown()`` must not be called then: it raises
``RuntimeError("Cannot shutdown as connection has already been released to the pool")``,
which aborted the response mid-stream (curl exit 18, httpx ``RemoteProtocolError``).
Only a read still in flight (the client left first) needs the socket shut down.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio

log = logging.getLogger(__name__)


async def relay(resp: Any, *, chunk_size: int = 4096) -> AsyncIterator[bytes]:
    """The body of ``resp`` chunk by chunk. Every stream reads in a thread of its own
    (a limiter of one, outside the shared pool that serves the API's routes), so open
    follows never take the threads other requests need."""
    reads = anyio.CapacityLimiter(1)
    stream = resp.stream(chunk_size, decode_content=True)
    finished = False
    try:
        while True:
            try:
                chunk = await anyio.to_thread.run_sync(next, stream, None, abandon_on_cancel=True, limiter=reads)
            except Exception as exc:  # noqa: BLE001 - the pod or the API server went away: end the stream
                log.info("pod log stream ended early: %s", exc)
                finished = True
                return
            if chunk is None:
                finished = True
                return
            yield chunk
    finally:
        if not finished:
            # The client left while a read may still block in its thread: unblock it.
            try:
                resp.shutdown()
            except (RuntimeError, ValueError, OSError):
                pass  # already released or closed: nothing is blocked
        resp.release_conn()
