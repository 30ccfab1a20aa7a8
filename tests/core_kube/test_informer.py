"""The one informer against a real kube-apiserver: list, watch, resume, relist on 410 Gone, survive
a kube-apiserver that goes away mid-watch and a handler that raises, and stop when told; and
against the scripted server, the order of its requests and its owner's ``before_list``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from core import kube as k
from core.backoff import Backoff
from core.kube.informer import Informer

FAST = Backoff(initial_s=0.1, max_s=0.5)


class Seen:
    """What an informer handed over: names listed and events, with a condition to wait on."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.events: list[tuple[str, str]] = []
        self.cond = threading.Condition()

    def on_list(self, items: list[dict[str, Any]]) -> None:
        with self.cond:
            self.names = {i["metadata"]["name"] for i in items}
            self.cond.notify_all()

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        with self.cond:
            name = obj["metadata"]["name"]
            self.events.append((kind, name))
            (self.names.discard if kind == "DELETED" else self.names.add)(name)
            self.cond.notify_all()

    def wait(self, check: Callable[[], bool], timeout: float = 30.0) -> None:
        with self.cond:
            assert self.cond.wait_for(check, timeout), f"not seen in {timeout}s: {self.names} {self.events}"


def _configmap(kube: k.Kube, ns: str, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"informer": "test"}}}
    kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body=body)


@contextmanager
def _namespace(kube: k.Kube, name: str) -> Iterator[str]:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    kube.request("POST", "/api/v1/namespaces", body=body)
    try:
        yield name
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{name}")


def _informer(kube: k.KubeAdapter, ns: str, seen: Seen, cls: type[Informer] = Informer, **kw: Any) -> Informer:
    return cls(
        kube,
        f"/api/v1/namespaces/{ns}/configmaps",
        query=[("labelSelector", "informer=test")],
        on_list=seen.on_list,
        on_event=seen.on_event,
        backoff=Backoff(FAST.initial_s, FAST.max_s),
        **kw,
    )


@pytest.mark.parametrize("light", [False, True], ids=["Kube", "RestKube"])
def test_lists_then_watches_and_resumes_after_the_server_ends_the_watch(
    kubeconfig: Path, unique_name: Callable[[str], str], light: bool
) -> None:
    conn = k.KubeConnection(kubeconfig=kubeconfig)
    with k.Kube(conn) as kube, _namespace(kube, unique_name("informer")) as ns:
        _configmap(kube, ns, "before")
        seen = Seen()
        adapter: k.KubeAdapter = k.RestKube(conn) if light else kube
        informer = _informer(adapter, ns, seen, watch_timeout_s=1).start()
        try:
            assert informer.synced.wait(30)
            seen.wait(lambda: seen.names == {"before"})
            assert informer.watching.wait(30)
            time.sleep(2.5)  # the server has ended the 1 s watch at least once: watched again from its rv
            _configmap(kube, ns, "after")
            seen.wait(lambda: ("ADDED", "after") in seen.events)
            kube.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/before")
            seen.wait(lambda: ("DELETED", "before") in seen.events)
            assert informer.relists == 1 and informer.failures == 0
        finally:
            informer.stop()
        assert not informer._thread or not informer._thread.is_alive()
        assert not informer.watching.is_set()


def _listing(rv: str, *names: str) -> dict[str, Any]:
    items = [{"metadata": {"name": n}} for n in names]
    return {"kind": "ConfigMapList", "metadata": {"resourceVersion": rv}, "items": items}


def test_410_gone_in_the_watch_lists_again_and_before_list_runs_before_each_listing(scripted: Any) -> None:
    gone = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410, "message": "too old resource"}
    outage = {"kind": "Status", "status": "Failure", "code": 503, "message": "etcd leader changed"}
    srv = scripted(
        [
            (200, _listing("1", "one")),
            (200, [{"type": "ERROR", "object": gone}]),
            (200, _listing("5", "one", "two")),
            (503, outage),  # from here on every watch is refused: tried again after the backoff
        ]
    )
    announced: list[int] = []  # how many requests the server had had when before_list ran
    seen = Seen()
    path = "/api/v1/namespaces/default/configmaps"
    with k.RestKube(k.KubeConnection(server=srv.url)) as kube:
        informer = Informer(
            kube,
            path,
            on_list=seen.on_list,
            on_event=seen.on_event,
            before_list=lambda: announced.append(len(srv.requests)),
            backoff=Backoff(FAST.initial_s, FAST.max_s),
        ).start()
        try:
            seen.wait(lambda: seen.names == {"one", "two"})
        finally:
            informer.stop()
    assert announced == [0, 2]  # before the first listing, and before the one after the 410
    assert informer.relists == 2 and informer.expired == 1 and seen.events == []
    first_watch = srv.requests[1]
    assert first_watch.startswith(f"{path}?watch=1&resourceVersion=1&allowWatchBookmarks=true")
    assert srv.requests[2] == path  # listed from scratch, not watched from the expired resourceVersion
    assert all(r.startswith(f"{path}?watch=1&resourceVersion=5&") for r in srv.requests[3:])


