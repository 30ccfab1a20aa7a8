"""Fixtures shared by every service's tests live in tests/fixtures/, one module per part."""

pytest_plugins = [
    "tests.fixtures.kube",
    "tests.fixtures.db",
    "tests.fixtures.hardware",
    "tests.fixtures.kubelet",
    "tests.fixtures.redis_server",
    # `scripted`: a scripted Kubernetes API server (tests/core_kube/scripted.py)
    "tests.core_kube.scripted",
]
