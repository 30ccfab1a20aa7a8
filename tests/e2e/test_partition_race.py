"""Submitting right after cancelling never ends in a permanent Allocate ABORTED: a
partition released by a cancelled pod is free (or released by Allocate) before the next
Allocate that needs it.

Property-style: a seeded random sequence of submissions (1, 2 or 4 GPUs) and quick
cancellations on the sandbox; whatever the interleaving, no container fails because
of a partition conflict, and everything is released at the end."""

from __future__ import annotations

import random

from kubernetes import client

from devtools.sandbox import runner

from .conftest import UNTIL_CANCELLED, container_status, settled, wait_for, wait_status

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def test_random_submit_and_cancel_never_aborts_for_good(
    sandbox: runner.Sandbox, tenant_factory, k8s: client.ApiClient
) -> None:
    rng = random.Random(16)
    tenant = tenant_factory("racer")
    live: list[str] = []
    seen: list[str] = []
    for _ in range(14):
        if live and rng.random() < 0.45:
            cid = live.pop(rng.randrange(len(live)))
            status, body = tenant.call("DELETE", f"/v1/containers/{cid}")
            assert status in (200, 409), body  # 409: it had finished already
            continue
        gpus = rng.choice([1, 2, 2, 4])
        # 50m CPU: on the sandbox's 2-CPU real nodes the pods' 500m Kata overhead already limits
        # them to three a node; GPUs, not CPU, should be what the submissions contend for
        status, body = tenant.call(
            "POST",
            "/v1/containers",
            {"image": IMAGE, "gpus": gpus, "cpu": "50m", "command": rng.choice([["sleep", "1"], UNTIL_CANCELLED])},
        )
        if status == 403:  # quota (16 GPUs): cancel something instead
            continue
        assert status == 202, body
        live.append(body["id"])
        seen.append(body["id"])
        if rng.random() < 0.5:  # sometimes wait until it runs before the next step
            wait_status(tenant, body["id"], "Running", "Succeeded", "Failed")
    for cid in live:
        tenant.call("DELETE", f"/v1/containers/{cid}")
    finals = {cid: wait_status(tenant, cid, "Succeeded", "Failed", "Cancelled", timeout=240) for cid in seen}
    aborted = {
        cid: c["message"]
        for cid, c in finals.items()
        if c["status"] == "Failed" and ("ABORTED" in (c["message"] or "") or "held by" in (c["message"] or ""))
    }
    assert not aborted, aborted
    failed = {cid: c["message"] for cid, c in finals.items() if c["status"] == "Failed"}
    assert not failed, failed
    wait_for(lambda: settled(sandbox, k8s), timeout=240, what="every partition and lease released")
    assert all(container_status(tenant, cid)["status"] != "Running" for cid in seen)
