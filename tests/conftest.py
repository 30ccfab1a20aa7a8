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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests of real nodes first, so that their worker starts on them at once."""
    root = config.rootpath
    items.sort(key=lambda item: not item.path.relative_to(root).as_posix().startswith(NODE_TESTS))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with every test of real nodes in one unit of work: a file's tests
    stay on one worker (and share its module fixtures), and so do all the tests of real nodes.
    (pytest-xdist's own ``loadgroup`` renames items in a way pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NodeTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "real-nodes" if path.startswith(NODE_TESTS) else path

    return NodeTestsTogether(config, log)
