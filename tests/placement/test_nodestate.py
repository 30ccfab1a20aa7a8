"""Free GPUs of a node derived from its FabricState, its GPULeases and the pods bound to it."""

from __future__ import annotations

from dataclasses import replace

from services.placement.fit import gpus_of, mask_of
from services.placement.fleet import Freeing
from services.placement.nodestate import PodClaim, derive_node, freeing, normalize_pci, occupants, pod_claim
from tests.placement.factories import fabric_state, lease, pod


def free(node) -> set[int]:  # type: ignore[no-untyped-def]
    return set(gpus_of(node.free_mask))


def test_idle_node_is_all_free() -> None:
    node = derive_node("n", fabric_state("n"))
    assert free(node) == set(range(1, 9)) and node.usable


def test_active_partitions_with_holders_are_busy_holderless_ones_are_not() -> None:
    node = derive_node("n", fabric_state("n", active={3: "gpus:0000:18:00.0+0000:38:00.0", 2: None}))
    assert free(node) == {2, 4, 5, 6, 7, 8}


def test_unhealthy_and_failed_gpus_are_neither_free_nor_healthy() -> None:
    node = derive_node("n", fabric_state("n", unhealthy=(2,), failed=(7,)))
    assert free(node) == {1, 3, 4, 5, 6, 8}
    assert set(gpus_of(node.healthy_mask)) == {1, 3, 4, 5, 6, 8}


def test_unreachable_fabric_manager_makes_the_node_unusable() -> None:
    node = derive_node("n", fabric_state("n", reachable=False))
    assert not node.usable and "Fabric Manager unreachable" in (node.reason or "")


def test_leases_not_free_hold_their_gpu_by_physical_id_from_the_pci_address() -> None:
    leases = [lease("n", 5, "Checking"), lease("n", 6, "Quarantined"), lease("n", 7, "Free")]
    assert free(derive_node("n", fabric_state("n"), leases)) == {1, 2, 3, 4, 7, 8}


def test_a_leases_gpu_is_the_one_its_pci_address_names_in_the_fabric_state_whatever_its_physical_id() -> None:
    """A node agent that made its leases before it learnt the fabric service's map wrote PCI-order
    physical ids in them (the chart's DaemonSet pods start in any order): the node's report maps
    the PCI address. The lease's own id counts only for an address the report does not know."""
    wrong = lease("n", 5, "Leased", pod="p")
    wrong["spec"]["physicalId"] = 6  # GPU 5's PCI address, the id PCI order would give it
    assert free(derive_node("n", fabric_state("n"), [wrong])) == {1, 2, 3, 4, 6, 7, 8}
    unknown = lease("n", 5, "Quarantined")
    unknown["spec"].update(pciAddress="0000:ff:00.0", physicalId=8)
    assert free(derive_node("n", fabric_state("n"), [unknown])) == {1, 2, 3, 4, 5, 6, 7}


def test_a_bound_pod_the_node_does_not_show_yet_is_assumed_on_choose_gpus_choice() -> None:
    holder = PodClaim("tenant-other", "quad", "n", 4, "2026-11-21T04:00:00Z")
    claim = PodClaim("tenant-acme", "job", "n", 2, "2026-11-21T05:00:00Z")
    node = derive_node("n", fabric_state("n", active={1: "gpus:a"}), pods=[claim, holder])
    # GPUs 1-4 are the older pod's quad; the new 2-GPU pod will get the pair {5,7}
    assert free(node) == {6, 8}
    # without the bound pod the node looks freer
    assert free(derive_node("n", fabric_state("n", active={1: "gpus:a"}), pods=[holder])) == {5, 6, 7, 8}


def test_pods_already_shown_by_the_node_are_not_counted_twice() -> None:
    shown = PodClaim("tenant-acme", "old", "n", 2, "2026-11-21T04:00:00Z")
    new = PodClaim("tenant-acme", "new", "n", 1, "2026-11-21T05:00:00Z")
    node = derive_node("n", fabric_state("n", active={3: "gpus:x"}), pods=[shown, new])
    assert free(node) == set(range(1, 9)) - {1, 3} - {2}  # the new pod is assumed on GPU 2 (breaks only the pair {2,4})
    leased = [lease("n", 1, "Leased", pod="old"), lease("n", 3, "Leased", pod="old")]
    node = derive_node("n", fabric_state("n", active={3: "gpus:x"}), leased, pods=[shown, new])
    assert len(free(node)) == 5


def test_pod_claim_and_pci_normalisation() -> None:
    bound = pod(4)
    bound["spec"]["nodeName"] = "gpu-node-a"
    claim = pod_claim(bound)
    assert claim == PodClaim(
        "tenant-acme",
        "job-7f3a",
        "gpu-node-a",
        4,
        "2026-11-21T05:00:00Z",
        "2026-11-21T05:00:00Z",
        uid="9f1c3a2e-5b7d-4e2a-8c1f-2d3e4f5a6b7c",
    )
    assert pod_claim(pod(4)) is None  # not bound
    bound["status"]["phase"] = "Succeeded"
    assert pod_claim(bound) is None
    assert normalize_pci("00000000:18:00.0") == "0000:18:00.0"
    assert normalize_pci("0000:1A:00.0") == "0000:1a:00.0"


