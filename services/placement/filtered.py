"""The pods kube-scheduler has just asked the extender to filter, kept until their bind.

kube-scheduler sends the whole pod with every filter call (``ExtenderArgs.Pod``, its own
cached copy) but only names it in the bind call (``ExtenderBindingArgs``). The bind needs the
pod (its GPUs, whether it is bound already): keeping the filtered copy by UID saves a GET of
the pod from kube-apiserver for every bind, the largest part of a bind's cost after the
Binding itself. A bind that finds no copy (an extender restarted between the two calls, or
another replica's filter) reads the pod as before. Bounded: the oldest copies go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

#: pods kept at most: more than kube-scheduler has between a filter and its bind
CAPACITY = 4096


class FilteredPods:
    """Thread-safe, bounded: pod UID -> the pod as the last filter call sent it."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._pods: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, pod: dict[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            return
        with self._lock:
            self._pods[uid] = pod
            self._pods.move_to_end(uid)
            while len(self._pods) > self.capacity:
                self._pods.popitem(last=False)

    def take(self, uid: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The kept copy of the pod with ``uid``, forgotten once taken (None: none kept, or
        one of another pod: a UID is the only key kube-scheduler's bind gives reliably)."""
        if not uid:
            return None
        with self._lock:
            pod = self._pods.pop(uid, None)
        meta = (pod or {}).get("metadata") or {}
        if pod is None or meta.get("namespace") != namespace or meta.get("name") != name:
            return None
        return pod

    def __len__(self) -> int:
        return len(self._pods)
