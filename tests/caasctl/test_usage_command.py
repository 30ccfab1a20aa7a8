"""``caasctl usage`` with a tenant's token: a table per day or per container, and JSON;
``tenancies create --gpu-hours-per-month`` sets a budget."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from devtools.waiting import wait_for
from services.api.domain.models import utcnow
from tests.api.harness import ApiServer
from tests.api.kube_helpers import mark_tenancy_ready
from tests.api.usage_helpers import end_run, record_of, stamp, start_run

from .conftest import Caasctl
from .test_tenant_commands import tenant_token


def test_a_tenant_reads_its_gpu_seconds(caasctl: Caasctl, api: ApiServer, kube: Any) -> None:
    me = {"GPUCAAS_TOKEN": tenant_token(caasctl, "tu")}
    ran = caasctl("run", "--detach", "busybox:1.36", "--gpus", "2", "--", "sleep", "3", env=me)
    assert ran.exit_code == 0, ran.stderr
    cid = ran.stdout.strip()
    mark_tenancy_ready(kube, "tu")
    started = utcnow().replace(microsecond=0) - timedelta(seconds=20)
    finished = started + timedelta(seconds=3)
    start_run(kube, "tu", cid, node="dgx-u", pod_start=started, started=started)
    end_run(kube, "tu", cid, pod_start=started, started=started, finished=finished)
    with api.client(me["GPUCAAS_TOKEN"]) as c:
        wait_for(lambda: (r := record_of(c, cid)) and not r["running"], 60, what="the run's end")

    per_container = caasctl("usage", "--group-by", "container", "-o", "json", env=me)
    assert per_container.exit_code == 0, per_container.stderr
    report = per_container.json()
    assert report["total_gpu_seconds"] == 6.0 and report["group_by"] == "container"
    [row] = report["data"]
    assert (row["container_id"], row["gpus"], row["started_at"], row["finished_at"], row["gpu_seconds"]) == (
        cid,
        2,
        stamp(started),
        stamp(finished),
        6.0,
    )

    table = caasctl("usage", env=({"COLUMNS": "200", **me}))
    assert table.exit_code == 0, table.stderr
    assert "GPU-SECONDS" in table.stdout and started.date().isoformat() in table.stdout
    assert "6 GPU-seconds" in table.stdout

    window = caasctl(
        "usage",
        "--from",
        started.date().isoformat(),
        "--to",
        stamp(started + timedelta(seconds=1)),
        "-o",
        "json",
        env=me,
    )
    assert window.exit_code == 0 and window.json()["total_gpu_seconds"] == 2.0

    bad = caasctl("usage", "--from", "2026-12-31", "--to", "2026-01-01", env=me)
    assert bad.exit_code == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: ") and "from: 2026-12-31T00:00:00Z is after to" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_an_admin_sets_a_monthly_budget(caasctl: Caasctl) -> None:
    made = caasctl("tenancies", "create", "tbudget", "--gpu-hours-per-month", "250", "-o", "json")
    assert made.exit_code == 0, made.stderr
    assert made.json()["gpu_hours_per_month"] == 250
