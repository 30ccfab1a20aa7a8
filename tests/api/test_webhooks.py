"""Webhooks as a tenant meets them: register an endpoint, get each status change of its
containers as a signed POST, see every attempt, resend one; internal URLs refused.

The API runs with the local cluster's kube-apiserver; the tests play the kubelet (pod phases) and
run a real HTTP receiver on 127.0.0.1 (allowed by ``webhook_allow_loopback``, as in the
sandbox)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc
from sqlalchemy import create_engine, text
from sqlmodel import Session

from devtools.waiting import wait_for
from services.api.db.engines import normalize_url
from services.api.domain.models import utcnow
from services.api.webhooks import store
from services.api.webhooks.signing import verify
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import ended, get_pod, mark_tenancy_ready, now, set_pod_status
from tests.api.webhook_receiver import Receiver

EVENTS = ["container.running", "container.succeeded", "container.failed", "container.cancelled"]
RUNNING = {"phase": "Running", "startTime": "2026-01-02T03:00:00Z"}
SUCCEEDED = {
    "phase": "Succeeded",
    "startTime": "2026-01-02T03:00:00Z",
    "containerStatuses": [
        {
            "name": "main",
            "ready": False,
            "restartCount": 0,
            "image": "x",
            "imageID": "",
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": "2026-01-02T03:00:00Z",
                    "finishedAt": "2026-01-02T03:00:03Z",
                }
            },
        }
    ],
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def flaky_receiver() -> Iterator[Receiver]:
    r = Receiver(fail_first=2).start()
    yield r
    r.stop()


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(
        database_url,
        kubeconfig,
        webhook_allow_loopback=True,
        webhook_retry_first_seconds=0.2,
        webhook_retry_max_seconds=1.0,
    )


def _tenant(api: ApiServer, k8s: Any, name: str) -> str:
    with api.client() as admin:
        token = new_tenancy(admin, name)
    mark_tenancy_ready(k8s, name)
    return token


def _submit(c: Any) -> tuple[str, str]:
    cid = c.post("/v1/containers", json={"image": "busybox:1.36", "gpus": 2}).json()["id"]
    wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending", what="the pod")
    return cid, f"gpucaas-{cid}"


def test_a_receiver_gets_running_and_succeeded_with_valid_signatures(
    api: ApiServer, k8s: Any, receiver: Receiver
) -> None:
    token = _tenant(api, k8s, "hooked")
    with api.client(token) as c:
        created = c.post(
            "/v1/webhooks", json={"url": receiver.url, "events": ["container.succeeded", "container.running"]}
        )
        assert created.status_code == 201, created.text
        hook = created.json()
        secret = hook["secret"]
        assert secret.startswith("whsec_") and hook["events"] == ["container.running", "container.succeeded"]
        listed, one = c.get("/v1/webhooks"), c.get(f"/v1/webhooks/{hook['id']}")
        assert secret not in listed.text and secret not in one.text
        assert [h["id"] for h in listed.json()["data"]] == [hook["id"]] and one.json()["url"] == receiver.url

        cid, pod = _submit(c)
        set_pod_status(k8s, "tenant-hooked", pod, RUNNING)
        running = wait_for(lambda: receiver.received("container.running"), what="container.running")
        set_pod_status(k8s, "tenant-hooked", pod, SUCCEEDED)
        succeeded = wait_for(lambda: receiver.received("container.succeeded"), what="container.succeeded")

        for got in (running[0], succeeded[0]):
            assert got.path == "/hooks/gpucaas" and got.headers["Content-Type"] == "application/json"
            assert verify(secret, got.headers, got.body)  # the documented recipe accepts it
            assert not verify(secret, got.headers, got.body.replace(b"hooked", b"hacked"))
            assert not verify("whsec_other", got.headers, got.body)
            event = got.event
            assert got.headers["Gpucaas-Webhook-Id"] == event["id"] and event["tenancy"] == "hooked"
            assert event["data"]["container"]["id"] == cid and event["data"]["container"]["gpus"] == 2
        assert running[0].event["data"]["container"]["status"] == "Running"
        done = succeeded[0].event["data"]["container"]
        assert (
            done["status"] == "Succeeded"
            and done["exit_code"] == 0
            and done["finished_at"].startswith("2026-01-02T03:00:03")
        )

        wait_for(
            lambda: c.get(f"/v1/webhooks/{hook['id']}/deliveries", params={"status": "delivered"}).json()["count"] == 2,
            what="both deliveries recorded",
        )
        deliveries = c.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"]
        assert {d["event_type"] for d in deliveries} == {"container.running", "container.succeeded"}
        for d in deliveries:
            assert d["attempt_count"] == 1 and d["last_status_code"] == 200 and d["next_attempt_at"] is None
            assert d["attempts"][0]["status_code"] == 200 and d["attempts"][0]["duration_ms"] >= 0
            assert d["container_id"] == cid
        assert len(receiver.received()) == 2  # nothing else: the webhook wants two event types


def test_a_receiver_that_fails_the_first_two_attempts_still_gets_the_event(
    api: ApiServer, k8s: Any, flaky_receiver: Receiver
) -> None:
    token = _tenant(api, k8s, "flaky")
    with api.client(token) as c:
        hook = c.post("/v1/webhooks", json={"url": flaky_receiver.url, "events": ["container.cancelled"]}).json()
        cid, _pod = _submit(c)
        assert c.delete(f"/v1/containers/{cid}").json()["status"] == "Cancelled"
        got = wait_for(lambda: flaky_receiver.received("container.cancelled"), what="the event, third time")
        assert verify(hook["secret"], got[0].headers, got[0].body)
        tries = flaky_receiver.received(ok=False)
        assert [t.answered for t in tries] == [500, 500, 200]
        assert len({t.headers["Gpucaas-Webhook-Id"] for t in tries}) == 1  # one event, retried
        assert len({t.body for t in tries}) == 1

        def delivered() -> dict[str, Any] | None:
            rows = c.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"]
            return rows[0] if rows and rows[0]["status"] == "delivered" else None

        d = wait_for(delivered, what="the delivery marked delivered")
        assert d["attempt_count"] == 3 and d["event_type"] == "container.cancelled"
        attempts = d["attempts"]  # newest first
        assert [a["status_code"] for a in attempts] == [200, 500, 500]
        assert attempts[0]["next_attempt_at"] is None
        assert all(a["error"] == "HTTP 500" and a["next_attempt_at"] for a in attempts[1:])

        # a resend sends the same event again, signed anew
        resent = c.post(f"/v1/webhooks/{hook['id']}/deliveries/{d['id']}/resend")
        assert resent.status_code == 202 and resent.json()["status"] == "pending"
        again = wait_for(lambda: len(flaky_receiver.received()) == 2 and flaky_receiver.received(), what="the resend")
        assert again[1].headers["Gpucaas-Webhook-Id"] == again[0].headers["Gpucaas-Webhook-Id"]
        assert verify(hook["secret"], again[1].headers, again[1].body)
        wait_for(lambda: (delivered() or {}).get("attempt_count") == 4, what="the resend recorded")
        missing = c.post(f"/v1/webhooks/{hook['id']}/deliveries/whd_missing/resend")
        assert missing.status_code == 404


def test_the_signing_secret_lives_in_the_tenant_namespace_not_in_the_database(
    api: ApiServer, k8s: Any, receiver: Receiver, database_url: str
) -> None:
    token = _tenant(api, k8s, "keeper")
    with api.client(token) as c:
        hook = c.post("/v1/webhooks", json={"url": receiver.url, "events": EVENTS}).json()
        obj_name = "gpucaas-webhook-" + hook["id"].replace("_", "-")
        secret = kc.CoreV1Api(k8s).read_namespaced_secret(obj_name, "tenant-keeper")
        import base64

        assert base64.b64decode(secret.data["secret"]).decode() == hook["secret"]
        assert c.get("/v1/secrets").json()["count"] == 0  # not one of the tenant's own secrets
        engine = create_engine(normalize_url(database_url))
        with engine.connect() as conn:
            rows = [
                str(tuple(r))
                for t in ("webhook", "webhook_delivery", "webhook_attempt")
                for r in conn.execute(text(f"SELECT * FROM {t}"))
            ]
        engine.dispose()
        assert rows and not any(hook["secret"] in r for r in rows)

        assert c.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
        wait_for(
            lambda: (
                obj_name
                not in [s.metadata.name for s in kc.CoreV1Api(k8s).list_namespaced_secret("tenant-keeper").items]
            ),
            what="the signing secret deleted",
        )
        assert c.get(f"/v1/webhooks/{hook['id']}").status_code == 404
        assert c.delete(f"/v1/webhooks/{hook['id']}").status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "https://172.16.5.4/hook",
        "https://192.168.1.10:8443/hook",
        "http://127.0.0.1:8080/hook",
        "http://[::1]/hook",
        "http://[fe80::1]/hook",
        "http://[fc00::1]/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://localhost:8080/hook",
        "https://kubernetes.default.svc/api",
        "https://gpucaas-api.gpucaas.svc.cluster.local/v1",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://kubernetes/api",
        "ftp://hooks.example.com/hook",
        "file:///etc/passwd",
        "https://user:pass@hooks.example.com/hook",
        "hooks.example.com/hook",
    ],
)
def test_internal_and_malformed_urls_are_refused_at_registration(module_api: ApiServer, url: str) -> None:
    with module_api.client() as admin:
        if admin.get("/v1/admin/tenancies/guarded").status_code == 404:
            new_tenancy(admin, "guarded")
        r = admin.post(
            "/v1/webhooks", params={"tenancy": "guarded"}, json={"url": url, "events": ["container.succeeded"]}
        )
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("url: "), r.text


@pytest.mark.parametrize(
    "body, field",
    [
        ({"url": "https://hooks.example.com/x", "events": []}, "events"),
        ({"url": "https://hooks.example.com/x", "events": ["container.exploded"]}, "events"),
        ({"url": "https://hooks.example.com/x"}, "events"),
        ({"events": ["container.failed"]}, "url"),
        ({"url": "https://hooks.example.com/" + "x" * 3000, "events": ["container.failed"]}, "url"),
        ({"url": "https://hooks.example.com/x", "events": ["container.failed"], "secret": "mine"}, "secret"),
    ],
)
def test_bad_webhook_bodies_get_a_4xx_naming_the_field(module_api: ApiServer, body: dict, field: str) -> None:
    with module_api.client() as admin:
        if admin.get("/v1/admin/tenancies/guarded").status_code == 404:
            new_tenancy(admin, "guarded")
        r = admin.post("/v1/webhooks", params={"tenancy": "guarded"}, json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"], r.text


def test_a_receiver_in_an_allowed_network_is_registered_and_delivered_to(
    kubeconfig: Path, serve: Callable[..., ApiServer], sqlite_url: str, k8s: Any
) -> None:
    """``webhook_allow_networks`` names the operator's range (here 127.0.0.2/32, loopback itself not
    allowed): a receiver there gets its events; one at the next address is refused, naming the field."""
    api = serve(
        sqlite_url,
        kubeconfig,
        webhook_allow_networks=["127.0.0.2/32"],
        webhook_retry_first_seconds=0.2,
        webhook_retry_max_seconds=1.0,
    )
    inside = Receiver(host="127.0.0.2").start()
    try:
        token = _tenant(api, k8s, "ranged")
        with api.client(token) as c:
            outside = c.post(
                "/v1/webhooks",
                json={"url": inside.url.replace("127.0.0.2", "127.0.0.3"), "events": ["container.running"]},
            )
            assert outside.status_code == 422 and "url: 127.0.0.3 is a loopback address" in outside.text, outside.text
            created = c.post("/v1/webhooks", json={"url": inside.url, "events": ["container.running"]})
            assert created.status_code == 201, created.text
            cid, pod = _submit(c)
            set_pod_status(k8s, "tenant-ranged", pod, RUNNING)
            got = wait_for(lambda: inside.received("container.running"), what="a delivery to the allowed network")
            assert got[0].event["data"]["container"]["id"] == cid
    finally:
        inside.stop()


def test_the_allowed_networks_setting_refuses_what_is_not_a_range(
    kubeconfig: Path, make_settings: Callable[..., Any], sqlite_url: str
) -> None:
    with pytest.raises(ValueError, match="webhook_allow_networks"):
        make_settings(sqlite_url, kubeconfig, webhook_allow_networks=["hooks.example.com"])


def test_a_name_resolving_to_loopback_is_refused_at_delivery(
    kubeconfig: Path,
    serve: Callable[..., ApiServer],
    sqlite_url: str,
    k8s: Any,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: the name did not resolve at registration (accepted; DNS may lag), and
    later resolves to 127.0.0.1. Loopback is not allowed here: nothing may reach the receiver."""
    api = serve(sqlite_url, kubeconfig, webhook_retry_first_seconds=0.2, webhook_retry_max_seconds=1.0)
    name = "hooks.rebind.example"
    real = socket.getaddrinfo
    answers = iter([socket.gaierror(socket.EAI_NONAME, "Name or service not known")])

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:  # a DNS whose answer changes
        if host == name:
            answer = next(answers, None)
            if answer is not None:
                raise answer
            return real("127.0.0.1", port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    token = _tenant(api, k8s, "rebound")
    with api.client(token) as c:
        created = c.post(
            "/v1/webhooks",
            json={"url": f"http://{name}:{receiver.port}/hooks/gpucaas", "events": ["container.running"]},
        )
        assert created.status_code == 201, created.text
        hook = created.json()
        _cid, pod = _submit(c)
        set_pod_status(k8s, "tenant-rebound", pod, RUNNING)

        def refused_twice() -> list[dict[str, Any]] | None:
            rows = c.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"]
            return rows if rows and rows[0]["attempt_count"] >= 2 else None

        rows = wait_for(refused_twice, what="two refused attempts")
    d = rows[0]
    assert d["status"] == "pending" and d["next_attempt_at"] and d["last_status_code"] is None
    assert "resolves to 127.0.0.1 is a loopback address" in d["last_error"], d
    assert receiver.received(ok=False) == []


def test_deliveries_wait_in_the_outbox_while_the_receiver_is_down_and_survive_a_restart(
    kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str, k8s: Any
) -> None:
    """At least once: an event committed while nobody listens is delivered after an API
    restart, once the receiver is up."""
    settings = {"webhook_allow_loopback": True, "webhook_retry_first_seconds": 0.2, "webhook_retry_max_seconds": 0.5}
    api = serve(database_url, kubeconfig, **settings)
    token = _tenant(api, k8s, "patient")
    down = Receiver()  # takes a free port, then closes it: connections are refused
    port = down.port
    down.server.server_close()
    url = f"http://127.0.0.1:{port}/hooks/gpucaas"
    with api.client(token) as c:
        hook = c.post("/v1/webhooks", json={"url": url, "events": ["container.running"]}).json()
        _cid, pod = _submit(c)
        set_pod_status(k8s, "tenant-patient", pod, RUNNING)
        wait_for(
            lambda: (
                (c.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"] or [{}])[0].get("attempt_count", 0) >= 1
            ),
            what="a failed attempt",
        )
        failed = c.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"][0]
    assert failed["status"] == "pending" and "ConnectError" in failed["last_error"]
    api.stop()
    receiver = Receiver(port=port).start()
    try:
        api.start()
        got = wait_for(lambda: receiver.received("container.running"), what="the event after the restart")
        assert json.loads(got[0].body)["tenancy"] == "patient"
    finally:
        receiver.stop()


def test_only_wanted_events_are_sent_and_a_deleted_webhook_gets_nothing_more(
    api: ApiServer, k8s: Any, receiver: Receiver
) -> None:
    token = _tenant(api, k8s, "picky")
    with api.client(token) as c:
        failed_only = c.post(
            "/v1/webhooks", json={"url": receiver.url + "?which=failed", "events": ["container.failed"]}
        ).json()
        gone = c.post("/v1/webhooks", json={"url": receiver.url + "?which=gone", "events": EVENTS}).json()
        assert c.delete(f"/v1/webhooks/{gone['id']}").status_code == 204
        _cid, pod = _submit(c)
        set_pod_status(k8s, "tenant-picky", pod, RUNNING)
        set_pod_status(
            k8s,
            "tenant-picky",
            pod,
            {
                "phase": "Failed",
                "startTime": now(),
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": now()}},
                    }
                ],
            },
        )
        got = wait_for(lambda: receiver.received("container.failed"), what="container.failed")
        assert got[0].path == "/hooks/gpucaas?which=failed" and got[0].event["data"]["container"]["exit_code"] == 3
        rows = c.get(f"/v1/webhooks/{failed_only['id']}/deliveries").json()["data"]
    assert [r["event_type"] for r in rows] == ["container.failed"]
    assert [r.path for r in receiver.received(ok=False)] == ["/hooks/gpucaas?which=failed"]


