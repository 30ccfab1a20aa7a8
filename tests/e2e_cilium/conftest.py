"""A sandbox whose real nodes run Cilium as their network (``gpucaas sandbox --network cilium``):
each node in a network namespace of its own, the tenancy controller's CiliumNetworkPolicies
enforced by Cilium's BPF datapath on real packets (devtools/real_node/cilium.py).

Opt-in: ``make test-cilium`` builds Cilium (``make upstream-cilium``, ~9 min on 2 cores the
first time) and runs this package with ``GPUCAAS_E2E_CILIUM=1``; without it the package is
skipped, saying so (the agent also sets system-wide sysctls, docs/cilium.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from devtools.local_cluster.binaries import bin_dir
from devtools.real_node import cilium
from devtools.sandbox import runner
from tests.e2e.conftest import Tenant
from tests.fixtures.sandbox import package_sandbox

ENABLE_ENV = "GPUCAAS_E2E_CILIUM"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(ENABLE_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"the Cilium packet tests run with {ENABLE_ENV}=1 (make test-cilium)")
    for item in items:
        if item.nodeid.startswith("tests/e2e_cilium/"):
            item.add_marker(skip)


@pytest.fixture(scope="package")
def sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    missing = cilium.missing(bin_dir())
    if missing:
        pytest.fail(f"{ENABLE_ENV}=1 but this machine lacks {', '.join(missing)}")
    with package_sandbox(request, "gpucaas-e2e-cilium-", network="cilium") as sb:
        yield sb


@pytest.fixture(scope="package")
def admin(sandbox: runner.Sandbox) -> Tenant:
    return Tenant(sandbox, sandbox.admin_token)
