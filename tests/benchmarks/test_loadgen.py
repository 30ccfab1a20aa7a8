"""The load generator's paced mode offers its rate evenly: requests on a fixed schedule,
not synchronised bursts of every connection (which is what a constant pause per
connection gives, since wrk opens them all at once — the p99 then measures the burst)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.kit import loadgen

pytestmark = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (make install)")


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects
    arrivals: list[float] = []

    def do_POST(self) -> None:  # http.server's naming
        _Recorder.arrivals.append(time.monotonic())
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(202)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.arrivals = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_paced_requests_are_spread_over_time_not_sent_in_bursts(recorder: str) -> None:
    result = loadgen.run(recorder, "/x", method="POST", body="{}", tokens=["t"], connections=16, seconds=2, rate=50)
    arrivals = sorted(_Recorder.arrivals)
    # wrk counts answered requests: those in flight when the run ends (at most one per
    # connection) reached the server but are not counted
    assert 0 < result.requests <= len(arrivals) <= result.requests + 16 and result.http_errors == 0
    assert result.offered_per_s == 50
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    # one every 20 ms; 16 connections paced by a constant pause would arrive 16 at a time
    # (15 of every 16 gaps under a millisecond)
    close = sum(1 for g in gaps if g < 0.002)
    assert close < len(gaps) / 4, f"{close} of {len(gaps)} gaps under 2 ms: bursts"
    assert result.requests <= 2 * 50 + 16  # never more than the schedule (plus wrk's rounding of the run)