def test_a_delivery_that_keeps_failing_is_given_up_after_the_window_then_pruned(
    kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str, k8s: Any
) -> None:
    api = serve(
        database_url,
        kubeconfig,
        webhook_allow_loopback=True,
        webhook_retry_first_seconds=0.2,
        webhook_retry_max_seconds=0.4,
        webhook_retry_hours=1.5 / 3600,
    )  # a 1.5-second window
    always_down = Receiver(fail_first=1_000_000).start()
    try:
        token = _tenant(api, k8s, "doomed")
        with api.client(token) as c:
            hook = c.post("/v1/webhooks", json={"url": always_down.url, "events": ["container.cancelled"]}).json()
            cid, _pod = _submit(c)
            c.delete(f"/v1/containers/{cid}")

            def given_up() -> dict[str, Any] | None:
                rows = c.get(f"/v1/webhooks/{hook['id']}/deliveries", params={"status": "failed"}).json()["data"]
                return rows[0] if rows else None

            d = wait_for(given_up, what="the delivery given up")
            assert d["attempt_count"] >= 2 and d["next_attempt_at"] is None and d["last_status_code"] == 500
            assert d["attempts"][0]["next_attempt_at"] is None  # the last attempt said: no more
            tries = len(always_down.received(ok=False))
            assert tries == d["attempt_count"]

            # finished deliveries are pruned with the retention of finished containers; pending ones stay
            with Session(api.app.state.service_engine) as session:
                assert store.prune(session, before=utcnow()) == 1
            assert c.get(f"/v1/webhooks/{hook['id']}/deliveries").json() == {"data": [], "count": 0}
    finally:
        always_down.stop()


