"""free_port: loopback ports below the kernel's ephemeral range, free, and not handed out twice."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from devtools import ports


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_come_from_below_the_ephemeral_range_and_are_not_repeated() -> None:
    picked = [ports.free_port() for _ in range(500)]
    assert len(set(picked)) == 500
    assert all(ports.LOWEST <= p < _ephemeral_low() for p in picked)
    for port in picked[:20]:  # free: a server can listen on it
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()


def test_a_port_a_server_holds_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        other = next(p for p in ports.picking_range() if p not in ports._recent and ports._bindable(p))
        offers = itertools.chain([taken], itertools.repeat(other))
        monkeypatch.setattr(ports._random, "choice", lambda _seq: next(offers))
        monkeypatch.setattr(ports, "picking_range", lambda: range(taken, taken + 2 * ports.REMEMBERED + 1))
        assert ports.free_port() == other


def test_an_ephemeral_range_starting_too_low_leaves_the_choice_to_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "range").write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", tmp_path / "range")
    assert len(ports.picking_range()) == 0
    port = ports.free_port()
    assert port >= 1024 and ports._bindable(port)
