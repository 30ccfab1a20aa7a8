"""Fixtures shared by every service's tests live in tests/fixtures/, one module per part."""

import pytest

pytest_plugins = [
    "tests.fixtures.kube",
    "tests.fixtures.db",
    "tests.fixtures.hardware",
    "tests.fixtures.kubelet",
    "tests.fixtures.redis_server",
    # `scripted`: a scripted Kubernetes API server (tests/core_kube/scripted.py)
    "tests.core_kube.scripted",
]

#: What starts real nodes or a whole sandbox (kubelets, containerd, the product): one such
#: module at a time, on one worker, while the other worker runs the rest (`make test`'s
#: `rest` stage runs on two workers, `--dist loadgroup`).
NODE_TESTS = ("tests/e2e/", "tests/real_node/", "tests/sandbox/", "tests/benchmarks/test_time_to_running.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for pytest-xdist's ``loadgroup``: a file's tests stay on one worker (and
    share its module fixtures), and every test of real nodes goes to the same worker, first."""
    root = config.rootpath

    def path(item: pytest.Item) -> str:
        return item.path.relative_to(root).as_posix()

    for item in items:
        nodes = path(item).startswith(NODE_TESTS)
        item.add_marker(pytest.mark.xdist_group("real-nodes" if nodes else path(item)))
    items.sort(key=lambda item: not path(item).startswith(NODE_TESTS))
