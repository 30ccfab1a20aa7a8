"""GetPreferredAllocation on every reachable free-GPU state of the board (2^8 subsets x sizes).

Each answer must be what ``core.topology.choose_gpus`` picks (translated
between PCI addresses and physical ids) and valid: the asked size, a subset of
the available devices, the must-include devices kept, and a whole NVLink
partition whenever one of the asked size (1/2/4/8) is free.
"""

from __future__ import annotations

import itertools

import grpc
import pytest
from hypothesis import given, settings, strategies as st

from core import topology
from devtools.fake_sysfs import GPU_BDFS, GPU_PHYSICAL_IDS, FakeBoard
from services.device_plugin.allocation import PhysicalMap, preferred
from services.device_plugin.api import dp_pb2
from services.device_plugin.errors import InvalidRequest
from services.device_plugin.main import DevicePlugin
from tests.fixtures.fake_kubelet import FakeKubelet

PID = dict(zip(GPU_BDFS, GPU_PHYSICAL_IDS, strict=True))
BDF = {p: b for b, p in PID.items()}
NUMA = {b: (0 if i < 4 else 1) for i, b in enumerate(GPU_BDFS)}
FABRIC_MAP = PhysicalMap(PID, "fabric-manager")
STATES = [tuple(b for i, b in enumerate(GPU_BDFS) if mask >> i & 1) for mask in range(1, 256)]


def _expected(free: tuple[str, ...], size: int, must: tuple[str, ...] = ()) -> list[str]:
    choice = topology.choose_gpus(
        [PID[b] for b in free], size, numa={PID[b]: NUMA[b] for b in free}, must_include=[PID[b] for b in must]
    )
    assert choice is not None
    return sorted(BDF[p] for p in choice.gpus)


def _check_valid(free: tuple[str, ...], size: int, got: list[str], must: tuple[str, ...] = ()) -> None:
    assert len(got) == size == len(set(got))
    assert set(got) <= set(free)
    assert set(must) <= set(got)
    free_pids = {PID[b] for b in free}
    if (
        size in topology.PARTITION_SIZES
        and not must
        and any(p.size == size for p in topology.free_partitions(free_pids))
    ):
        assert topology.partition_for(PID[b] for b in got) is not None, (free, size, got)


def test_every_state_and_size_agrees_with_choose_gpus() -> None:
    checked = 0
    for free in STATES:
        for size in range(1, len(free) + 1):
            got = preferred(free, (), size, FABRIC_MAP, NUMA)
            assert got == _expected(free, size), (free, size)
            _check_valid(free, size, got)
            checked += 1
    assert checked == sum(len(s) for s in STATES) == 1024


def test_every_state_over_grpc(plugin: DevicePlugin, fake_kubelet: FakeKubelet) -> None:
    """The same, through the plugin's socket (the map comes from the fabric service's Fabric Manager)."""
    stub = fake_kubelet.plugins["nvidia.com/gpu"].stub
    assert plugin.core.physical_map.by_bdf == PID
    for free in STATES:
        req = dp_pb2.PreferredAllocationRequest(
            container_requests=[
                dp_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=list(free), allocation_size=size)
                for size in range(1, len(free) + 1)
            ]
        )
        resp = stub.GetPreferredAllocation(req, timeout=10)
        for size, c in zip(range(1, len(free) + 1), resp.container_responses, strict=True):
            assert sorted(c.deviceIDs) == _expected(free, size), (free, size)


@pytest.mark.parametrize(
    ("free_pids", "size", "want"),
    [
        (range(1, 9), 2, {1, 3}),  # a pair, inside quad 1, lowest ids
        (range(1, 9), 4, {1, 2, 3, 4}),
        (range(1, 9), 8, set(range(1, 9))),
        ({2, 4, 5, 6, 7, 8}, 2, {2, 4}),  # breaks no free quad (quad 1 already broken)
        ({1, 2, 3, 4, 5, 7}, 1, {5}),  # a single from the already broken quad, keeps quad 1 whole
        ({1, 2, 3, 5, 6, 7, 8}, 3, {1, 2, 3}),  # 3 GPUs inside the broken quad, no NVLink
    ],
    ids=["pair", "quad", "board", "pair-in-broken-quad", "single-keeps-quad", "three-in-broken-quad"],
)
def test_documented_choices(free_pids, size: int, want: set[int]) -> None:
    free = tuple(BDF[p] for p in free_pids)
    got = preferred(free, (), size, FABRIC_MAP, NUMA)
    assert {PID[b] for b in got} == want


