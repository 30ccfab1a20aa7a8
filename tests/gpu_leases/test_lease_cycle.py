"""The full lease cycle on the fake board with the local cluster's kube-apiserver.

The node side (NodeLeases, as it runs beside the device plugin) and the controller's
``step`` are driven round by round, so every intermediate state is observed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes import client

from core.lease_store import LeaseStore, lease_name
from devtools.fake_sysfs import FakeBoard, rom_image
from devtools.waiting import wait_for
from services.gpu_leases import controller as handlers
from services.gpu_leases.agent import NodeLeases

from .conftest import NODE, Kubelet, make_pod

GPU = "0000:18:00.0"
NAME = lease_name(NODE, GPU)


def state(store: LeaseStore, name: str = NAME) -> str:
    return store.get(name)["status"]["state"]


def controller_step(store: LeaseStore, k8s: client.ApiClient, now: dt.datetime | None = None) -> str | None:
    return handlers.step(store, client.CoreV1Api(k8s), store.get(NAME), now or dt.datetime.now(dt.UTC))


def leased_then_released(
    agent: NodeLeases, kubelet: Kubelet, k8s: client.ApiClient, *, release: bool = True
) -> dict[str, Any]:
    """Lease the GPU to a new pod c-1 (then, if ``release``, let the pod go): the lease as the node left it."""
    agent.reconcile_once()
    make_pod(k8s, "acme", "c-1")
    kubelet.hold("tenant-acme", "c-1", GPU)
    agent.reconcile_once()
    if release:
        kubelet.drop("tenant-acme", "c-1")
        agent.reconcile_once()
    lease = agent.store.get(NAME)
    assert lease is not None
    return lease


def to_checking(agent: NodeLeases, store: LeaseStore, kubelet: Kubelet, k8s: client.ApiClient) -> None:
    """Lease the GPU to a pod, let the pod go, and let the controller request the check."""
    leased_then_released(agent, kubelet, k8s)
    controller_step(store, k8s)
    assert state(store) == "Checking"


def test_every_gpu_gets_a_free_lease(lease_agent: NodeLeases, store: LeaseStore, hgx_board: FakeBoard) -> None:
    lease_agent.reconcile_once()
    leases = store.list(NODE)
    assert sorted(lz["spec"]["pciAddress"] for lz in leases) == sorted(d.bdf for d in hgx_board.gpus)
    assert {lz["status"]["state"] for lz in leases} == {"Free"}
    lz = store.get(NAME)
    assert lz["spec"] == {
        "node": NODE,
        "pciAddress": GPU,
        "deviceId": "0x2330",
        "physicalId": 2,
        "model": "NVIDIA H100 80GB HBM3",
    }
    assert lease_agent.health() == {}
    lease_agent.reconcile_once()  # idempotent
    assert len(store.list(NODE)) == 8


def test_full_cycle_free_leased_releasing_checking_free(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    lease_agent.reconcile_once()
    pod = make_pod(k8s, "acme", "c-1")
    kubelet.hold("tenant-acme", "c-1", GPU)
    lease_agent.reconcile_once()
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Leased"
    assert lz["status"]["holder"]["tenancy"] == "acme"
    assert lz["status"]["holder"]["podUID"] == pod["metadata"]["uid"]
    assert lease_agent.health() == {}  # Leased GPUs stay advertised

    kubelet.drop("tenant-acme", "c-1")
    lease_agent.reconcile_once()
    assert state(store) == "Releasing"
    assert GPU in lease_agent.health() and "Releasing" in lease_agent.health()[GPU]
    assert lease_agent.transient() == lease_agent.health()  # it passes by itself: a new pod waits for it

    assert controller_step(store, k8s) == "check requested"
    assert state(store) == "Checking"
    assert GPU in lease_agent.health()
    assert lease_agent.transient() == lease_agent.health()

    lease_agent.reconcile_once()  # the node runs the check
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Free"
    assert lz["status"]["lastCheck"]["result"] == "Passed"
    assert lz["status"]["history"][-1]["tenancy"] == "acme"
    assert lz["status"]["history"][-1]["check"] == "Passed"
    assert lease_agent.health() == {}


def test_tampered_rom_is_quarantined_and_reported_unhealthy(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
    hgx_board: FakeBoard,
) -> None:
    lease_agent.reconcile_once()
    make_pod(k8s, "acme", "c-1")
    kubelet.hold("tenant-acme", "c-1", GPU)
    lease_agent.reconcile_once()
    hgx_board.write_rom(GPU, rom_image(tampered=True))  # what a tenant's flash would leave
    kubelet.drop("tenant-acme", "c-1")
    lease_agent.reconcile_once()
    controller_step(store, k8s)
    lease_agent.reconcile_once()
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Quarantined"
    assert lz["status"]["reason"] == "RomMismatch"
    assert lz["status"]["lastCheck"]["result"] == "Failed"
    assert "Quarantined" in lease_agent.health()[GPU]
    assert lease_agent.transient() == {}  # not passing by itself: refused even at Allocate
    # It stays quarantined: neither side moves it on later rounds.
    lease_agent.reconcile_once()
    assert controller_step(store, k8s) is None
    assert state(store) == "Quarantined"


def test_gpu_vanishing_mid_check_ends_quarantined(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
    hgx_board: FakeBoard,
) -> None:
    to_checking(lease_agent, store, kubelet, k8s)
    hgx_board.remove_device(GPU)
    lease_agent.reconcile_once()
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Quarantined"
    assert lz["status"]["reason"] == "DeviceVanished"
    assert GPU in lz["status"]["message"]


def test_controller_releases_a_lease_whose_pod_is_gone(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """A node agent that is down cannot release; the controller sees the pod is gone."""
    leased_then_released(lease_agent, kubelet, k8s, release=False)
    assert controller_step(store, k8s) is None  # the pod is alive: nothing to do
    # gone for good (a bound pod's graceful deletion would wait for its node's kubelet)
    client.CoreV1Api(k8s).delete_namespaced_pod("c-1", "tenant-acme", grace_period_seconds=0)
    assert controller_step(store, k8s) == "released: pod tenant-acme/c-1 was deleted"
    assert state(store) == "Releasing"


def test_check_timeout_retries_then_quarantines(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """No node answers (its agent is down): retried, then Quarantined with the reason."""
    to_checking(lease_agent, store, kubelet, k8s)
    later = dt.datetime.now(dt.UTC)
    outcomes = []
    for _ in range(handlers.CHECK_ATTEMPTS):
        later += dt.timedelta(seconds=handlers.CHECK_TIMEOUT_S + 1)
        outcomes.append(controller_step(store, k8s, later))
    assert outcomes == ["check retried (attempt 2)", "check retried (attempt 3)", "quarantined: check timed out"]
    lz = store.get(NAME)
    assert lz["status"]["reason"] == "CheckTimedOut"
    assert NODE in lz["status"]["message"]


def test_a_restarted_controller_continues_a_check(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """All state is in the lease: a fresh controller (a new step call) picks up mid-check."""
    to_checking(lease_agent, store, kubelet, k8s)  # the "old" controller requested the check, then died
    assert controller_step(store, k8s) is None  # the "new" one sees a check in progress, not timed out
    lease_agent.reconcile_once()
    assert state(store) == "Free"


def test_a_lease_left_without_status_is_initialised(
    lease_agent: NodeLeases, store: LeaseStore, k8s: client.ApiClient
) -> None:
    """A lease created but never given its status (the write lost a race) becomes Free next round."""
    from core.lease_store import build_gpu_lease

    client.CustomObjectsApi(k8s).create_cluster_custom_object(
        "gpucaas.dev", "v1alpha1", "gpuleases", build_gpu_lease(NODE, GPU, "0x2330", 2)
    )
    assert not store.get(NAME).get("status")
    lease_agent.reconcile_once()
    assert state(store) == "Free"


def test_an_allocation_no_pod_was_seen_holding_is_still_checked(
    lease_agent: NodeLeases,
    store: LeaseStore,
    k8s: client.ApiClient,
) -> None:
    """A pod that ran and vanished between two rounds never shows in PodResources; its GPU
    went through Allocate, so it is released and checked all the same."""
    lease_agent.unseen_grace = 0.0
    lease_agent.reconcile_once()
    lease_agent.note_allocation([GPU])
    lease_agent.reconcile_once()
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Releasing"
    assert "no pod was seen holding it" in lz["status"]["message"]
    assert controller_step(store, k8s) == "check requested"
    lease_agent.reconcile_once()
    assert state(store) == "Free"
    assert store.get(NAME)["status"]["history"][-1]["check"] == "Passed"


def test_an_allocation_seen_in_pod_resources_takes_the_normal_path(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    lease_agent.unseen_grace = 0.0
    lease_agent.reconcile_once()
    make_pod(k8s, "acme", "c-1")
    lease_agent.note_allocation([GPU])
    kubelet.hold("tenant-acme", "c-1", GPU)
    lease_agent.reconcile_once()
    assert state(store) == "Leased"
    lease_agent.reconcile_once()  # the noted allocation was consumed: still Leased
    assert state(store) == "Leased"


def test_the_holder_is_leased_since_its_allocation_not_since_the_round_that_saw_it(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """Allocate activated the partition; the round that records the holder may come seconds
    later (a container can even have ended by then): ``since`` is the allocation's time, which
    the tenant's timeline shows as the partition's activation."""
    lease_agent.reconcile_once()
    make_pod(k8s, "acme", "c-1")
    lease_agent.note_allocation([GPU])
    allocated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # the round runs in a later second than the allocation
    wait_for(lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > allocated, what="the next second")
    kubelet.hold("tenant-acme", "c-1", GPU)
    lease_agent.reconcile_once()
    holder = store.get(NAME)["status"]["holder"]
    assert holder["pod"] == "c-1"
    assert holder["since"] <= allocated
    # the next holder is stamped by its own allocation, not by this one's
    kubelet.drop("tenant-acme", "c-1")
    lease_agent.reconcile_once()
    controller_step(store, k8s)
    lease_agent.reconcile_once()
    assert state(store) == "Free"
    make_pod(k8s, "acme", "c-2")
    kubelet.hold("tenant-acme", "c-2", GPU)
    lease_agent.reconcile_once()
    assert store.get(NAME)["status"]["holder"]["since"] > allocated


def test_a_holder_the_api_server_says_runs_keeps_its_lease_while_podresources_forgets_it(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """A kubelet that has just restarted lists no pods on PodResources until it has read them
    back; a running container's GPU must not be released (and checked under it) meanwhile."""
    core = client.CoreV1Api(k8s)
    lease_agent.reconcile_once()
    make_pod(k8s, "acme", "c-1")
    kubelet.hold("tenant-acme", "c-1", GPU)
    lease_agent.reconcile_once()
    assert state(store) == "Leased"
    now = dt.datetime.now(dt.UTC).isoformat()
    core.patch_namespaced_pod_status(
        "c-1",
        "tenant-acme",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now}},
                    }
                ],
            }
        },
    )

    kubelet.drop("tenant-acme", "c-1")  # the restarted kubelet does not list it yet
    lease_agent.reconcile_once()
    assert state(store) == "Leased"

    core.patch_namespaced_pod_status(
        "c-1",
        "tenant-acme",
        {
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
                        },
                    }
                ],
            }
        },
    )
    lease_agent.reconcile_once()
    assert state(store) == "Releasing"


