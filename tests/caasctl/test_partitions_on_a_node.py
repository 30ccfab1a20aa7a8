"""caasctl partitions list/activate/deactivate against a node's fabric service (its local API on
a unix socket, over the Fabric Manager simulator), as an admin on the node would run them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from core.fabric_client import holder_for_gpus
from services.fabric.fabric_manager.simulator import default_gpu_map
from services.fabric.views import ADMIN_HOLDER_PREFIX

from .conftest import Fabric, Run, invoke

GPUS = default_gpu_map()
NODE = "gpu-node-a"
ADMIN_3 = f"{ADMIN_HOLDER_PREFIX}3"  # the holder the fabric service records for an admin activation


@pytest.fixture
def fab(fabric_service: Fabric) -> Iterator[Fabric]:
    """The module's fabric service, with nothing active at the start of each test."""
    yield fabric_service
    for a in fabric_service.service.activations():
        fabric_service.service.release(a["holder"])
    for pid in fabric_service.fabric.active_partition_ids():
        fabric_service.fabric.deactivate(pid)


def run(fab: Fabric, env: dict[str, str], *args: object) -> Run:
    """caasctl with the socket given by flag, and no API settings at all (none are needed)."""
    return invoke([*args, "--fabric-socket", fab.socket], env)


def test_list_from_the_socket(fab: Fabric, no_config: dict[str, str]) -> None:
    r = run(fab, no_config, "partitions", "list", "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()
    assert [p["id"] for p in rows] == list(range(15))  # the HGX H100 partition table
    p1 = rows[1]
    assert (p1["gpus"], p1["nvlinks"], p1["active"], p1["holder"], p1["node"]) == (
        [1, 2, 3, 4],
        72,
        False,
        None,
        "local",
    )
    assert p1["pci"] == [GPUS[i] for i in (1, 2, 3, 4)]
    assert run(fab, no_config, "partitions", "list", "-o", "yaml").yaml() == rows
    table = run(fab, no_config, "partitions", "list")
    for header in ("PARTITION ID", "STATUS", "GPUs", "NVLINKS", "GPU PHYSICAL IDs", "HOLDER"):
        assert header in table.stdout


def test_activate_then_deactivate(fab: Fabric, no_config: dict[str, str]) -> None:
    r = run(fab, no_config, "partitions", "activate", "3", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json() == {"id": 3, "active": True, "holder": ADMIN_3, "evicted": []}
    assert set(fab.fabric.active_partition_ids()) == {3}
    listed = {p["id"]: p for p in run(fab, no_config, "partitions", "list", "-o", "json").json()}
    assert listed[3]["active"] is True and listed[3]["holder"] == ADMIN_3
    line = next(ln for ln in run(fab, no_config, "partitions", "list").stdout.splitlines() if ADMIN_3 in ln)
    assert "Active" in line and "1,3" in line

    r = run(fab, no_config, "partitions", "deactivate", "3", "-o", "yaml")
    assert r.exit_code == 0, r.stderr
    assert r.yaml() == {"id": 3, "active": False, "released_holder": ADMIN_3}
    assert set(fab.fabric.active_partition_ids()) == set()


def test_a_partition_a_container_holds_is_refused_unless_forced(fab: Fabric, no_config: dict[str, str]) -> None:
    holder = holder_for_gpus(GPUS[i] for i in (1, 2, 3, 4))
    fab.service.activate(holder, [GPUS[i] for i in (1, 2, 3, 4)], pod="tenant-acme/gpucaas-c1")

    # deactivating the holder's own partition
    r = run(fab, no_config, "partitions", "deactivate", "1")
    assert r.exit_code == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: refused: ") and "--force" in r.stderr
    assert holder in r.stderr and "tenant-acme/gpucaas-c1" in r.stderr
    assert set(fab.fabric.active_partition_ids()) == {1}

    # activating an overlapping partition
    r = run(fab, no_config, "partitions", "activate", "3")
    assert r.exit_code == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "tenant-acme/gpucaas-c1" in r.stderr and "--force" in r.stderr
    assert set(fab.fabric.active_partition_ids()) == {1}

    # --force evicts the holder
    r = run(fab, no_config, "partitions", "activate", "3", "--force", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["holder"] == ADMIN_3 and r.json()["evicted"] == [holder]
    assert set(fab.fabric.active_partition_ids()) == {3}
    assert [a["holder"] for a in fab.service.activations()] == [ADMIN_3]


def test_forced_deactivation_of_a_held_partition(fab: Fabric, no_config: dict[str, str]) -> None:
    holder = holder_for_gpus([GPUS[5], GPUS[7]])
    fab.service.activate(holder, [GPUS[5], GPUS[7]], pod="tenant-b/gpucaas-c2")
    r = run(fab, no_config, "partitions", "deactivate", "5", "--force", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json() == {"id": 5, "active": False, "released_holder": holder}
    assert set(fab.fabric.active_partition_ids()) == set()


def test_node_socket_from_the_config_file(fab: Fabric, tmp_path: Path) -> None:
    """``--node N`` finds the node's socket under ``nodes.N.fabric_socket`` of the config file."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"nodes": {NODE: {"fabric_socket": str(fab.socket)}}}))
    r = invoke(["partitions", "activate", "4", "--node", NODE, "-o", "json"], {"GPUCAAS_CONFIG": str(cfg)})
    assert r.exit_code == 0, r.stderr
    assert r.json()["id"] == 4
    rows = invoke(["partitions", "list", "--node", NODE, "-o", "json"], {"GPUCAAS_CONFIG": str(cfg)}).json()
    assert {p["id"] for p in rows if p["active"]} == {4} and all(p["node"] == NODE for p in rows)
    r = invoke(["--config", str(cfg), "partitions", "deactivate", "4", "--node", NODE], {})
    assert r.exit_code == 0, r.stderr
    assert set(fab.fabric.active_partition_ids()) == set()


def test_socket_errors_are_one_line(fab: Fabric, no_config: dict[str, str], tmp_path: Path) -> None:
    absent = tmp_path / "absent.sock"
    r = invoke(["partitions", "list", "--fabric-socket", str(absent)], no_config)
    assert r.exit_code == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and str(absent) in r.stderr
    r = invoke(["partitions", "activate", "3", "--fabric-socket", str(absent)], no_config)
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1 and "unreachable" in r.stderr
    # no socket anywhere: says how to give one
    r = invoke(
        ["partitions", "activate", "3", "--node", "nowhere"], {**no_config, "GPUCAAS_FABRIC_SOCKET": str(absent)}
    )
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "error: no fabric service socket for node nowhere: run caasctl on the node, "
        "pass --fabric-socket, or add nodes.<node>.fabric_socket to the config file"
    )
    r = run(fab, no_config, "partitions", "activate", "99")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1 and "99" in r.stderr
    assert set(fab.fabric.active_partition_ids()) == set()