@settings(max_examples=150, deadline=None)
@given(mask=st.integers(1, 255), data=st.data())
def test_must_include_is_honoured(mask: int, data: st.DataObject) -> None:
    free = tuple(b for i, b in enumerate(GPU_BDFS) if mask >> i & 1)
    size = data.draw(st.integers(1, len(free)))
    must = tuple(data.draw(st.lists(st.sampled_from(free), max_size=size, unique=True)))
    got = preferred(free, must, size, FABRIC_MAP, NUMA)
    _check_valid(free, size, got, must)
    assert got == _expected(free, size, must)


def test_pci_order_fallback_uses_bus_order_ids() -> None:
    pmap = PhysicalMap.pci_order(GPU_BDFS)
    assert pmap.source == "pci-order"
    assert pmap.by_bdf == {b: i + 1 for i, b in enumerate(GPU_BDFS)}
    got = preferred(GPU_BDFS, (), 2, pmap, NUMA)
    assert got == [GPU_BDFS[0], GPU_BDFS[2]]  # "physical" 1 and 3 by bus order


def test_unknown_devices_used_only_to_make_up_the_size() -> None:
    pmap = PhysicalMap({b: PID[b] for b in GPU_BDFS[:2]}, "fabric-manager")
    got = preferred(GPU_BDFS[:3], (), 3, pmap, NUMA)
    assert got == sorted(GPU_BDFS[:3])
    assert preferred(GPU_BDFS[:3], (GPU_BDFS[2],), 1, pmap, NUMA) == [GPU_BDFS[2]]


@pytest.mark.parametrize(
    ("available", "must", "size", "message"),
    [
        (GPU_BDFS[:2], (), 3, "exceeds the 2 available"),
        (GPU_BDFS[:2], (), 0, "must be >= 1"),
        (GPU_BDFS[:2], (GPU_BDFS[5],), 1, "must be a subset"),
        (GPU_BDFS[:3], GPU_BDFS[:3], 2, "exceed allocation_size"),
    ],
    ids=["too-many", "zero", "must-not-available", "must-too-many"],
)
def test_bad_requests(available, must, size: int, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        preferred(available, must, size, FABRIC_MAP, NUMA)


def test_bad_request_is_invalid_argument_over_grpc(plugin: DevicePlugin, fake_kubelet: FakeKubelet) -> None:
    stub = fake_kubelet.plugins["nvidia.com/gpu"].stub
    with pytest.raises(grpc.RpcError) as err:
        stub.GetPreferredAllocation(
            dp_pb2.PreferredAllocationRequest(
                container_requests=[
                    dp_pb2.ContainerPreferredAllocationRequest(
                        available_deviceIDs=list(GPU_BDFS[:1]), allocation_size=2
                    )
                ]
            ),
            timeout=10,
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exceeds the 1 available" in err.value.details()


def test_sequence_of_admissions_keeps_partitions_whole(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard
) -> None:
    """1+1+2+4 GPUs: singles share a pair, the pair and the quad stay NVLink partitions."""
    got = [fake_kubelet.admit("tenant-a", f"p{i}", "nvidia.com/gpu", n).device_ids for i, n in enumerate((1, 1, 2, 4))]
    pids = [sorted(PID[b] for b in ids) for ids in got]
    assert pids == [[1], [3], [2, 4], [5, 6, 7, 8]]
    for a in fake_kubelet.allocations:
        assert a.preferred == a.device_ids
    assert list(itertools.chain(*got)).__len__() == 8