@pytest.fixture
def uncached_cluster(tmp_path: Path) -> Iterator[Any]:
    """A cluster of the test's own whose kube-apiserver serves watches from etcd (no watch cache,
    which would answer an old revision from its own copy): compacting etcd makes them 410 Gone."""
    from devtools.local_cluster import ClusterOptions, LocalCluster

    options = ClusterOptions(
        unsafe_no_fsync=True,
        run_scheduler=False,
        run_controller_manager=False,
        audit_policy=None,
        apiserver_args=["--watch-cache=false"],
    )
    cluster = LocalCluster(tmp_path / "cluster", options).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_resource_version_compacted_away_is_410_gone_and_lists_again(uncached_cluster: Any) -> None:
    import subprocess

    cluster = uncached_cluster
    with k.Kube(k.KubeConnection(kubeconfig=cluster.admin_kubeconfig)) as kube:

        class CompactedBeforeItsWatch(Informer):
            """Between its first listing and its watch, changes are made and etcd compacted past the
            revision after the listing's, as for a watch resumed after a long outage."""

            def _list(self) -> str:
                rv = super()._list()
                if self.relists == 1:
                    _configmap(kube, "default", "two")
                    kube.request("DELETE", "/api/v1/namespaces/default/configmaps/two")  # "two" compacted too
                    _configmap(kube, "default", "two")
                    latest = kube.request("GET", "/api/v1/namespaces")["metadata"]["resourceVersion"]
                    etcdctl = str(cluster.bin_dir / "etcdctl")
                    subprocess.run([etcdctl, "--endpoints", cluster.etcd_url, "compaction", latest], check=True)
                return rv

        _configmap(kube, "default", "one")
        seen = Seen()
        informer = _informer(kube, "default", seen, CompactedBeforeItsWatch).start()
        try:
            seen.wait(lambda: informer.relists >= 2)
            assert informer.expired == 1
            assert seen.names == {"one", "two"}  # "two" from the second listing
            _configmap(kube, "default", "three")
            seen.wait(lambda: ("ADDED", "three") in seen.events)
        finally:
            informer.stop()


def test_a_handler_that_raises_is_said_and_the_collection_listed_again(
    kubeconfig: Path, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    # a read timeout well under the watch's: a connection given back to the pool mid-watch would
    # make the client's next request wait behind the stream, and time out
    conn = k.KubeConnection(kubeconfig=kubeconfig, read_timeout_s=10.0)
    with k.Kube(conn) as kube, _namespace(kube, unique_name("informer")) as ns:
        seen = Seen()
        raised: list[str] = []

        def flaky(kind: str, obj: dict[str, Any]) -> None:
            if not raised:
                raised.append(obj["metadata"]["name"])
                raise RuntimeError("a bug in the owner's handler")
            seen.on_event(kind, obj)

        informer = Informer(
            kube,
            f"/api/v1/namespaces/{ns}/configmaps",
            query=[("labelSelector", "informer=test")],
            on_list=seen.on_list,
            on_event=flaky,
            backoff=Backoff(FAST.initial_s, FAST.max_s),
        ).start()
        try:
            assert informer.synced.wait(30)
            _configmap(kube, ns, "lost-event")
            seen.wait(lambda: "lost-event" in seen.names)  # from the second listing
            assert informer.relists == 2 and informer.failures == 1
            assert "a bug in the owner's handler" in caplog.text
            _configmap(kube, ns, "after-the-failure")  # the client's own requests still answer
        finally:
            informer.stop()


def test_kube_apiserver_going_away_mid_watch_is_waited_out(own_cluster: Any) -> None:
    conn = k.KubeConnection(kubeconfig=own_cluster.kubeconfig, connect_timeout_s=1.0, read_timeout_s=5.0)
    with k.Kube(conn) as kube:
        seen = Seen()
        informer = _informer(kube, "default", seen).start()
        try:
            assert informer.synced.wait(30)
            _configmap(kube, "default", "before")
            seen.wait(lambda: ("ADDED", "before") in seen.events)
            own_cluster.stop_apiserver()
            deadline = time.monotonic() + 30
            while informer.failures < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert informer.failures >= 2, "the cut watch was not noticed"
            own_cluster.start_apiserver()
            deadline = time.monotonic() + 60
            while True:
                try:
                    _configmap(kube, "default", "after")
                    break
                except k.Unavailable:
                    assert time.monotonic() < deadline, "kube-apiserver did not come back"
                    time.sleep(0.5)
            seen.wait(lambda: ("ADDED", "after") in seen.events, timeout=60)
        finally:
            informer.stop()
        assert not informer._thread or not informer._thread.is_alive()
