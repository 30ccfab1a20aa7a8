"""Sandboxes side by side (``make test`` runs the chaos soak beside the upgrade run): a node
chooses its pod network and makes its bridge under one machine-wide lock, so that two nodes
starting at once never take the same network."""

from __future__ import annotations

import subprocess

import pytest

from devtools.real_node.node import POD_NETWORKS_LOCK, pod_networks_chosen


def _lock_free() -> bool:
    """Whether another process could take the lock now (``flock -n`` exits 1 when it is held)."""
    return subprocess.run(["flock", "-n", str(POD_NETWORKS_LOCK), "true"], check=False).returncode == 0


def test_the_choice_of_a_pod_network_holds_the_machine_wide_lock_until_its_bridge_is_made() -> None:
    assert _lock_free()
    with pod_networks_chosen():
        assert not _lock_free()
    assert _lock_free()


def test_the_lock_is_given_back_when_the_choice_fails() -> None:
    with pytest.raises(RuntimeError), pod_networks_chosen():
        raise RuntimeError("no free 10.88.N.0/24 pod network left on this machine")
    assert _lock_free()
