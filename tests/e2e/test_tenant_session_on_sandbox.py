"""A tenant's session on the sandbox, lived with caasctl only: register two
webhooks (one receiver fails its first two deliveries), run a 2-GPU `ls /dev/vfio; sleep 3` with
`caasctl run --follow` (log shown, exit code 0), see `caasctl usage` charge it 2 × about 3
GPU-seconds from the container's own start and end as the kubelet reports them, and find
`container.running` and `container.succeeded` at both receivers, each signed as
docs/webhooks.md tells tenants to verify."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devtools.sandbox import runner, tenant_view
from services.api.webhooks.signing import verify
from tests.api.webhook_receiver import Receiver

from .conftest import receiver_host, wait_for

CAASCTL = Path(sys.executable).with_name("caasctl")
EVENTS = ("container.running", "container.succeeded")


def test_a_tenants_session_run_usage_and_signed_webhooks(sandbox: runner.Sandbox, tenant_factory) -> None:
    tenant = tenant_factory("metered")
    env = {
        **os.environ,
        "GPUCAAS_CONFIG": str(tenant_view.caasctl_config_path(sandbox)),
        "GPUCAAS_TOKEN": tenant.token,
        "COLUMNS": "200",
    }

    def caasctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CAASCTL), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    host = receiver_host(sandbox)
    steady, flaky = Receiver(host=host).start(), Receiver(fail_first=2, host=host).start()
    try:
        secrets: dict[str, str] = {}
        for receiver in (steady, flaky):
            made = caasctl("webhooks", "create", receiver.url, "-o", "json")
            assert made.returncode == 0, made.stderr
            secrets[receiver.url] = json.loads(made.stdout)["secret"]

        ran = caasctl(
            "run", "busybox:1.36", "--gpus", "2", "--follow", "--", "sh", "-c", "ls /dev/vfio; sleep 3", timeout=300
        )
        assert ran.returncode == 0, ran.stderr
        # the container's log, followed to its end: its two GPUs' IOMMU groups and the vfio container node
        listed = ran.stdout.split()
        assert len(listed) == 3 and "vfio" in listed and all(g.isdigit() for g in listed if g != "vfio"), ran.stdout
        cid = ran.stderr.split("container ", 1)[1].split()[0]

        def charged() -> dict | None:
            got = caasctl("usage", "--group-by", "container", "-o", "json")
            assert got.returncode == 0, got.stderr
            return next(
                (r for r in json.loads(got.stdout)["data"] if r["container_id"] == cid and not r["running"]), None
            )

        row = wait_for(charged, what="the run's usage record")
        assert row["gpus"] == 2 and row["nvlink_partition_size"] == 2 and row["end_source"] == "pod"
        assert row["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
        assert 2 * 3 <= row["gpu_seconds"] <= 2 * 5, row  # timestamps are whole seconds
        table = caasctl("usage")
        assert table.returncode == 0 and "GPU-SECONDS" in table.stdout

        for receiver in (steady, flaky):
            wait_for(
                lambda r=receiver: all(r.received(e) for e in EVENTS),
                timeout=180,
                what=f"both events delivered to {receiver.url}",
            )
            for event_type in EVENTS:
                got = receiver.received(event_type)[0]
                assert got.event["data"]["container"]["id"] == cid
                assert verify(secrets[receiver.url], got.headers, got.body)
                assert not verify("whsec_not-the-secret", got.headers, got.body)
        assert [r.answered for r in flaky.requests[:2]] == [500, 500]
        hooks = json.loads(caasctl("webhooks", "list", "-o", "json").stdout)
        flaky_id = next(h["id"] for h in hooks if h["url"] == flaky.url)
        deliveries = caasctl("webhooks", "deliveries", flaky_id, "-o", "json")
        assert deliveries.returncode == 0, deliveries.stderr
        assert any(len(d["attempts"]) >= 2 and d["status"] == "delivered" for d in json.loads(deliveries.stdout))
    finally:
        steady.stop()
        flaky.stop()
