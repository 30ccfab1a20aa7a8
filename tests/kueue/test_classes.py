"""The two classes under a real Kueue: a tenancy taking its lent guarantee back has Kueue preempt
the borrower's interruptible container before its standard one, and one that asked to restart
waits in the queue again (docs/queues.md, "The two classes and preemption").

The API and the tenancy controller run as in test_queue_position (their chart ServiceAccounts
and RBAC, Kueue, no kube-scheduler: an admitted container waits for a partition), on a cluster
of this module's own, so no other test's work shares the cohort."""

from __future__ import annotations

from pathlib import Path

from devtools.waiting import wait_for
from tests.api.harness import ApiServer
from tests.kueue.conftest import TIMEOUT
from tests.kueue.test_queue_position import _queue, _spot, _submit, _wait_spot, api  # noqa: F401 (the fixture)


def test_a_reclaimed_guarantee_takes_the_borrowers_interruptible_container_before_its_standard_one(
    api: tuple[ApiServer, Path],  # noqa: F811 (the fixture imported above)
) -> None:
    """A guaranteed 8 lends them while idle; B, guaranteed none, borrows them for an interruptible
    container and then a standard one. When A asks for 4, Kueue preempts B's interruptible one
    (lower priority first), though it was admitted earlier, and leaves the standard one; the
    preempted one asked to restart, so it waits in B's queue again, saying why."""
    server, _ = api
    with server.client() as admin:
        for name, guaranteed in (("a-guar", 8), ("b-spot", 0)):
            r = admin.post(
                "/v1/admin/tenancies",
                json={"name": name, "gpu_quota": 8, "pod_quota": 4, "guaranteed_gpus": guaranteed},
            )
            assert r.status_code == 201, r.text
        tokens = {
            name: admin.post(f"/v1/admin/tenancies/{name}/tokens", json={"name": "t"}).json()["token"]
            for name in ("a-guar", "b-spot")
        }
    with server.client(tokens["b-spot"]) as b, server.client(tokens["a-guar"]) as a:
        spot = b.post(
            "/v1/containers",
            json={
                "image": "busybox:1.36",
                "gpus": 4,
                "interruptible": True,
                "restart_on_preemption": True,
                "command": ["true"],
            },
        ).json()
        assert spot["interruptible"] is True
        _wait_spot(b, spot["id"], _spot(1, 0, "waiting_for_partition"))
        standard = _submit(b, "b-spot", 4)

        def both_admitted() -> bool:
            """Both wait for a partition, one behind the other (Kueue keeps the admission time to the
            second: two admitted in one second go by the Workloads' uids)."""
            spots = [_queue(b, cid) for cid in (spot["id"], standard)]
            return sorted((s or {}).get("position", 0) for s in spots) == [1, 2] and all(
                s and s["reason"] == "waiting_for_partition" for s in spots
            )

        wait_for(both_admitted, TIMEOUT, what="both of B's containers admitted on A's lent guarantee")

        mine = _submit(a, "a-guar", 4)
        # preempted, it goes back in the queue (restart_on_preemption): a new pod Kueue holds,
        # behind B's standard container, which B's share covers no more than it did
        requeued = wait_for(
            lambda: (
                (c := b.get(f"/v1/containers/{spot['id']}").json())["attempt"] == 2
                and c["queue"] == _spot(2, 4, "preempted")
                and c
            ),
            TIMEOUT,
            what="the interruptible container preempted and queued again",
        )
        assert requeued["reason"] == "Preempted" and requeued["status"] in ("Queued", "Pending"), requeued
        assert requeued["pod_name"] == f"gpucaas-{spot['id']}-r1"
        _wait_spot(a, mine, _spot(1, 0, "waiting_for_partition"))
        _wait_spot(b, standard, _spot(1, 0, "waiting_for_partition"))  # still admitted, now first
        assert b.get(f"/v1/containers/{standard}").json()["reason"] is None
        # no longer wanted: cancelled while it waits
        assert b.delete(f"/v1/containers/{spot['id']}").status_code == 200
