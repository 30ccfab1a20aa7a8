"""Property: any sequence of activate / release / sync / FM restart / VM crash leaves
Fabric Manager's active partitions equal to the activation records, none leaked."""

from __future__ import annotations

import tempfile
from pathlib import Path

import libvirt
from hypothesis import HealthCheck, given, settings, strategies as st

from core import topology
from services.fabric.bookkeeping import ActivationStore
from services.fabric.domain_xml import DomainSpec
from services.fabric.errors import Conflict, Unsupported
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from services.fabric.service_vm import BackoffPolicy, ServiceVM
from tests.fabric.factories import pcis
from vm_images.domain import template_text

HOLDERS = ("a", "b", "c", "d")
gpu_sets = st.sets(st.integers(1, 8), min_size=1, max_size=8).map(lambda s: tuple(sorted(s)))
ops = st.one_of(
    st.tuples(st.just("activate"), st.sampled_from(HOLDERS), gpu_sets),
    st.tuples(st.just("release"), st.sampled_from(HOLDERS)),
    st.tuples(st.just("sync"), st.sets(st.sampled_from(HOLDERS))),
    st.tuples(st.just("fm_restart")),
    st.tuples(st.just("vm_crash")),
    st.tuples(st.just("nvlink_failure"), st.integers(1, 8)),
)


def check_invariants(fabric: SimulatedFabric, store: ActivationStore) -> None:
    book = store.book
    assert set(fabric.active_partition_ids()) == set(book.desired_active())
    assert book.held() == book.desired_active()  # nothing left half-released
    seen: set[int] = set()
    for rec in book:
        want = [p.id for p in topology.partitions_for_gpus(rec.physical_ids)]
        assert list(rec.partition_ids) == want
        gpus = set(rec.physical_ids)
        assert not gpus & seen, "two holders share a GPU"
        seen |= gpus
    # what the file says is what memory says
    reread = ActivationStore(store.state_dir)
    assert [a.to_json() for a in reread._load()] == [a.to_json() for a in book]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
def test_records_equal_fabric_manager(sequence: list[tuple]) -> None:
    fabric = SimulatedFabric()
    fm = SimulatedFabricManager(fabric)
    libvirt.registerErrorHandler(lambda *_: None, None)
    with tempfile.TemporaryDirectory() as tmp, ActivationStore(Path(tmp)) as store:
        service = PartitionService(fm, store)

        def vm_restarted() -> None:  # as FabricNode does: FM lived in the VM
            fm.restart()
            service.fabric_restarted(timeout_s=5)

        name = f"prop-{Path(tmp).name}"
        vm = ServiceVM(
            "test:///default",
            DomainSpec(name=name, domain_type="test", disk_image="/x.qcow2", fm_channel="none"),
            template_text(),
            backoff=BackoffPolicy(initial_s=0.001, max_s=0.001),
            on_restarted=vm_restarted,
        )
        vm.start()
        conn = libvirt.open("test:///default")
        try:
            for op in sequence:
                kind = op[0]
                if kind == "activate":
                    try:
                        res = service.activate(op[1], pcis(*op[2]))
                        assert store.book.get(op[1]) is not None
                        assert set(res["partition_ids"]) <= set(fabric.active_partition_ids())
                    except (Conflict, Unsupported):
                        pass
                elif kind == "release":
                    service.release(op[1])
                    assert store.book.get(op[1]) is None
                elif kind == "sync":
                    service.sync([{"holder": h} for h in op[1]], grace_s=0)
                    assert {a.holder for a in store.book} <= set(op[1])
                elif kind == "fm_restart":
                    fabric.restart()
                elif kind == "vm_crash":
                    conn.lookupByName(name).destroy()
                    assert vm.check_once() is True
                elif kind == "nvlink_failure":
                    fabric.inject_gpu_nvlink_failure(op[1])
                service.reconcile()  # the periodic tick
                check_invariants(fabric, store)
        finally:
            conn.close()
            vm.undefine()
            vm.close()
