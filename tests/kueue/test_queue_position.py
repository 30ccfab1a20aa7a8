"""Where a waiting container stands, as a tenant reads it: ``queue`` on ``GET /v1/containers/{id}``
and on the listing, from the Kueue Workloads of the tenancy's own namespace (docs/queues.md).

The API (SQLite) and the tenancy controller run under their chart ServiceAccounts with the RBAC
the chart renders for ``queueing.mode: kueue``, on a cluster of their own with Kueue and no
kube-scheduler: a container Kueue admits stays on no node, waiting for a partition. A tenancy
taking its lent guarantee back has Kueue preempt the borrowers, which the API reports as such."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.waiting import WaitTimeout, wait_for
from tests.api.harness import ApiServer
from tests.api.test_console import browser  # noqa: F401 (the fixture)
from tests.caasctl.conftest import invoke, start_api
from tests.console_browser import goto
from tests.kueue.conftest import TIMEOUT, Queued


@pytest.fixture(scope="module")
def api(controlled: Queued, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, Path]]:
    """The API queueing by Kueue, and its CA's certificate (for caasctl)."""
    import trustme

    ca = trustme.CA()
    server = start_api(
        ca,
        controlled.kubeconfigs["api"],
        tmp_path_factory,
        queueing="kueue",
        rate_limit_token="",
        rate_limit_tenancy="",
    )
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(ca_file)
    try:
        yield server, ca_file
    finally:
        server.stop()


def _submit(tenant: httpx.Client, tenancy: str, gpus: int) -> str:
    r = tenant.post(
        "/v1/containers",
        json={"container-url": "busybox:1.36", "tenancy": tenancy, "gpus": gpus, "command": ["sleep", "600"]},
    )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _queue(tenant: httpx.Client, cid: str) -> dict[str, Any] | None:
    r = tenant.get(f"/v1/containers/{cid}")
    assert r.status_code == 200, r.text
    return r.json()["queue"]


def _spot(position: int, gpus_ahead: int, reason: str) -> dict[str, Any]:
    return {"position": position, "gpus_ahead": gpus_ahead, "reason": reason}


def _wait_spot(tenant: httpx.Client, cid: str, want: dict[str, Any]) -> None:
    try:
        wait_for(lambda: _queue(tenant, cid) == want, TIMEOUT, what=f"container {cid} at {want}")
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}; the container now: {tenant.get(f'/v1/containers/{cid}').json()}") from None


def _behind(
    tenant: httpx.Client, gpus: dict[str, int], *, first: int, gpus_ahead: int, reason: str
) -> dict[str, dict[str, Any]]:
    """Wait until the containers of ``gpus`` (id -> GPUs) hold the places from ``first`` on, one
    after another, each behind ``gpus_ahead`` plus the GPUs of those of them ahead; returns the
    spots. Their order among themselves is Kueue's: creation to the second, then the Workload's
    uid (two made in one second go either way)."""

    def settled() -> dict[str, dict[str, Any]] | None:
        spots = {cid: _queue(tenant, cid) for cid in gpus}
        if any(s is None or s["reason"] != reason for s in spots.values()):
            return None
        ahead = gpus_ahead
        for position, cid in enumerate(sorted(spots, key=lambda c: spots[c]["position"]), start=first):  # type: ignore[index]
            if spots[cid] != _spot(position, ahead, reason):
                return None
            ahead += gpus[cid]
        return spots  # type: ignore[return-value]

    return wait_for(settled, TIMEOUT, what=f"{sorted(gpus)} from place {first} on, {reason}")


