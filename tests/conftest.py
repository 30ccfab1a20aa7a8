"""Fixtures shared by every service's tests live in tests/fixtures/, one module per part."""

from typing import Any

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
#: test at a time, all on one worker, while the other worker runs the rest (`make test`'s
#: `rest` stage runs on two workers).
NODE_TESTS = ("tests/e2e/", "tests/real_node/", "tests/sandbox/", "tests/benchmarks/test_time_to_running.py")

#: Files of a few long tests (minutes each) that need nothing shared: each test is a unit of work
#: of its own, handed out first, so that two workers share them instead of one taking them all at
#: the end (`make test`'s `api` stage: 3 minutes of one worker alone before this).
LONG_TESTS = ("tests/api/test_schemathesis.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests of real nodes first, so that their worker starts on them at once; then the long
    tests. `make test` runs with ``--no-loadscope-reorder``, so the workers take the units of
    work in this order (xdist's own puts the files of most tests first)."""
    root = config.rootpath

    def order(item: pytest.Item) -> int:
        path = item.path.relative_to(root).as_posix()
        return 0 if path.startswith(NODE_TESTS) else 1 if path.startswith(LONG_TESTS) else 2

    items.sort(key=order)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with every test of real nodes in one unit of work: a file's tests
    stay on one worker (and share its module fixtures), and so do all the tests of real nodes;
    each test of :data:`LONG_TESTS` is a unit of its own.
    (pytest-xdist's own ``loadgroup`` renames items in a way pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NodeTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith(NODE_TESTS):
                return "real-nodes"
            return nodeid if path.startswith(LONG_TESTS) else path

    return NodeTestsTogether(config, log)