def test_a_gpu_given_to_a_new_pod_while_checking_is_checked_then_leased_to_it(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """The kubelet may hand a GPU to the next pod before the plugin's health update withholds
    it; that pod cannot start until the GPU is Free (PreStartContainer), so the check must
    run regardless, or both wait for each other for ever."""
    to_checking(lease_agent, store, kubelet, k8s)
    make_pod(k8s, "acme", "c-2")
    kubelet.hold("tenant-acme", "c-2", GPU)
    lease_agent.reconcile_once()  # the check runs although the kubelet assigned the GPU already
    lz = store.get(NAME)
    assert lz["status"]["lastCheck"]["result"] == "Passed" and lz["status"]["state"] == "Free"
    lease_agent.reconcile_once()
    lz = store.get(NAME)
    assert lz["status"]["state"] == "Leased" and lz["status"]["holder"]["pod"] == "c-2"


class CountingStore:
    """The lease store, counting the controller's reads of a lease."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.reads = 0

    def get(self, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.store.get(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def controller_tick(counting: CountingStore, k8s: client.ApiClient, cached: dict[str, Any] | None) -> str | None:
    assert cached is not None
    return handlers.tick(counting, client.CoreV1Api(k8s), cached, dt.datetime.now(dt.UTC))  # type: ignore[arg-type]


def test_a_timer_visit_reads_the_lease_only_when_it_may_be_the_controllers_turn(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """Free, Leased to a live pod, or in a check not yet timed out: the watch's copy says
    there is nothing to do, and the lease is not read. Releasing: read afresh and stepped."""
    counting = CountingStore(store)
    lease_agent.reconcile_once()
    assert controller_tick(counting, k8s, store.get(NAME)) is None  # Free
    leased = leased_then_released(lease_agent, kubelet, k8s, release=False)
    assert controller_tick(counting, k8s, leased) is None  # Leased, its pod alive
    assert counting.reads == 0
    kubelet.drop("tenant-acme", "c-1")
    lease_agent.reconcile_once()
    assert controller_tick(counting, k8s, store.get(NAME)) == "check requested"  # Releasing
    assert counting.reads == 1
    assert controller_tick(counting, k8s, store.get(NAME)) is None  # Checking, not timed out
    assert counting.reads == 1
    assert state(store) == "Checking"


def test_a_timer_visit_with_a_stale_copy_steps_what_the_lease_is_now(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    """The watch's copy still says Releasing after the check was requested: the fresh read
    decides, and the check is not requested twice."""
    stale = leased_then_released(lease_agent, kubelet, k8s)
    assert stale["status"]["state"] == "Releasing"
    assert controller_step(store, k8s) == "check requested"
    counting = CountingStore(store)
    assert controller_tick(counting, k8s, stale) is None
    assert counting.reads == 1
    assert store.get(NAME)["status"]["lastCheck"]["attempts"] == 1


def test_a_timer_visit_releases_a_lease_whose_pod_is_gone(
    lease_agent: NodeLeases,
    store: LeaseStore,
    kubelet: Kubelet,
    k8s: client.ApiClient,
) -> None:
    cached = leased_then_released(lease_agent, kubelet, k8s, release=False)
    client.CoreV1Api(k8s).delete_namespaced_pod("c-1", "tenant-acme", grace_period_seconds=0)
    assert controller_tick(CountingStore(store), k8s, cached) == "released: pod tenant-acme/c-1 was deleted"
    assert state(store) == "Releasing"
