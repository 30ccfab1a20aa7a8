"""The upgrade benchmark's counting, without a sandbox (``make test-upgrade`` runs it): what
it counts as lost, duplicated and a server error, what fails the run, and the one-line
refusal of a commit the clone lacks."""

from __future__ import annotations

import subprocess
import threading
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import chaos, upgrade
from benchmarks.kit.gpucaas_api import Answer, Tally


def _load(*subs: chaos.Submission) -> upgrade.Load:
    load = upgrade.Load(api=None, tokens={}, at_least=2)  # type: ignore[arg-type]
    load.submissions.extend(subs)
    return load


def _ended(uid: str, cid: str) -> chaos.PodRecord:
    return chaos.PodRecord(
        uid,
        cid,
        phase="Succeeded",
        started_at="2026-11-29T10:00:00Z",
        finished_at="2026-11-29T10:00:01Z",
        exit_code=0,
        running=True,
        gpus=1,
    )


def _row(tenancy: str, status: str) -> dict[str, object]:
    return {"tenancy": tenancy, "status": status, "exit_code": 0 if status == "Succeeded" else None}


def test_a_key_submitted_twice_a_container_never_ended_and_a_pod_run_twice_are_counted() -> None:
    fine = chaos.Submission("upgrade-a", "upgrade-00", 1, 0, cid="fine")
    running = chaos.Submission("upgrade-b", "upgrade-01", 1, 0, cid="running")
    twice = chaos.Submission("upgrade-c", "upgrade-00", 1, 0, cid="twice")
    unanswered = chaos.Submission("upgrade-d", "upgrade-01", 1, 0)  # no 202 came back
    load = _load(fine, running, twice, unanswered)
    load.refused.append("upgrade-e: 400 bad")
    rows = {
        "fine": _row("upgrade-00", "Succeeded"),
        "running": _row("upgrade-01", "Running"),
        "twice": _row("upgrade-00", "Succeeded"),
        "again": _row("upgrade-01", "Succeeded"),  # a second container for a key: no 202 named it
        "other": _row("demo", "Succeeded"),  # not the benchmark's tenancy
    }
    pods = {"fine": [_ended("u1", "fine")], "twice": [_ended("u2", "twice"), _ended("u3", "twice")]}
    found = chaos.check(load, rows, pods, Counter(), {}, [], tenancy_prefix=upgrade.PREFIX)
    found["stuck_leases"], found["stuck_partitions"] = ["gpu-3: Allocated (holder gone)"], []
    counts = upgrade.figures(load, found, Tally())
    assert counts["submitted"] == 4 and counts["accepted"] == 3 and counts["refused"] == 1
    assert counts["lost"] == 1 and "running" in found["lost"][0]
    assert counts["duplicated"] == 2
    assert any("twice: 2 pods ran" in d for d in found["duplicated"])
    assert any(d.startswith("again ") for d in found["duplicated"])
    assert counts["stuck_leases"] == 1


def test_every_5xx_is_a_server_error_the_drain_s_503_included() -> None:
    tally = Tally()
    assert upgrade.server_errors(tally) == 0
    tally.retry("503")  # a 503 with Retry-After, retried as the API asks
    tally.retry("URLError")  # a connection error is no answer
    tally.retry("429")
    tally.server_error("POST /v1/containers: 502 b''")
    assert upgrade.server_errors(tally) == 2


def test_the_run_fails_on_any_figure_or_too_few_submissions() -> None:
    passed = {"lost": 0, "duplicated": 0, "server_errors": 0, "stuck_leases": 0, "submitted": 210, "accepted": 200}
    assert upgrade.failures(passed, 200) == []
    # the quota refuses what is over the backlog: half the submissions accepted is enough
    assert upgrade.failures({**passed, "submitted": 260, "accepted": 100}, 200) == []
    assert upgrade.failures({**passed, "stuck_leases": 1, "submitted": 150, "accepted": 99}, 200) == [
        "stuck_leases = 1",
        "submitted 150 < 200",
        "accepted 99 < 100",
    ]


class _QuotaFirst:
    """An API that refuses the first ``refusals`` submissions by quota and accepts the rest."""

    def __init__(self, refusals: int) -> None:
        self.calls = 0
        self.refusals = refusals
        self.lock = threading.Lock()

    def call(self, method: str, path: str, token: str, body: object = None, **_: object) -> Answer:
        with self.lock:
            self.calls += 1
            n = self.calls
        if n <= self.refusals:
            return Answer(403, {"code": "quota_exceeded"}, 0.0, 0.0)
        return Answer(202, {"id": f"c{n}"}, 0.0, 0.0)


def test_the_load_goes_on_until_half_its_submissions_are_accepted() -> None:
    """Stopped at once, with 4 to make: the first 3 refused by the quota, so it makes 5, the
    fewest with 2 accepted."""
    api = _QuotaFirst(refusals=3)
    load = upgrade.Load(api=api, tokens={"upgrade-00": "t"}, at_least=4)  # type: ignore[arg-type]
    load.stopping.set()
    load.run()
    assert len(load.submissions) == 5 and load.accepted() == 2 and len(load.refused) == 3


def test_a_commit_the_clone_lacks_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(upgrade.resolve("HEAD")) == 40
    assert upgrade.main(["--from", "0000000deadbeef"]) == 2
    err = capsys.readouterr().err
    assert "0000000deadbeef is not in this clone" in err and err.count("\n") == 1


def test_a_shallow_clone_fetches_the_earlier_commit_from_its_origin(tmp_path: Path) -> None:
    earlier = upgrade.resolve("HEAD~1")
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{upgrade.REPO}", str(clone)], check=True)
    assert subprocess.run(["git", "-C", str(clone), "cat-file", "-e", earlier], check=False).returncode != 0
    assert upgrade.resolve(earlier, clone) == earlier