def test_a_pod_bound_after_the_last_report_is_never_credited_with_busy_gpus() -> None:
    # GPUs 1-4 are busy for a holder whose pod is gone; a pod bound after the report is
    # not that holder, so it is assumed on its own GPUs
    fs = fabric_state("n", active={1: "gpus:gone"}, updated_at="2026-11-21T05:00:00.250Z")
    late = PodClaim("tenant-acme", "late", "n", 4, "2026-11-21T05:00:00Z", bound_at="2026-11-21T05:00:00Z")
    assert free(derive_node("n", fs, pods=[late])) == set()
    early = PodClaim("tenant-acme", "early", "n", 4, "2026-11-21T04:59:00Z", bound_at="2026-11-21T04:59:00Z")
    assert free(derive_node("n", fs, pods=[early])) == {5, 6, 7, 8}


def test_pod_claim_takes_the_bind_time_from_pod_scheduled() -> None:
    bound = pod(1)
    bound["spec"]["nodeName"] = "n"
    bound["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-21T05:01:00Z"}
    ]
    claim = pod_claim(bound)
    assert claim is not None and claim.bound_at == "2026-11-21T05:01:00Z"


def test_a_pod_whose_leases_are_only_partly_written_still_holds_its_whole_partition() -> None:
    """The node writes a pod's leases one GPU at a time; between those writes the pod must
    not look like it holds a single GPU (the sandbox once placed a 1-GPU pod on a full board)."""
    board = PodClaim("tenant-acme", "board", "n", 8, "2026-11-21T04:00:00Z")
    one_leased = [lease("n", 1, "Leased", pod="board")]
    assert free(derive_node("n", fabric_state("n"), one_leased, pods=[board])) == set()
    pair = PodClaim("tenant-acme", "pair", "n", 2, "2026-11-21T04:00:00Z")
    half = [lease("n", 5, "Leased", pod="pair")]
    assert free(derive_node("n", fabric_state("n"), half, pods=[pair])) == set(range(1, 9)) - {5, 7}
    whole = [lease("n", 5, "Leased", pod="pair"), lease("n", 7, "Leased", pod="pair")]
    assert free(derive_node("n", fabric_state("n"), whole, pods=[pair])) == set(range(1, 9)) - {5, 7}


def test_pods_are_assumed_in_the_order_they_were_bound_not_created() -> None:
    """A node admits pods as they are bound. A pod refused for a while is bound after a younger
    one: on a node that shows neither yet, the younger takes its GPUs first."""
    fs = fabric_state("n", updated_at="2026-11-21T05:00:00Z")
    waited = PodClaim("tenant-acme", "waited", "n", 4, "2026-11-21T04:00:00Z", bound_at="2026-11-21T05:00:09Z")
    young = PodClaim("tenant-acme", "young", "n", 1, "2026-11-21T04:30:00Z", bound_at="2026-11-21T05:00:07Z")
    # the single GPU goes first (out of 5-8, keeping the quad 1-4 whole), then the quad 1-4
    assert free(derive_node("n", fs, pods=[waited, young])) == {2, 3, 4}
    # within one second, the order the watcher saw the binds decides
    same = replace(young, bound_at=waited.bound_at)
    one_then_four = [replace(same, bound_seq=1), replace(waited, bound_seq=2)]
    assert free(derive_node("n", fs, pods=one_then_four)) == {2, 3, 4}
    four_then_one = [replace(same, bound_seq=2), replace(waited, bound_seq=1)]
    assert free(derive_node("n", fs, pods=four_then_one)) == {6, 7, 8}