def test_a_waiting_container_shows_its_place_and_only_its_own_tenancys_work_counts(
    api: tuple[ApiServer, Path],
    browser: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    server, ca_file = api
    with server.client() as admin:
        for name, quota, guaranteed in (("lender", 8, 8), ("p", 16, 0), ("o", 8, 1)):
            r = admin.post(
                "/v1/admin/tenancies",
                json={"name": name, "gpu_quota": quota, "pod_quota": 4, "guaranteed_gpus": guaranteed},
            )
            assert r.status_code == 201, r.text
        tokens = {
            name: admin.post(f"/v1/admin/tenancies/{name}/tokens", json={"name": "t"}).json()["token"]
            for name in ("p", "o")
        }
    with server.client(tokens["p"]) as p, server.client(tokens["o"]) as o:
        # The cohort has 9 GPUs: lender's idle 8, lent, and o's 1; p is guaranteed none.
        c1 = _submit(p, "p", 8)
        _wait_spot(p, c1, _spot(1, 0, "waiting_for_partition"))  # admitted: no node takes it here
        c2, c3 = _submit(p, "p", 4), _submit(p, "p", 2)
        after_c1 = _behind(p, {c2: 4, c3: 2}, first=2, gpus_ahead=8, reason="over_share")
        # their pods are gated by Kueue: the message says they wait in the queue, not for a node
        for cid in (c2, c3):
            wait_for(
                lambda cid=cid: (p.get(f"/v1/containers/{cid}").json()["message"] or "").startswith(
                    "waiting in the queue: "
                ),
                TIMEOUT,
                what=f"{cid}'s message",
            )
        # o's container takes o's own GPU (admitted, no node): p's work never shows in o's queue
        c4 = _submit(o, "o", 1)
        _wait_spot(o, c4, _spot(1, 0, "waiting_for_partition"))
        assert o.get(f"/v1/containers/{c1}").status_code == 404
        listed = {c["id"]: c["queue"] for c in o.get("/v1/containers").json()["data"]}
        assert listed == {c4: _spot(1, 0, "waiting_for_partition")}
        # caasctl ps shows the same
        env = {"GPUCAAS_URL": server.base_url, "GPUCAAS_TOKEN": tokens["o"], "GPUCAAS_CA_CERT": str(ca_file)}
        shown = invoke(["ps"], env)
        assert shown.exit_code == 0 and "#1, 0 GPUs ahead, waiting for a partition" in shown.stdout, shown
        # and so does the console, on the container's page
        context = browser.new_context(ignore_https_errors=True)
        # the rest of `make test` shares the two cores: a slow first paint is not the failure looked for
        context.set_default_timeout(120_000)
        page = context.new_page()
        goto(page, f"{server.base_url}/console")
        page.fill("#token", tokens["o"])
        page.click("#signin button[type=submit]")
        page.wait_for_selector("#containers")
        goto(page, f"{server.base_url}/console/#/containers/{c4}")
        page.wait_for_selector("#container-queue >> text=#1, 0 GPUs ahead, waiting for a partition")
        listed = {c["id"]: c["queue"] for c in p.get("/v1/containers").json()["data"]}
        assert listed == {c1: _spot(1, 0, "waiting_for_partition"), **after_c1}

        # c1 cancelled: its 8 GPUs go back to the cohort, and the rest move up
        assert p.delete(f"/v1/containers/{c1}").status_code == 200
        _behind(p, {c2: 4, c3: 2}, first=1, gpus_ahead=0, reason="waiting_for_partition")
        wait_for(lambda: p.get(f"/v1/containers/{c1}").json()["status"] == "Cancelled", TIMEOUT, what="c1 ended")
        assert _queue(p, c1) is None  # an ended container is in no queue

    # The lender takes its guarantee back: Kueue preempts what p borrowed (c2 and c3, 6 GPUs; o's
    # one GPU is o's own) and the API says so, naming no other tenancy
    with server.client() as admin:
        lender = admin.post("/v1/admin/tenancies/lender/tokens", json={"name": "t"}).json()["token"]
    with server.client(lender) as own, server.client(tokens["p"]) as p:
        back = _submit(own, "lender", 8)

        def ended(cid: str) -> dict[str, Any] | None:
            c = p.get(f"/v1/containers/{cid}").json()
            return c if c["status"] == "Failed" else None

        for cid in (c2, c3):
            c = wait_for(lambda cid=cid: ended(cid), TIMEOUT, what=f"{cid} preempted")
            assert c["message"].startswith("Preempted by the queue: "), c["message"]
            assert "lender" not in c["message"] and c["queue"] is None
        _wait_spot(own, back, _spot(1, 0, "waiting_for_partition"))
