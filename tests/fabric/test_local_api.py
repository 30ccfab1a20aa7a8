"""The local API over a real unix socket, against the Fabric Manager simulator."""

from __future__ import annotations

import http.client
import os
import stat

import pytest

from core.fabric_client import (
    FabricClient,
    FabricConflict,
    FabricRejected,
    FabricUnavailable,
)
from services.fabric.fabric_manager.simulator import SimulatedFabric
from tests.fabric.factories import holder, pcis


def active(fabric: SimulatedFabric) -> set[int]:
    return set(fabric.active_partition_ids())


def test_socket_is_a_socket_with_mode(client: FabricClient) -> None:
    st = os.stat(client.socket_path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660


def test_activate_pair_gets_its_nvlink_partition(client: FabricClient, fabric: SimulatedFabric) -> None:
    res = client.activate(holder(1, 3), pcis(1, 3))
    assert res == {"holder": holder(1, 3), "gpus": sorted(pcis(1, 3)), "partition_ids": [3], "nvlink": True}
    assert active(fabric) == {3}


def test_activate_is_idempotent(client: FabricClient, fabric: SimulatedFabric) -> None:
    first = client.activate(holder(5, 6, 7, 8), pcis(5, 6, 7, 8))
    again = client.activate(holder(5, 6, 7, 8), list(reversed(pcis(5, 6, 7, 8))))
    assert first == again
    assert first["partition_ids"] == [2]
    assert active(fabric) == {2}
    assert len(client.activations()) == 1


def test_non_partition_set_gets_single_gpu_partitions(client: FabricClient, fabric: SimulatedFabric) -> None:
    res = client.activate(holder(1, 2, 3), pcis(1, 2, 3))
    assert res["partition_ids"] == [7, 8, 9]
    assert res["nvlink"] is False
    assert active(fabric) == {7, 8, 9}


def test_conflict_names_the_holder_and_pod(client: FabricClient, fabric: SimulatedFabric) -> None:
    client.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
    client.sync([{"holder": holder(1, 2, 3, 4), "pod": "tenant-a/job-1"}], grace_seconds=0)
    with pytest.raises(FabricConflict) as err:
        client.activate(holder(1, 3), pcis(1, 3))
    assert err.value.status == 409
    assert err.value.code == "conflict"
    assert holder(1, 2, 3, 4) in err.value.detail
    assert "tenant-a/job-1" in err.value.detail
    assert active(fabric) == {1}


def test_same_holder_other_gpus_is_a_conflict(client: FabricClient) -> None:
    client.activate("h", pcis(1))
    with pytest.raises(FabricConflict, match="release it"):
        client.activate("h", pcis(2))


def test_release_deactivates_and_is_idempotent(client: FabricClient, fabric: SimulatedFabric) -> None:
    client.activate(holder(2, 4), pcis(2, 4))
    assert client.release(holder(2, 4))["released"] is True
    assert active(fabric) == set()
    assert client.activations() == []
    assert client.release(holder(2, 4))["released"] is False
    # the GPUs are free again for another holder
    client.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
    assert active(fabric) == {1}


def test_sync_releases_dead_holders_after_grace(client: FabricClient, fabric: SimulatedFabric) -> None:
    client.activate(holder(1), pcis(1))
    client.activate(holder(2), pcis(2))
    kept = client.sync([{"holder": holder(1), "pod": "tenant-a/p1"}], grace_seconds=3600)
    assert kept["released"] == []  # holder(2) is dead but still inside its grace
    assert active(fabric) == {7, 8}
    res = client.sync([{"holder": holder(1), "pod": "tenant-a/p1"}], grace_seconds=0)
    assert res["released"] == [holder(2)]
    assert active(fabric) == {7}
    (rec,) = client.activations()
    assert rec["holder"] == holder(1) and rec["pod"] == "tenant-a/p1"
    assert rec["since"].endswith("+00:00")


def test_list_partitions_shows_holder(client: FabricClient) -> None:
    client.activate(holder(5, 7), pcis(5, 7))
    parts = {p["id"]: p for p in client.partitions()}
    assert len(parts) == 15
    assert parts[5]["active"] and parts[5]["holder"] == holder(5, 7)
    assert parts[5]["nvlinks"] == 36
    assert {g["physical_id"] for g in parts[5]["gpus"]} == {5, 7}
    assert parts[0]["active"] is False and parts[0]["holder"] is None


def test_topology_maps_physical_ids_to_pci(client: FabricClient, fabric: SimulatedFabric) -> None:
    fabric.inject_gpu_nvlink_failure(3, ports=[4, 5])
    topo = client.topology()
    assert topo["source"] == "fabric-manager"
    by_id = {g["physical_id"]: g for g in topo["gpus"]}
    assert {i: g["pci_bus_id"] for i, g in by_id.items()} == fabric.gpu_map
    assert by_id[3]["healthy"] is False and "4, 5" in by_id[3]["reason"]
    assert by_id[1]["healthy"] is True and by_id[1]["reason"] is None


def test_unsupported_partition_is_refused(client: FabricClient, fabric: SimulatedFabric) -> None:
    fabric.inject_gpu_nvlink_failure(3)
    with pytest.raises(FabricRejected) as err:
        client.activate(holder(1, 3), pcis(1, 3))
    assert err.value.status == 422 and err.value.code == "unsupported"
    assert active(fabric) == set()
    assert client.health()["failed_gpus"] == pcis(3)


def test_health(client: FabricClient, fabric: SimulatedFabric) -> None:
    h = client.health()
    assert h["fabric_manager"]["reachable"] is True
    assert h["fabric_manager"]["backend"] == "simulator"
    assert h["service_vm"]["state"] == "unmanaged"
    assert h["failed_gpus"] == []
    fabric.stop()
    h = client.health()
    assert h["fabric_manager"]["reachable"] is False
    assert "not running" in h["fabric_manager"]["message"]


def test_fabric_manager_down_is_503(client: FabricClient, fabric: SimulatedFabric) -> None:
    fabric.stop()
    with pytest.raises(FabricUnavailable) as err:
        client.activate(holder(1), pcis(1))
    assert err.value.status == 503
    assert client.activations() == []  # the write-ahead record was rolled back


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"holder": "", "gpus": ["0000:18:00.0"]}, "holder"),
        ({"holder": "h", "gpus": []}, "gpus"),
        ({"holder": "h", "gpus": ["18:0"]}, "gpus"),
        ({"holder": "h", "gpus": ["0000:01:00.0"]}, "not known"),
        ({"holder": "h", "gpus": ["0000:18:00.0", "0000:18:00.0"]}, "duplicate"),
    ],
    ids=["empty-holder", "no-gpus", "bad-address", "unknown-gpu", "duplicate-gpu"],
)
def test_bad_input_names_the_field(client: FabricClient, body: dict, field: str) -> None:
    with pytest.raises(FabricRejected) as err:
        client._request("POST", "/v1/activations", json=body)
    assert err.value.status == 400 and err.value.code == "invalid"
    assert field in err.value.detail


