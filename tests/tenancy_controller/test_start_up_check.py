"""The controller's start-up permission check covers every resource its process's handlers touch.

``gpucaas controller`` hosts the tenancy handlers and the GPU-lease timers in one Kopf
operator (gpucaas/controller.py). At start it lists each resource those handlers
watch, so that a missing grant is named once ("forbidden: <user> cannot list gpuleases...")
instead of Kopf retrying a refused watch forever. The list is read from the operator's own
registry: whatever a handler watches, indexes or times is checked, GPULeases included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import crds, lease_states as states
from core.kube import KubeConnection, load_configuration
from core.lease_store import LeaseStore, build_gpu_lease
from gpucaas.controller import registrars
from services.gpu_leases import controller as gpu_lease_timers
from services.gpu_leases.settings import LeaseTimerSettings
from services.tenancy_controller import handlers, main
from tests.core_kube.scripted import forbidden, write_kubeconfig

from .conftest import ControllerThread, controller_settings, wait_for

USER = "system:serviceaccount:gpucaas-system:gpucaas-controller"
EMPTY_LIST = {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}
GPULEASES = (crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL)


def _path(group: str, version: str, plural: str) -> str:
    return f"/api/{version}/{plural}" if not group else f"/apis/{group}/{version}/{plural}"


def _every_selected_resource(registry: Any) -> set[tuple[str, str, str]]:
    """Each resource any handler of ``registry`` is bound to, from every one of Kopf's handler registries."""
    found = set()
    for part in vars(registry).values():
        for handler in getattr(part, "get_all_handlers", lambda: [])():
            sel = getattr(handler, "selector", None)
            if sel is not None:
                found.add((sel.group or "", sel.version or "", sel.plural or sel.any_name))
    return found


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_the_check_lists_every_resource_the_handlers_touch(scripted: Any, tmp_path: Path, mode: str) -> None:
    srv = scripted([(200, EMPTY_LIST)])
    settings = controller_settings(write_kubeconfig(tmp_path / "kubeconfig", srv.url), allocation_mode=mode)
    registry = main.build_registry(settings, registrars(LeaseTimerSettings()))
    cfg = load_configuration(KubeConnection(kubeconfig=settings.kubeconfig))

    assert main.check_access(cfg, settings, registry) == []

    listed = {r.split("?")[0] for r in srv.requests}
    touched = _every_selected_resource(registry)
    expected = {handlers.TENANCY, *handlers.CHILDREN, gpu_lease_timers.LEASE}
    if mode == "dra":
        expected.add(handlers.DRA_CHILD)
    assert GPULEASES in touched and expected <= touched
    assert {_path(*r) for r in touched} == listed
    assert all(r.endswith("?limit=1") for r in srv.requests)


def test_a_refused_gpulease_list_is_named_at_start(scripted: Any, tmp_path: Path, caplog) -> None:
    srv = scripted([(200, EMPTY_LIST)])
    settings = controller_settings(write_kubeconfig(tmp_path / "kubeconfig", srv.url))
    registry = main.build_registry(settings, registrars(LeaseTimerSettings()))
    refused = _path(*GPULEASES)
    script = [
        (403, forbidden(USER, "list", crds.GPULEASE_PLURAL, crds.GROUP)) if _path(*r) == refused else (200, EMPTY_LIST)
        for r in main.watched_resources(registry)
    ]
    srv.script[:] = [*script, (200, EMPTY_LIST)]
    cfg = load_configuration(KubeConnection(kubeconfig=settings.kubeconfig))

    problems = main.check_access(cfg, settings, registry)

    assert problems == [f"gpuleases: forbidden: {USER} cannot list gpuleases.{crds.GROUP}"]
    assert f"cannot list gpuleases.{crds.GROUP}" in caplog.text


def test_without_the_lease_timers_gpuleases_are_not_checked() -> None:
    settings = controller_settings(Path("/nonexistent"))
    alone = main.build_registry(settings, registrars(LeaseTimerSettings(gpu_leases=False)))
    assert GPULEASES not in main.watched_resources(alone)
    assert handlers.TENANCY in main.watched_resources(alone)


def test_the_controller_process_runs_the_lease_timers(api: Any, kubeconfig: Path, k8s: Any) -> None:
    """``gpucaas controller``'s operator, wired as gpucaas/controller.py wires it, moves a
    Releasing lease on to Checking: the GPU-lease timers run beside the tenancy handlers."""
    store = LeaseStore(k8s)
    name = store.ensure(build_gpu_lease("gpu-node-a", "0000:1b:00.0", "0x2330", 0))["metadata"]["name"]
    store.transition(name, lambda st: states.admin_quarantine(st, "checked again below"))
    assert store.transition(name, lambda st: states.admin_release(st))["status"]["state"] == "Releasing"
    ctl = ControllerThread(controller_settings(kubeconfig), registrars(LeaseTimerSettings())).start()
    try:
        wait_for(lambda: store.get(name)["status"]["state"] == "Checking", what="the lease timer's check request")
    finally:
        ctl.stop()


def test_a_lease_released_while_the_controller_runs_is_checked_without_waiting_for_its_timer(
    api: Any, kubeconfig: Path, k8s: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU released by its node asks for its check on the lease's watch event: with the
    timers an hour apart, only the event can move it on (its next container waits for it)."""
    monkeypatch.setattr(gpu_lease_timers, "INTERVAL_S", 3600.0)
    store = LeaseStore(k8s)
    probe = store.ensure(build_gpu_lease("gpu-node-a", "0000:1b:00.0", "0x2330", 0))["metadata"]["name"]
    store.transition(probe, lambda st: states.admin_quarantine(st, "released below, before the start"))
    store.transition(probe, lambda st: states.admin_release(st))
    name = store.ensure(build_gpu_lease("gpu-node-a", "0000:29:00.0", "0x2330", 1))["metadata"]["name"]
    store.transition(name, lambda st: states.admin_quarantine(st, "released below, after the start"))
    ctl = ControllerThread(controller_settings(kubeconfig), registrars(LeaseTimerSettings())).start()
    try:
        # the controller has listed the leases (a lease's timer first runs an interval after that)
        wait_for(lambda: store.get(probe)["status"]["state"] == "Checking", what="the probe's check request")
        store.transition(name, lambda st: states.admin_release(st))
        wait_for(lambda: store.get(name)["status"]["state"] == "Checking", what="the check request on the event")
    finally:
        ctl.stop()