#: what Kueue's pod integration sets before it deletes a pod it preempts (its message names the
#: preemptor and another tenancy's queue, which the tenant is never shown), on a pod whose
#: process then ended on SIGTERM
PREEMPTED = ended(
    "Failed",
    exit_code=143,
    reason="Error",
    started="2026-01-02T03:00:00Z",
    finished="2026-01-02T03:00:09Z",
    conditions=[
        {
            "type": "TerminationTarget",
            "status": "True",
            "reason": "WorkloadEvictedDueToPreempted",
            "message": "Preempted to accommodate a workload (UID: 0c5e, JobUID: 77ab) due to reclamation "
            "within the cohort; preemptor path: /gpucaas/tenancy-rival; preemptee path: /gpucaas/tenancy-spot",
        }
    ],
)


def test_a_preempted_interruptible_container_says_preempted_in_its_reason_its_webhook_and_its_usage(
    api: ApiServer, k8s: Any, receiver: Receiver
) -> None:
    token = _tenant(api, k8s, "spot")
    with api.client(token) as c:
        hook = c.post("/v1/webhooks", json={"url": receiver.url, "events": ["container.preempted", "container.failed"]})
        assert hook.status_code == 201, hook.text
        created = c.post("/v1/containers", json={"image": "busybox:1.36", "gpus": 2, "interruptible": True})
        assert created.status_code == 202, created.text
        assert created.json()["interruptible"] is True and created.json()["reason"] is None
        cid = created.json()["id"]
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending", what="the pod")
        pod = f"gpucaas-{cid}"
        set_pod_status(k8s, "tenant-spot", pod, RUNNING)
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Running", what="running")
        set_pod_status(k8s, "tenant-spot", pod, PREEMPTED)
        got = wait_for(lambda: (r := receiver.received()) and len(r) >= 2 and r, what="both events")
        assert [g.event["type"] for g in got] == ["container.preempted", "container.failed"]
        for g in got:
            seen = g.event["data"]["container"]
            assert seen["reason"] == "Preempted" and seen["interruptible"] is True and seen["exit_code"] == 143
            assert "rival" not in g.body.decode() and "0c5e" not in g.body.decode()

        shown = c.get(f"/v1/containers/{cid}").json()
        assert shown["status"] == "Failed" and shown["reason"] == "Preempted"
        assert shown["message"] == (
            "Preempted by the queue: another tenancy claimed its guaranteed GPUs (Error: failed with exit code 143)"
        )
        window = {"group_by": "container", "from": "2026-01-02T00:00:00Z", "to": "2026-01-03T00:00:00Z"}
        runs = c.get("/v1/usage", params=window).json()["data"]
        assert [(r["container_id"], r["interruptible"], r["gpu_seconds"]) for r in runs] == [(cid, True, 18.0)]
        # a standard container is standard everywhere
        plain = c.post("/v1/containers", json={"image": "busybox:1.36", "gpus": 1}).json()
        assert plain["interruptible"] is False
        # the class is part of what an idempotent retry must repeat
        first = c.post(
            "/v1/containers",
            json={"image": "busybox:1.36", "gpus": 1, "interruptible": True},
            headers={"Idempotency-Key": "class-1"},
        )
        again = c.post(
            "/v1/containers", json={"image": "busybox:1.36", "gpus": 1}, headers={"Idempotency-Key": "class-1"}
        )
        assert first.status_code == 202 and again.status_code == 409, again.text
        bad = c.post("/v1/containers", json={"image": "busybox:1.36", "interruptible": "yes"})
        assert bad.status_code == 422 and "interruptible" in bad.text


