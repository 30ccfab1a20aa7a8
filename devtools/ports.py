"""Free TCP ports on loopback, for the servers the tests, the sandbox and the benchmarks start.

The usual way, ``bind(("127.0.0.1", 0))`` and close, takes a port from the kernel's
ephemeral range: the range every outgoing connection of every process on the machine
takes its source port from. Between the moment such a port is found free and the moment
the server binds it, a client connection can take it, and the server fails with "address
already in use" (a kube-scheduler of the fleet benchmark did so in CI, on 57445).

:func:`free_port` picks below that range, where the kernel never hands out a source
port, at random, checks the port can be bound, and never returns a port this process
returned recently: what can still collide is another process's pick of the same port
within the same second or so, one chance in thousands of ports.
"""

from __future__ import annotations

import random
import socket
import threading
from collections import deque
from pathlib import Path

#: Where the kernel takes source ports from (Linux's default when /proc says nothing).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32768
#: The lowest port picked: above the well-known ports and those servers commonly use.
LOWEST = 10000
#: How many ports this process returned last are never returned again.
REMEMBERED = 2048
#: Ports tried before falling back to the kernel's choice.
TRIES = 200

_lock = threading.Lock()
_recent: deque[int] = deque(maxlen=REMEMBERED)
_random = random.SystemRandom()  # no shared seed: processes started alike pick differently


def picking_range() -> range:
    """The ports picked from: from :data:`LOWEST` up to the start of the ephemeral range."""
    try:
        low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = DEFAULT_EPHEMERAL_LOW
    return range(LOWEST, max(LOWEST, low))


def free_port() -> int:
    """A loopback TCP port no server holds now, outside the ephemeral range where it can be."""
    ports = picking_range()
    with _lock:
        for _ in range(TRIES if len(ports) > 2 * REMEMBERED else 0):
            port = _random.choice(ports)
            if port not in _recent and _bindable(port):
                _recent.append(port)
                return port
        port = _kernels_choice()  # a machine whose ephemeral range starts too low to pick below it
        _recent.append(port)
        return port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernels_choice() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
