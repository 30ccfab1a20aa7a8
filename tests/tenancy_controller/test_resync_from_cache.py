"""children_in_sync: when the resync may skip a tenancy, from the children the watches showed (pure)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from services.tenancy_controller import reconcile
from services.tenancy_controller.policies import NetworkConfig
from services.tenancy_controller.workflow import Context, children_in_sync

from .factories import tenancy_body

NFS = {"server": "10.0.0.9", "path": "/exports/acme"}


def _ctx() -> Context:
    # a client to nowhere: the function under test must make no request
    return Context(kube=_NoKube(), network=NetworkConfig())  # type: ignore[arg-type]


class _NoKube:
    def __getattr__(self, name: str):  # any use of the API is a failure here
        raise AssertionError(f"children_in_sync used the API ({name})")


def _ready(body: dict, claim_phase: str = "Pending") -> tuple[dict, list[dict]]:
    """``body`` with the status a full pass writes, and its children as the watches show them."""
    plan = reconcile.reconcile_tenancy(body, network=NetworkConfig())
    outcomes = {comp: reconcile.Outcome(True, "Reconciled", "ok") for comp in reconcile.COMPONENTS}
    live = copy.deepcopy(plan.objects)
    for obj in live:
        obj["metadata"]["resourceVersion"] = "7"
        if obj["kind"] == "PersistentVolumeClaim":
            obj["status"] = {"phase": claim_phase}
    if body["spec"].get("nfs"):
        outcomes[reconcile.STORAGE] = reconcile.Outcome(
            True, "Reconciled", "PersistentVolumeClaim created; claim Pending"
        )
    status = reconcile.tenancy_status(plan, outcomes, previous=None, now=datetime(2026, 1, 1, tzinfo=UTC))
    return {**body, "status": status}, live


def test_a_tenancy_whose_children_match_is_skipped():
    for spec in ({}, {"nfs": NFS}):
        body, live = _ready(tenancy_body("acme", uid="u", **spec))
        assert children_in_sync(_ctx(), body, live)


def test_a_missing_child_calls_for_a_pass():
    body, live = _ready(tenancy_body("acme", uid="u"))
    assert not children_in_sync(_ctx(), body, [o for o in live if o["kind"] != "ResourceQuota"])


def test_a_changed_child_calls_for_a_pass():
    body, live = _ready(tenancy_body("acme", uid="u"))
    quota = next(o for o in live if o["kind"] == "ResourceQuota")
    quota["spec"]["hard"] = {k: "999" for k in quota["spec"]["hard"]}
    assert not children_in_sync(_ctx(), body, live)


def test_a_child_being_deleted_calls_for_a_pass():
    body, live = _ready(tenancy_body("acme", uid="u"))
    live[1]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not children_in_sync(_ctx(), body, live)


def test_a_child_it_no_longer_wants_calls_for_a_pass():
    _, live = _ready(tenancy_body("acme", uid="u", nfs=NFS))
    without, _ = _ready(tenancy_body("acme", uid="u"))
    assert not children_in_sync(_ctx(), without, live)  # the PV and PVC are still there


def test_a_status_not_ready_or_of_an_older_generation_calls_for_a_pass():
    body, live = _ready(tenancy_body("acme", uid="u"))
    assert not children_in_sync(_ctx(), {**body, "status": {**body["status"], "phase": "Pending"}}, live)
    newer = copy.deepcopy(body)
    newer["metadata"]["generation"] = 2
    assert not children_in_sync(_ctx(), newer, live)


def test_a_claim_whose_phase_changed_calls_for_a_pass():
    body, live = _ready(tenancy_body("acme", uid="u", nfs=NFS), claim_phase="Bound")
    assert not children_in_sync(_ctx(), body, live)  # the status still says "claim Pending"


def test_an_nfs_host_name_always_calls_for_a_pass():
    body, live = _ready(tenancy_body("acme", uid="u", nfs={"server": "nfs.example.com", "path": "/e"}))
    assert not children_in_sync(_ctx(), body, live)


def test_the_resync_reads_nothing_while_in_sync_and_repairs_a_doubt(api, kubeconfig, monkeypatch):
    """The controller in this process, resyncing every 0.2 s: a steady tenancy costs no request;
    a status set back by someone else (no child changed, no handler fires) is put right by it."""
    import threading

    from services.tenancy_controller import kube, workflow

    from .conftest import ControllerThread, controller_settings, wait_for

    calls: list[str] = []
    checks: list[bool] = []
    real_request, real_check = kube.KubeClient.request, workflow.children_in_sync

    def counted_request(self, method, path, **kw):
        if threading.current_thread() is not threading.main_thread():  # the controller's, not this test's
            calls.append(f"{method} {path}")
        return real_request(self, method, path, **kw)

    def counted_check(*args, **kw):
        checks.append(real_check(*args, **kw))
        return checks[-1]

    monkeypatch.setattr(kube.KubeClient, "request", counted_request)
    monkeypatch.setattr(workflow, "children_in_sync", counted_check)
    ctl = ControllerThread(controller_settings(kubeconfig, resync_interval_s=0.2)).start()
    try:
        api.create(tenancy_body("steady", uid="", nfs=NFS))
        # steady means the PV controller has bound the claim too: until then its binding (a child's
        # change, like any other) rightly costs a pass, at a moment the test does not choose
        wait_for(lambda: _storage_message(api, "steady").endswith("claim Bound"), what="steady Ready, claim Bound")
        wait_for(lambda: checks and checks[-1], what="a resync finding it in sync")
        settled, in_sync = len(calls), checks.count(True)
        wait_for(lambda: checks.count(True) >= in_sync + 3, what="three more resyncs")
        assert calls[settled:] == []
        api.patch_status("Tenancy", "steady", {"phase": "Pending"})
        wait_for(lambda: api.get("Tenancy", "steady")["status"]["phase"] == "Ready", what="status put right")
        assert "GET /api/v1/namespaces/tenant-steady" in calls[settled:]
    finally:
        ctl.stop()


def _storage_message(api, name: str) -> str:
    """The StorageReady condition's message while the tenancy is Ready ('' otherwise)."""
    status = (api.get("Tenancy", name) or {}).get("status") or {}
    if status.get("phase") != "Ready":
        return ""
    return next((c.get("message", "") for c in status.get("conditions") or [] if c.get("type") == "StorageReady"), "")