def test_a_preempted_container_that_asked_to_restart_goes_back_in_the_queue_under_its_id(
    api: ApiServer, k8s: Any, receiver: Receiver
) -> None:
    """``restart_on_preemption``: the preempted run ends, the container is queued again with the
    same id, and its next run is a new pod and a usage record of its own."""
    token = _tenant(api, k8s, "again")
    with api.client(token) as c:
        hook = c.post("/v1/webhooks", json={"url": receiver.url, "events": EVENTS + ["container.preempted"]})
        assert hook.status_code == 201, hook.text
        refused = c.post(
            "/v1/containers",
            json={"image": "busybox:1.36", "restart_on_preemption": True, "ports": [{"port": 8080}]},
        )
        assert refused.status_code == 422 and "restart_on_preemption" in refused.text
        created = c.post(
            "/v1/containers",
            json={"image": "busybox:1.36", "gpus": 2, "interruptible": True, "restart_on_preemption": True},
        )
        assert created.status_code == 202, created.text
        first = created.json()
        assert first["restart_on_preemption"] is True and first["attempt"] == 1
        cid = first["id"]
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending", what="the pod")
        set_pod_status(k8s, "tenant-again", f"gpucaas-{cid}", RUNNING)
        wait_for(lambda: receiver.received("container.running"), what="container.running")
        set_pod_status(k8s, "tenant-again", f"gpucaas-{cid}", PREEMPTED)

        preempted = wait_for(lambda: receiver.received("container.preempted"), what="container.preempted")
        seen = preempted[0].event["data"]["container"]
        assert (seen["status"], seen["reason"], seen["attempt"]) == ("Queued", "Preempted", 2)
        assert seen["message"] == (
            "Preempted by the queue: another tenancy claimed its guaranteed GPUs; back in the queue for run 2"
        )
        assert not receiver.received("container.failed")  # it did not end
        requeued = wait_for(
            lambda: (r := c.get(f"/v1/containers/{cid}").json())["pod_name"] == f"gpucaas-{cid}-r1" and r,
            what="the next run's pod name",
        )
        # until its next run starts it says why its last one ended (its message: why it waits now)
        assert requeued["reason"] == "Preempted" and requeued["attempt"] == 2
        # the next run is a new pod, labelled with its run; the preempted one is gone
        second = wait_for(lambda: get_pod(k8s, "tenant-again", f"gpucaas-{cid}-r1"), what="the second run's pod")
        assert second["metadata"]["labels"]["gpucaas.dev/run"] == "1"
        wait_for(lambda: get_pod(k8s, "tenant-again", f"gpucaas-{cid}") is None, what="the first pod deleted")

        later = ended(
            "Succeeded",
            exit_code=0,
            reason="Completed",
            started="2026-01-02T04:00:00Z",
            finished="2026-01-02T04:00:05Z",
        )
        set_pod_status(k8s, "tenant-again", f"gpucaas-{cid}-r1", later)
        done = wait_for(
            lambda: (r := c.get(f"/v1/containers/{cid}").json())["status"] == "Succeeded" and r, what="the second run"
        )
        assert done["reason"] is None and done["attempt"] == 2 and done["exit_code"] == 0
        window = {"group_by": "container", "from": "2026-01-02T00:00:00Z", "to": "2026-01-03T00:00:00Z"}
        runs = wait_for(
            lambda: len(r := c.get("/v1/usage", params=window).json()["data"]) == 2 and r, what="both runs' records"
        )
        assert [(r["container_id"], r["attempt"], r["gpu_seconds"], r["interruptible"]) for r in runs] == [
            (cid, 1, 18.0, True),
            (cid, 2, 10.0, True),
        ]
        assert c.get("/v1/usage", params={**window, "group_by": "day"}).json()["total_gpu_seconds"] == 28.0
