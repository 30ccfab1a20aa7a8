"""`gpucaas controller` as real processes: killed mid-reconcile, and two replicas with peering."""

from __future__ import annotations

from services.tenancy_controller import main, policies, reconcile

from .conftest import wait_for
from .factories import new_tenancy
from .helpers import wait_phase

COUNT = 30


def _ready(api, names):
    return [n for n in names if ((api.get("Tenancy", n) or {}).get("status") or {}).get("phase") == "Ready"]


def _not_ready(api, names):
    """Each tenancy not Ready: its status and Kopf's annotations (its handlers' progress)."""
    lines = []
    for name in sorted(set(names) - set(_ready(api, names))):
        obj = api.get("Tenancy", name) or {}
        notes = {
            k: v
            for k, v in (obj.get("metadata", {}).get("annotations") or {}).items()
            if k.startswith(main.KOPF_ANNOTATION_PREFIX)
        }
        lines.append(f"{name}: status {obj.get('status')}; annotations {notes}")
    return "\n".join(lines)


def test_killed_mid_reconcile_then_restarted_converges(api, spawn):
    names = [f"restart-{i:02d}" for i in range(COUNT)]
    for name in names:
        api.create(new_tenancy(name, nfs={"server": "10.20.0.5", "path": f"/exports/{name}"}))
    first = spawn("--standalone")
    wait_for(
        lambda: any(ns["metadata"]["name"].startswith("tenant-restart-") for ns in api.list("Namespace")),
        timeout=120,
        what="the first controller to start creating namespaces",
    )
    first.kill()  # SIGKILL: no cleanup, Kopf's progress annotations stay as they were
    ready_at_kill = _ready(api, names)
    assert len(ready_at_kill) < COUNT, "the kill came too late to interrupt anything"

    second = spawn("--standalone")
    try:
        wait_for(lambda: len(_ready(api, names)) == COUNT, timeout=180, what="every tenancy Ready after the restart")
    except AssertionError as exc:  # which tenancies, in what state, and what each controller said
        raise AssertionError(
            f"{exc}\n{_not_ready(api, names)}\n--- first:\n{first.log()[-4000:]}\n--- second:\n{second.log()[-8000:]}"
        ) from None
    for name in names:
        tenancy = api.get("Tenancy", name)
        for desired in reconcile.reconcile_tenancy(tenancy, network=policies.NetworkConfig()).objects:
            meta = desired["metadata"]
            assert reconcile.matches(desired, api.get(desired["kind"], meta["name"], meta.get("namespace"))), (
                name,
                desired["kind"],
            )
    second.terminate()


def test_two_replicas_only_the_higher_priority_one_acts(api, spawn):
    high = spawn("--peering", "gpucaas-test", "--priority", "10")
    low = spawn("--peering", "gpucaas-test", "--priority", "5")

    def peers():
        obj = api.request("GET", "/apis/kopf.dev/v1/clusterkopfpeerings/gpucaas-test")
        return len(obj.get("status") or {}) == 2

    wait_for(lambda: _safe(peers), timeout=120, what="both replicas registered in the peering object")

    def low_paused():
        # Kopf starts paused; it logs "Resuming" when it finds itself alone and "Pausing" when a
        # higher-priority peer appears: the last word says the state.
        log = low.log()
        return log.rfind("Pausing operations in favour of") >= log.rfind("Resuming operations")

    try:
        wait_for(low_paused, timeout=60, what="the low replica paused")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- high:\n{high.log()}\n--- low:\n{low.log()}") from None

    for name in ("peer-a", "peer-b", "peer-c"):
        api.create(new_tenancy(name))
    for name in ("peer-a", "peer-b", "peer-c"):
        wait_phase(api, name, "Ready", timeout=120)
        assert f"tenancy {name}: phase None -> Ready" in high.log()
        assert f"tenancy {name}:" not in low.log()

    high.terminate()  # graceful: leaves the peering object, the other replica takes over
    api.create(new_tenancy("peer-after"))
    wait_phase(api, "peer-after", "Ready", timeout=120)
    assert "tenancy peer-after: phase None -> Ready" in low.log()
    low.terminate()


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - the peering object may not exist yet
        return False


def test_liveness_endpoint_answers(api, spawn):
    import json
    import urllib.request

    from devtools.ports import free_port

    port = free_port()
    proc = spawn("--standalone", "--liveness", f"http://127.0.0.1:{port}/healthz")

    def probe():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                return resp.status == 200 and json.loads(resp.read() or b"{}") is not None
        except OSError:
            return False

    wait_for(probe, timeout=120, what="the liveness endpoint")
    proc.terminate()
