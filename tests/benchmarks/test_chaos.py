"""The chaos soak's contract, without a sandbox (``make test-chaos`` runs the soak itself):
its kill plan covers every component of the mode, seeded; and its checks count what they
say they count, from made-up observations."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from benchmarks import chaos


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_the_kill_plan_kills_every_component_of_the_mode_within_the_window(mode: str) -> None:
    plan = chaos.kill_plan(random.Random(7), mode, chaos.QUICK)
    killed = Counter(name for _, name in plan)
    assert set(killed) == set(chaos.components(mode)) and len(plan) >= 10
    assert ("dra-driver" in killed) == (mode == "dra") and ("device-plugin" in killed) == (mode != "dra")
    assert all(0 < at <= chaos.QUICK.window_s for at, _ in plan)
    assert [at for at, _ in plan] == sorted(at for at, _ in plan)
    # the seed decides it
    assert (
        plan
        == chaos.kill_plan(random.Random(7), mode, chaos.QUICK)
        != chaos.kill_plan(random.Random(8), mode, chaos.QUICK)
    )
    full = chaos.kill_plan(random.Random(7), mode, chaos.FULL)
    assert Counter(name for _, name in full) == Counter({c: chaos.FULL.rounds for c in chaos.components(mode)})


def _pod(
    uid: str,
    cid: str,
    phase: str,
    exit_code: int | None,
    start: str = "2026-11-26T10:00:00Z",
    end: str = "2026-11-26T10:00:03Z",
) -> chaos.PodRecord:
    return chaos.PodRecord(
        uid, cid, phase=phase, started_at=start, finished_at=end, exit_code=exit_code, running=True, gpus=2
    )


def _usage(gpus: int, seconds: float, source: str = "pod") -> dict[str, object]:
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 11, 26, 10, 0, 0, tzinfo=UTC)
    return {
        "gpus": gpus,
        "started_at": start,
        "finished_at": start + timedelta(seconds=seconds / gpus),
        "gpu_seconds": seconds,
        "end_source": source,
    }


def test_the_checks_count_lost_duplicated_and_usage_mismatches() -> None:
    work = chaos.Workload(api=None, admin_token="", tokens={}, size=chaos.QUICK, rng_seed=0)  # type: ignore[arg-type]
    subs = {
        name: chaos.Submission(f"k-{name}", "chaos-00", 2, 0, cid=name)
        for name in (
            "fine",
            "stillrunning",
            "disagrees",
            "cancelledbyitself",
            "twice",
            "nousage",
            "wrongusage",
            "cancelled",
        )
    }
    subs["cancelled"].cancelled = True
    work.submissions = list(subs.values())
    ok = {"tenancy": "chaos-00", "exit_code": 0, "message": None}
    rows = {cid: {**ok, "status": "Succeeded"} for cid in subs}
    rows["stillrunning"]["status"] = "Running"
    rows["disagrees"].update(status="Failed", exit_code=None, message="pod vanished")
    rows["cancelledbyitself"]["status"] = "Cancelled"
    rows["cancelled"]["status"] = "Cancelled"
    rows["extra"] = {**ok, "status": "Succeeded"}  # no 202 answered with it: a submission run twice
    pods = {cid: [_pod(f"uid-{cid}", cid, "Succeeded", 0)] for cid in subs}
    pods["twice"].append(_pod("uid-twice-2", "twice", "Succeeded", 0))
    usage = {cid: _usage(2, 6.0) for cid in subs}
    del usage["nousage"]
    usage["wrongusage"] = _usage(2, 8.0)
    usage["cancelled"] = _usage(2, 7.0, source="deleted")  # ended at the deletion: within the slack
    found = chaos.check(work, rows, pods, Counter({"tenant-chaos-00/gpucaas-fine": 1}), usage, [])

    assert sorted(item.split(" ")[0] for item in found["lost"]) == ["cancelledbyitself", "disagrees", "stillrunning"]
    assert sorted(item.split(" ")[0].rstrip(":") for item in found["duplicated"]) == ["extra", "twice"]
    assert sorted(item.split(":")[0] for item in found["usage_mismatches"]) == ["nousage", "wrongusage"]

    # a pod deleted (its tenancy's deletion) before the soak's watch saw it end cannot be checked: not lost
    gone = chaos.Submission("k-gone", "chaos-00", 2, 0, cid="gone")
    work.submissions.append(gone)
    rows["gone"] = {**ok, "status": "Succeeded"}
    pods["gone"] = [
        chaos.PodRecord(
            "uid-gone", "gone", phase="Running", started_at="2026-11-26T10:00:00Z", running=True, deleted=True, gpus=2
        )
    ]
    usage["gone"] = _usage(2, 6.0, source="deleted")
    found = chaos.check(work, rows, pods, Counter(), usage, [])
    assert not any(item.startswith("gone") for item in found["lost"] + found["usage_mismatches"])

    # a pod created twice counts, as seen in kube-apiserver's audit log
    again = chaos.check(work, rows, pods, Counter({"tenant-chaos-00/gpucaas-fine": 2}), usage, [])
    assert any(item.startswith("fine:") for item in again["duplicated"])


def test_stuck_leases_and_partitions_are_those_without_a_running_holder() -> None:
    running = {"metadata": {"name": "gpucaas-a"}, "status": {"phase": "Running"}}
    leases = [
        {"metadata": {"name": "free"}, "status": {"state": "Free"}},
        {"metadata": {"name": "held"}, "status": {"state": "Leased", "holder": {"pod": "gpucaas-a"}}},
        {"metadata": {"name": "orphan"}, "status": {"state": "Leased", "holder": {"pod": "gpucaas-gone"}}},
        {"metadata": {"name": "releasing"}, "status": {"state": "Releasing"}},
    ]
    fabric = [
        {
            "metadata": {"name": "gpu-node-a"},
            "status": {"partitions": [{"id": 3, "active": True, "holder": "x"}, {"id": 4, "active": False}]},
        }
    ]
    leases_stuck, parts_stuck = chaos.stuck(leases, fabric, [running])
    assert [s.split(":")[0] for s in leases_stuck] == ["orphan", "releasing"] and parts_stuck == []
    _, parts_stuck = chaos.stuck(leases, fabric, [])
    assert len(parts_stuck) == 1 and "partition 3" in parts_stuck[0]


def test_audit_log_creates_count_successful_pod_creates_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    def event(name: str, code: int, sub: str | None = None) -> str:
        ref = {"resource": "pods", "namespace": "tenant-t", "name": name, **({"subresource": sub} if sub else {})}
        return json.dumps({"verb": "create", "objectRef": ref, "responseStatus": {"code": code}})

    log = tmp_path / "audit.jsonl"
    log.write_text(
        "\n".join(
            [
                event("gpucaas-a", 201),
                event("gpucaas-a", 409),
                event("gpucaas-a", 201, "binding"),
                event("gpucaas-b", 201),
                event("gpucaas-b", 201),
                event("other", 201),
                "{not json",
            ]
        )
    )
    assert chaos.audit_pod_creates(log) == Counter({"tenant-t/gpucaas-a": 1, "tenant-t/gpucaas-b": 2})


class _Clock:
    """time.monotonic and time.sleep of a heal that never waits: each sleep moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _heal_over(monkeypatch: pytest.MonkeyPatch, counts: list[int]) -> tuple[float, int]:
    """The heal of containers ``c0``…: at its k-th look ``counts[k]`` of them (the last count
    from then on) are still Running, and no pod, lease or partition is left. Returns the
    seconds it took and how many looks it made."""
    clock, looks = _Clock(), []
    ids = [f"c{i}" for i in range(max(counts))]

    def containers(api: object, token: str) -> dict[str, dict[str, str]]:
        left = counts[min(len(looks), len(counts) - 1)]
        looks.append(left)
        return {cid: {"status": "Running" if i < left else "Succeeded"} for i, cid in enumerate(ids)}

    monkeypatch.setattr(chaos, "time", clock)
    monkeypatch.setattr(chaos, "api_containers", containers)
    monkeypatch.setattr(chaos, "cluster_state", lambda kubeconfig: ([], [], []))
    healed = chaos.heal(None, "token", None, set(ids))  # type: ignore[arg-type]
    return healed, len(looks)


def test_a_heal_that_keeps_draining_is_waited_for_past_heal_s(monkeypatch: pytest.MonkeyPatch) -> None:
    # one container ends every 100 s (50 looks of 2 s): 400 s in all, longer than HEAL_S
    counts = [4 - k // 50 for k in range(201)]
    healed, looks = _heal_over(monkeypatch, counts)
    assert healed == 400.0 > chaos.HEAL_S and looks == 201


def test_a_heal_that_stops_draining_gives_up_heal_s_after_the_last_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # two containers end in the first 100 s, then the last one never does
    counts = [3 - min(k // 25, 2) for k in range(51)]
    healed, _ = _heal_over(monkeypatch, counts)
    assert healed == 100.0 + chaos.HEAL_S


def test_draining_is_fewer_active_containers_first_then_fewer_of_the_rest() -> None:
    assert chaos.draining((5, 3, 0, 0), (4, 8, 2, 0))
    assert chaos.draining((5, 3, 0, 0), (5, 2, 0, 0))
    assert not chaos.draining((5, 3, 0, 0), (5, 3, 0, 0))
    assert not chaos.draining((5, 3, 0, 0), (5, 4, 0, 0))
