"""The watch's copy of a collection against a real kube-apiserver: it answers what it last saw,
and an owner's write until the watch brings that write, never an older state over a newer one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from core import kube as k
from core.kube import WatchedObjects
from devtools.waiting import wait_for

from .test_informer import _namespace

LABEL = {"watched": "test"}


def _data(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("data") or {}).get("v")


def test_the_copy_answers_an_owners_write_until_the_watch_brings_it_and_never_an_older_one(
    kubeconfig: Path, unique_name: Callable[[str], str]
) -> None:
    conn = k.KubeConnection(kubeconfig=kubeconfig)
    with k.Kube(conn) as kube, _namespace(kube, unique_name("watched")) as ns:
        path = f"/api/v1/namespaces/{ns}/configmaps"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": LABEL}}
        kube.request("POST", path, body=body)
        copy = WatchedObjects(k.RestKube(conn), path, query=[("labelSelector", "watched=test")], name="cm").start()
        try:
            wait_for(lambda: copy.get("c") is not None, what="the configmap in the copy")

            def put(value: str) -> dict[str, Any]:
                live = kube.request("GET", f"{path}/c")
                return kube.request("PUT", f"{path}/c", body={**live, "data": {"v": value}})

            # a write the watch has already brought: reporting it changes nothing
            first = put("1")
            wait_for(lambda: _data(copy.get("c")) == "1", what="the first write seen")
            copy.wrote(first)
            second = put("2")  # another writer's, after it
            wait_for(lambda: _data(copy.get("c")) == "2", what="the second write seen")
            copy.wrote(first)  # reported late: older than what the copy holds, so ignored
            assert _data(copy.get("c")) == "2"
            assert [_data(o) for o in copy.objects() or []] == ["2"]

            # a write reported before its event: answered at once, then the watch's own copy
            third = put("3")
            copy.wrote(third)
            assert _data(copy.get("c")) == "3"
            wait_for(lambda: copy._written == {}, what="the watch bringing the write")
            assert copy.get("c")["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"]

            # forget: a write that met a conflict is dropped, the copy is what the watch says
            copy.wrote({**second, "metadata": {**second["metadata"], "resourceVersion": "1"}})
            assert copy.get("c")["metadata"]["resourceVersion"] == "1"
            copy.forget("c")
            assert _data(copy.get("c")) == "3"
        finally:
            copy.stop()