def test_admin_activate_conflict_then_force(client: FabricClient, fabric: SimulatedFabric) -> None:
    client.activate(holder(1, 3), pcis(1, 3))
    with pytest.raises(FabricConflict, match="held by"):
        client.activate_partition(1)
    res = client.activate_partition(1, force=True)
    assert res["evicted"] == [holder(1, 3)]
    assert active(fabric) == {1}
    assert [a["holder"] for a in client.activations()] == ["admin:partition-1"]
    assert client.activate_partition(1)["active"] is True  # idempotent


def test_admin_deactivate_needs_force_for_a_holder(client: FabricClient, fabric: SimulatedFabric) -> None:
    client.activate(holder(6, 8), pcis(6, 8))
    with pytest.raises(FabricConflict, match=holder(6, 8).replace("+", r"\+")):
        client.deactivate_partition(6)
    assert active(fabric) == {6}
    res = client.deactivate_partition(6, force=True)
    assert res["released_holder"] == holder(6, 8)
    assert active(fabric) == set() and client.activations() == []
    with pytest.raises(FabricRejected) as err:
        client.deactivate_partition(99)
    assert err.value.status == 404


def test_unreachable_socket_raises_unavailable(tmp_path_factory: pytest.TempPathFactory) -> None:
    with (
        FabricClient(tmp_path_factory.mktemp("none") / "absent.sock", timeout=2) as c,
        pytest.raises(FabricUnavailable),
    ):
        c.health()


def test_sync_without_grace_uses_the_service_default(service, tmp_path_factory, fabric: SimulatedFabric) -> None:
    from services.fabric.server import UnixServer, create_app

    with (
        UnixServer(create_app(service, default_grace_s=0), tmp_path_factory.mktemp("g") / "f.sock") as srv,
        FabricClient(srv.socket_path) as c,
    ):
        c.activate(holder(4), pcis(4))
        assert c.sync([], grace_seconds=None)["released"] == [holder(4)]
        assert active(fabric) == set()


def test_malformed_http_answers_400_and_the_service_keeps_serving(client: FabricClient) -> None:
    import socket as _socket

    for raw in (
        b"POST /v1/activations HTTP/1.1\r\nHost: f\r\nContent-Length: 5\r\n\r\n{nope",
        b"POST /v1/activations HTTP/1.1\r\nHost: f\r\nContent-Length: many\r\n\r\n",
    ):
        with _socket.socket(_socket.AF_UNIX) as s:
            s.connect(client.socket_path)
            s.sendall(raw)
            answer = http.client.HTTPResponse(s)  # reads the whole answer, however it is split
            answer.begin()
            body = answer.read().decode()
        assert answer.status == 400 and '"code": "invalid"' in body
    with pytest.raises(FabricRejected) as err:
        client._request("GET", "/v1/nothing-here")
    assert err.value.status == 404
    with pytest.raises(FabricRejected) as err:
        client._request("PUT", "/v1/topology")
    assert err.value.status == 405
    assert client.health()["fabric_manager"]["reachable"] is True
