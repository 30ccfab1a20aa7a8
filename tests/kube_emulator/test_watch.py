"""Watch streams through the official client: events, resume, 410 Gone, timeouts, bookmarks."""

from __future__ import annotations

import json
import threading

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.kube_emulator.conftest import lease_body, pod_body


def _events(stream, n: int) -> list[tuple[str, str]]:
    out = []
    for ev in stream:
        out.append((ev["type"], ev["object"].metadata.name if hasattr(ev["object"], "metadata") else ev["object"]["metadata"]["name"]))
        if len(out) == n:
            break
    return out


def test_watch_added_modified_deleted(core: client.CoreV1Api) -> None:
    pods = core.list_namespaced_pod("default")
    rv = pods.metadata.resource_version
    core.create_namespaced_pod("default", pod_body("w1"))
    core.patch_namespaced_pod("w1", "default", {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_pod("w1", "default")
    w = watch.Watch()
    got = _events(w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=10), 3)
    w.stop()
    assert got == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]


def test_watch_without_resource_version_starts_with_current_state(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("existing"))
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_pod, "default", timeout_seconds=10)
    first = next(stream)
    assert first["type"] == "ADDED" and first["object"].metadata.name == "existing"
    w.stop()


def test_watch_receives_live_events(core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    got: list[tuple[str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        got.extend(_events(w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=20), 2))

    t = threading.Thread(target=consume)
    t.start()
    core.create_namespaced_pod("default", pod_body("live"))
    core.delete_namespaced_pod("live", "default")
    t.join(30)
    w.stop()
    assert got == [("ADDED", "live"), ("DELETED", "live")]


def test_watch_query_capitalisation(k8s: client.ApiClient, kube_emulator) -> None:
    http = urllib3.PoolManager()
    for value in ("true", "True", "1"):
        r = http.request("GET", f"{kube_emulator.url}/api/v1/namespaces?watch={value}&timeoutSeconds=1",
                         preload_content=True, timeout=10,
                         headers={"Authorization": f"Bearer {kube_emulator.admin_token}"})
        lines = [json.loads(line) for line in r.data.decode().splitlines() if line]
        assert r.status == 200
        assert {ev["object"]["metadata"]["name"] for ev in lines} >= {"default", "kube-system"}
    http.clear()


def test_watch_selector_translates_events(core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("s", labels={"app": "a"}))
    core.patch_namespaced_pod("s", "default", {"metadata": {"labels": {"app": "b"}}})
    core.patch_namespaced_pod("s", "default", {"metadata": {"labels": {"app": "a"}}})
    w = watch.Watch()
    got = _events(w.stream(core.list_namespaced_pod, "default", resource_version=rv, label_selector="app=a",
                           timeout_seconds=10), 3)
    w.stop()
    assert got == [("ADDED", "s"), ("DELETED", "s"), ("ADDED", "s")]


def test_watch_from_compacted_resource_version_is_410(core: client.CoreV1Api, kube_emulator) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("a"))
    kube_emulator.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        for _ in w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5):
            pass
    assert err.value.status == 410


def test_watch_410_error_event_on_the_wire(kube_emulator, core: client.CoreV1Api) -> None:
    kube_emulator.compact()
    http = urllib3.PoolManager()
    r = http.request("GET", f"{kube_emulator.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion=1",
                     timeout=10, headers={"Authorization": f"Bearer {kube_emulator.admin_token}"})
    ev = json.loads(r.data.decode().splitlines()[0])
    assert ev["type"] == "ERROR"
    assert ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired"
    http.clear()


def test_watch_timeout_seconds_ends_stream(core: client.CoreV1Api) -> None:
    w = watch.Watch()
    events = list(w.stream(core.list_namespaced_pod, "default", timeout_seconds=1, _request_timeout=30))
    assert events == []


def test_watch_bookmarks_are_sent_when_asked(tmp_path) -> None:
    from kubernetes import config

    from gpucaas.devtools.kube_emulator import KubeEmulator

    with KubeEmulator(bookmark_interval=0.2) as emu:
        api = config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kc")))
        core = client.CoreV1Api(api)
        rv = core.list_namespaced_pod("default").metadata.resource_version
        resp = core.list_namespaced_pod("default", watch=True, allow_watch_bookmarks=True, resource_version=rv,
                                        timeout_seconds=1, _preload_content=False)
        lines = [json.loads(line) for line in resp.data.decode().splitlines() if line]
        api.close()
    assert lines and all(ev["type"] == "BOOKMARK" for ev in lines)
    assert lines[0]["object"]["kind"] == "Pod" and lines[0]["object"]["metadata"]["resourceVersion"] == rv


def test_watch_custom_objects(custom: client.CustomObjectsApi) -> None:
    args = ("gpucaas.dev", "v1alpha1", "gpuleases")
    rv = custom.list_cluster_custom_object(*args)["metadata"]["resourceVersion"]
    custom.create_cluster_custom_object(*args, lease_body("l1"))
    custom.patch_cluster_custom_object_status(*args, "l1", {"status": {"state": "Leased"}})
    w = watch.Watch()
    got = []
    for ev in w.stream(custom.list_cluster_custom_object, *args, resource_version=rv, timeout_seconds=10):
        got.append((ev["type"], ev["object"]["metadata"]["name"], (ev["object"].get("status") or {}).get("state")))
        if len(got) == 2:
            break
    w.stop()
    assert got == [("ADDED", "l1", None), ("MODIFIED", "l1", "Leased")]


def test_watch_single_object_by_name(core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    w = watch.Watch()
    got = _events(w.stream(core.list_namespaced_config_map, "default", field_selector="metadata.name=b",
                           resource_version=rv, timeout_seconds=10), 1)
    w.stop()
    assert got == [("ADDED", "b")]


def test_send_initial_events_ends_with_marked_bookmark(kube_emulator, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("a"))
    http = urllib3.PoolManager()
    r = http.request(
        "GET", f"{kube_emulator.url}/api/v1/namespaces/default/pods?watch=true&sendInitialEvents=true"
               "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1", timeout=30,
        headers={"Authorization": f"Bearer {kube_emulator.admin_token}"})
    events = [json.loads(line) for line in r.data.decode().splitlines() if line]
    http.clear()
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
