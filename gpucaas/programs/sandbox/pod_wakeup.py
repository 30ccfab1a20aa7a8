"""A pod watch used only as a wake-up hint by the sandbox's stand-in control loops.

The scheduler and the resourceclaim controller each run a full pass on a timer; any pod
event wakes them early, as kube-scheduler's and kube-controller-manager's informers do.
The events themselves are not read: the next pass lists what it needs.
"""

from __future__ import annotations

import logging
import threading
import time

from kubernetes import client, watch

log = logging.getLogger(__name__)


def wake_on_pod_events(core: client.CoreV1Api, wake: threading.Event, stop: threading.Event) -> None:
    """Set ``wake`` on every pod event in the cluster until ``stop`` is set (run in a thread)."""
    while not stop.is_set():
        try:
            w = watch.Watch()
            for _ in w.stream(core.list_pod_for_all_namespaces, timeout_seconds=30):
                wake.set()
                if stop.is_set():
                    w.stop()
        except Exception as exc:  # noqa: BLE001 (the watch is only a wake-up hint)
            log.debug("pod watch ended: %s", exc)
            time.sleep(1)


def start(core: client.CoreV1Api, wake: threading.Event, stop: threading.Event) -> threading.Thread:
    """:func:`wake_on_pod_events` on a daemon thread."""
    t = threading.Thread(target=wake_on_pod_events, args=(core, wake, stop), name="pod-wakeup", daemon=True)
    t.start()
    return t
