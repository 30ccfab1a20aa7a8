"""How the big-image benchmark reads its two clocks: containerd's time on the ready line, and
the kubelet's own account of a pull (its ``Pulled`` event, as kubelet v1.36 words it)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from benchmarks import big_image


def test_the_ready_line_carries_containerds_time_to_the_microsecond() -> None:
    log = (
        "2026-11-30T19:20:01.123456789Z starting\n"
        "2026-11-30T19:20:02.500000001Z ready: read 831519 bytes at start\n"
        "2026-11-30T19:20:03Z ready: again\n"
    )
    when, line = big_image.ready_line(log)
    assert line == "ready: read 831519 bytes at start"
    assert when == datetime(2026, 11, 30, 19, 20, 2, 500000, tzinfo=UTC).timestamp()
    assert (
        big_image.ready_line("2026-11-30T19:20:03Z ready: at a whole second")[0]
        == datetime(2026, 11, 30, 19, 20, 3, tzinfo=UTC).timestamp()
    )


def test_a_log_without_the_ready_line_is_an_error_not_a_figure() -> None:
    with pytest.raises(ValueError, match="no line starting 'ready'"):
        big_image.ready_line("2026-11-30T19:20:01.1Z exec format error\n")


@pytest.mark.parametrize(
    ("message", "seconds"),
    [
        (
            'Successfully pulled image "far.gpucaas.test/nvidia/pytorch:24.05-py3-shaped" in 45.264s '
            "(45.264s including waiting). Image size: 3614078995 bytes.",
            45.264,
        ),
        (
            'Successfully pulled image "far.gpucaas.test/nvidia/pytorch:24.05-py3-shaped" in 31ms '
            "(31ms including waiting). Image size: 3614078995 bytes.",
            0.031,
        ),
        ('Container image "busybox:1.36" already present on machine', None),
    ],
)
def test_the_kubelets_pull_time(message: str, seconds: float | None) -> None:
    assert big_image.pull_seconds(message) == seconds
