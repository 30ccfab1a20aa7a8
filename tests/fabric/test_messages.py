"""The server and the client agree through one definition of the messages (core.fabric_messages).

A route whose answer is not its message is refused by the real client with the field
named; a request body that is not its message is refused by the real server (400) with
the field named; and every answer of the real service is its message.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import fabric_messages as fm
from core.fabric_client import FabricClient, FabricMalformed, FabricRejected
from services.fabric.partitions import PartitionService
from tests.fabric.factories import holder, pcis


@pytest.mark.parametrize(
    ("route", "answer", "field"),
    [
        ("topology", {"source": "fabric-manager", "gpus": [{"physical_id": "3"}]}, "gpus.0.physical_id"),
        ("topology", {"source": "fabric-manager", "gpus": [], "layout": None}, "layout_problems: Field required"),
        ("list_partitions", [{"id": 1, "gpus": [], "nvlinks": 0, "active": "yes"}], "partitions.0.active"),
        ("activations", [{"holder": 7}], "activations.0.holder"),
    ],
    ids=["gpu-id-as-text", "missing-field", "flag-as-text", "holder-as-number"],
)
def test_a_malformed_answer_is_refused_by_the_client_naming_the_field(
    client: FabricClient,
    service: PartitionService,
    monkeypatch: pytest.MonkeyPatch,
    route: str,
    answer: Any,
    field: str,
) -> None:
    monkeypatch.setattr(service, route, lambda: answer)
    call = {"topology": client.topology, "list_partitions": client.partitions, "activations": client.activations}
    with pytest.raises(FabricMalformed) as err:
        call[route]()
    assert field in err.value.detail
    assert client.health()["fabric_manager"]["reachable"] is True  # the connection is still usable


def test_an_activation_answer_without_its_nvlink_flag_is_refused(
    client: FabricClient, service: PartitionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        service, "activate", lambda h, gpus, pod=None: {"holder": h, "gpus": list(gpus), "partition_ids": [7]}
    )
    with pytest.raises(FabricMalformed, match="ActivationResult: nvlink: Field required"):
        client.activate(holder(1), pcis(1))


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/activations", {"holder": "h", "gpus": pcis(1), "pod": 5}, "pod"),
        ("/v1/activations", {"holder": "h", "gpus": "0000:18:00.0"}, "gpus"),
        ("/v1/activations", {"holder": "x" * (fm.MAX_HOLDER + 1), "gpus": pcis(1)}, "holder"),
        ("/v1/activations", ["h"], "body"),
        ("/v1/activations/sync", {"live": [{"holder": "h"}], "grace_seconds": True}, "grace_seconds"),
        ("/v1/activations/sync", {"live": [{"holder": "h"}], "grace_seconds": -1}, "grace_seconds"),
        ("/v1/activations/sync", {"live": [{"pod": "a/b"}]}, "live.0.holder"),
        ("/v1/activations/sync", {}, "live: Field required"),
    ],
)
def test_a_malformed_request_is_refused_by_the_server_naming_the_field(
    client: FabricClient, path: str, body: Any, field: str
) -> None:
    with pytest.raises(FabricRejected) as err:
        client._request("POST", path, json=body)
    assert err.value.status == 400 and err.value.code == "invalid"
    assert field in err.value.detail


def test_every_answer_of_the_service_is_its_message(client: FabricClient) -> None:
    """The answers the real service builds, read raw and validated as the route's message."""
    client.activate(holder(1, 3), pcis(1, 3))
    client.activate_partition(2)
    answers = {
        fm.Topology: client._request("GET", "/v1/topology"),
        fm.Partitions: client._request("GET", "/v1/partitions"),
        fm.Activations: client._request("GET", "/v1/activations"),
        fm.Health: client._request("GET", "/v1/health"),
        fm.SyncResult: client._request("POST", "/v1/activations/sync", json={"live": [{"holder": holder(1, 3)}]}),
        fm.AdminDeactivation: client._request("POST", "/v1/partitions/2/deactivate"),
        fm.ReleaseResult: client._request("DELETE", "/v1/activations/" + holder(1, 3).replace("+", "%2B")),
    }
    for message, raw in answers.items():
        assert fm.parse(message, raw) == raw, message.__name__  # nothing dropped, nothing converted