def test_a_pod_assumed_onto_gpus_stays_there_when_an_earlier_pod_ends() -> None:
    """The node gave a pod its GPUs when it admitted it and does not move it when another pod
    ends. Found by the fleet benchmark: re-assuming the later pods from scratch once an earlier
    one had ended showed a pair free where the node had two GPUs of two broken pairs, and a
    2-GPU pod was placed on them."""
    fs = fabric_state("n", updated_at="2026-11-21T05:00:00Z")  # the node shows none of these yet
    bound = "2026-11-21T05:00:01Z"
    sizes = [("a", 1), ("b", 1), ("c", 1), ("pair", 2), ("ends", 1), ("later", 1)]
    claims = [PodClaim("t", n, "n", g, bound, bound_at=bound, bound_seq=i) for i, (n, g) in enumerate(sizes, 1)]
    positions: dict[str, int] = {}
    assert free(derive_node("n", fs, pods=claims, positions=positions)) == {8}
    assert {k: set(gpus_of(v)) for k, v in positions.items()} == {
        "t/a": {1},
        "t/b": {3},
        "t/c": {2},
        "t/pair": {5, 7},
        "t/ends": {4},
        "t/later": {6},
    }
    # "ends" ends: its GPU 4 is free again and "later" stays on 6: no pair is free
    rest = [c for c in claims if c.name != "ends"]
    assert free(derive_node("n", fs, pods=rest, positions=positions)) == {4, 8}
    assert set(gpus_of(positions["t/later"])) == {6}
    # counted from scratch, "later" would move onto 4 and show the pair {6,8} free
    assert free(derive_node("n", fs, pods=rest)) == {6, 8}
    # a remembered position the report now shows busy is given up for choose_gpus' choice
    taken = fabric_state("n", active={14: "gpus:other"}, updated_at="2026-11-21T05:00:00Z")
    positions = {"t/later": mask_of([8])}
    assert free(derive_node("n", taken, pods=[claims[-1]], positions=positions)) == {1, 2, 3, 4, 5, 7}
    assert positions == {"t/later": mask_of([6])}  # GPU 6, the mate of the busy 8


def test_what_frees_soon_is_the_gpus_between_tenants_and_those_of_pods_being_deleted() -> None:
    """The partition check keeps a Workload waiting with its quota only for GPUs that free on
    their own: leases Releasing or Checking, and the GPUs of pods being deleted (found by their
    leases, else where they were assumed, else counted)."""
    ending = PodClaim("tenant-acme", "old", "n", 2, "2026-11-21T04:00:00Z", ending=True)
    running = PodClaim("tenant-acme", "new", "n", 1, "2026-11-21T04:00:00Z")
    leases = [
        lease("n", 1, "Releasing"),
        lease("n", 2, "Checking"),
        lease("n", 3, "Quarantined"),  # an admin's: does not free by itself
        lease("n", 5, "Leased", pod="old"),
        lease("n", 7, "Leased", pod="old"),
        lease("n", 6, "Leased", pod="new"),
    ]
    soon = freeing(fabric_state("n"), leases, [ending, running])
    assert (set(gpus_of(soon.mask)), soon.unplaced) == ({1, 2, 5, 7}, 0)
    # an ending pod with no lease yet: where it was assumed, else only its number of GPUs
    assumed = freeing(fabric_state("n"), [], [ending], {"tenant-acme/old": mask_of({6, 8})})
    assert (set(gpus_of(assumed.mask)), assumed.unplaced) == ({6, 8}, 0)
    assert freeing(fabric_state("n"), [], [ending]) == Freeing(0, 2)
    assert freeing(fabric_state("n"), [lease("n", 4, "Leased", pod="new")], [running]) == Freeing()


def test_occupants_are_the_running_pods_where_their_leases_or_assumptions_put_them() -> None:
    """What the partition check may take back for a guarantee: running pods by their Leased
    leases (the node's word), else where they were assumed; never an ending pod, never a pod
    it cannot place."""
    leased = PodClaim("tenant-acme", "leased", "n", 2, "2026-11-21T04:00:00Z")
    assumed = PodClaim("tenant-acme", "assumed", "n", 4, "2026-11-21T04:00:00Z")
    ending = PodClaim("tenant-acme", "ending", "n", 1, "2026-11-21T04:00:00Z", ending=True)
    unknown = PodClaim("tenant-acme", "unknown", "n", 1, "2026-11-21T04:00:00Z")
    leases = [
        lease("n", 1, "Leased", pod="leased"),
        lease("n", 2, "Leased", pod="leased"),
        lease("n", 8, "Leased", pod="ending"),
    ]
    positions = {"tenant-acme/assumed": mask_of({5, 6, 7, 8}), "tenant-acme/leased": mask_of({3, 4})}
    found = occupants("n", fabric_state("n"), leases, [leased, assumed, ending, unknown], positions)
    assert found == {"tenant-acme/leased": mask_of({1, 2}), "tenant-acme/assumed": mask_of({5, 6, 7, 8})}


def test_gpus_still_leased_by_a_pod_no_longer_running_there_free_soon() -> None:
    """A pod gone (or ended) before its node agent released its leases: its GPUs free next, as
    when Kueue's preemption deleted it, and are not mistaken for a running pod's."""
    running = PodClaim("tenant-acme", "running", "n", 1, "2026-11-21T04:00:00Z")
    leases = [
        lease("n", 1, "Leased", pod="running"),
        lease("n", 2, "Leased", pod="gone"),
        lease("n", 3, "Leased", pod="gone"),
    ]
    assert freeing(fabric_state("n"), leases, [running]) == Freeing(mask_of({2, 3}), 0)
    # still busy until then: the check waits for them rather than count them free
    assert free(derive_node("n", fabric_state("n"), leases, [running])) == {4, 5, 6, 7, 8}
