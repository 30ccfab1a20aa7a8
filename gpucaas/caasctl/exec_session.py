"""`caasctl exec`: a command in a running container, over the API's exec WebSocket.

The client half of Kubernetes' exec stream protocol (``v5.channel.k8s.io``, falling back
to ``v4``), the same the API relays to the pod: each binary message is one channel byte
and its data — 0 stdin, 1 stdout, 2 stderr, 3 the final ``Status`` (the exit code), 4 a
terminal size. With ``-i`` the local standard input is sent on channel 0 (and, in v5,
closed with channel 255 at its end); with ``-t`` the local terminal is put in raw mode for
the session, its size sent at the start and on every window change (SIGWINCH). The exit
code is the command's: 0, its non-zero code, or 126/127 (as ``docker exec``) when the
command could not be started or found.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from websockets.exceptions import ConnectionClosed

from gpucaas.caasctl.client import RestClient
from gpucaas.caasctl.errors import CaasctlError

PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def exit_code_of(status: dict[str, Any] | None) -> tuple[int, str | None]:
    """The command's exit code from the final Status, and a message to print (None: none)."""
    if status is None:
        return 1, "the session ended before the command's exit status arrived"
    if status.get("status") == "Success":
        return 0, None
    details = status.get("details") or {}
    if status.get("reason") == "NonZeroExitCode":
        for cause in details.get("causes") or []:
            if cause.get("reason") == "ExitCode":
                with contextlib.suppress(TypeError, ValueError):
                    return int(cause.get("message")), None
    message = str(status.get("message") or "the command could not be run")
    return (127 if "not found" in message or "no such file" in message.lower() else 126), message


@contextlib.contextmanager
def _raw_terminal(fd: int) -> Iterator[None]:
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _size_message() -> bytes:
    """The local terminal's size (the one the session is in, never $COLUMNS/$LINES)."""
    size = os.get_terminal_size(sys.stdin.fileno())
    return bytes([RESIZE]) + json.dumps({"Width": size.columns, "Height": size.lines}).encode()


def run(api: RestClient, container_id: str, command: list[str], *, stdin: bool, tty: bool) -> int:
    """Run ``command`` in the container; returns its exit code."""
    if tty and not sys.stdin.isatty():
        print("caasctl: unable to use a TTY: the input is not a terminal", file=sys.stderr)
        tty = False
    query = [("command", c) for c in command]
    query += [("stdin", "true")] if stdin else []
    query += [("tty", "true")] if tty else []
    status = asyncio.run(_session(api, f"/v1/containers/{container_id}/exec", query, stdin=stdin, tty=tty))
    code, message = exit_code_of(status)
    if message:
        print(f"caasctl: exec: {message}", file=sys.stderr)
    return code


def _read_stdin(loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue[bytes]) -> None:
    """Standard input, read in a daemon thread (a file, a pipe or a terminal alike) and
    handed to the event loop; b"" marks its end. Only the loop touches the WebSocket."""
    with contextlib.suppress(OSError, RuntimeError):  # RuntimeError: the loop closed, the session is over
        while data := os.read(sys.stdin.fileno(), 4096):
            loop.call_soon_threadsafe(chunks.put_nowait, data)
        loop.call_soon_threadsafe(chunks.put_nowait, b"")


async def _send_stdin(ws: Any, chunks: asyncio.Queue[bytes]) -> None:
    while data := await chunks.get():
        await ws.send(bytes([STDIN]) + data)
    if ws.subprotocol == PROTOCOLS[0]:
        await ws.send(bytes([CLOSE, STDIN]))


async def _session(api: RestClient, path: str, query: list[tuple[str, str]], *, stdin: bool, tty: bool) -> Any:
    """The exec session on one event loop; returns the final Status (None: none came)."""
    ws = await api.websocket(path, query, PROTOCOLS)
    loop = asyncio.get_running_loop()
    out = sys.stdout.buffer
    status: dict[str, Any] | None = None
    tasks: set[asyncio.Task[None]] = set()

    async def quietly(work: Any) -> None:
        with contextlib.suppress(ConnectionClosed):  # the session ended while input was sent
            await work

    def spawn(work: Any) -> None:
        task = loop.create_task(quietly(work))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    raw = _raw_terminal(sys.stdin.fileno()) if tty else contextlib.nullcontext()
    try:
        with raw:
            if tty:
                await ws.send(_size_message())
                loop.add_signal_handler(signal.SIGWINCH, lambda: spawn(ws.send(_size_message())))
            if stdin:
                chunks: asyncio.Queue[bytes] = asyncio.Queue()
                threading.Thread(target=_read_stdin, args=(loop, chunks), name="exec-stdin", daemon=True).start()
                spawn(_send_stdin(ws, chunks))
            async for message in ws:
                if isinstance(message, str):
                    message = message.encode()
                if not message:
                    continue
                channel, data = message[0], message[1:]
                if channel == STDOUT:
                    out.write(data)
                    out.flush()
                elif channel == STDERR:
                    sys.stderr.buffer.write(data)
                    sys.stderr.flush()
                elif channel == STATUS:
                    with contextlib.suppress(ValueError):
                        status = json.loads(data)
    except ConnectionClosed:
        pass  # cut before the status arrived: said by the caller
    except OSError as exc:
        raise CaasctlError(f"exec: {exc}") from exc
    finally:
        if tty:
            loop.remove_signal_handler(signal.SIGWINCH)
        for task in list(tasks):
            task.cancel()
        await ws.close()
    return status
