"""``gpucaas sandbox --demo`` on the sandbox's real kubelets, in the suite's allocation mode.

device-plugin: the design's payload for a new tenancy, then 2-, 4- and 8-GPU containers at
once, each followed through every step from its source of truth (the API, the Kubernetes
objects, the kubelet's device-manager checkpoint, the node's CDI spec and fabric service, the
GPU leases). dra: pods of 1, 2, 4 and 8 GPUs of the documented DRA shape, each through its
claim's allocation, binding condition, the kubelet's DRA checkpoint (CDI ids resolved in the
node's CDI spec), Running, Succeeded and Unprepare, with no two claims ever sharing a GPU.
"""

from __future__ import annotations

import io

from kubernetes import client
from rich.console import Console

from devtools.sandbox import runner
from devtools.sandbox.demo import run_demo
from devtools.sandbox.dra_demo import run_dra_demo

from .conftest import allocation_mode, settled, wait_for


def test_the_demo_sees_every_step_of_every_container(sandbox: runner.Sandbox, k8s: client.ApiClient) -> None:
    wait_for(lambda: settled(sandbox, k8s), what="every GPU free before the demo")
    out = io.StringIO()
    console = Console(file=out, width=200, emoji=False)
    ok = run_dra_demo(sandbox, console) if allocation_mode() == "dra" else run_demo(sandbox, console)
    assert ok, out.getvalue()
    wait_for(lambda: settled(sandbox, k8s), what="partitions released and leases Free after the demo")
