"""Kills named processes of a running sandbox and starts them again, as the chaos soak needs:
a control-plane component, a node's kubelet or containerd, or one of gpucaas's services.

A kill is SIGKILL (nothing is flushed, nothing said goodbye); the component stays down a
moment, is started again and waited for until it answers. Meanwhile :meth:`Killer.revive_loop`
does what a node's init system and Kubernetes would: whatever exits on its own is started
again and counted as a crash. One kill runs at a time, and never beside a revival.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmarks.kit.report import say

#: the control plane's components (``sb.cluster``)
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: a real node's (``sb.real_nodes[node]``)
NODE = ("kubelet", "containerd")
READY_WITHIN_S = 300.0


@dataclass
class Killer:
    """Kills each ``(seconds after started, component)`` of ``plan`` in turn (:meth:`run`).

    Components: those of :data:`CONTROL_PLANE` and :data:`NODE` (on a node drawn at random),
    ``api-replica`` (one drawn at random), ``controller``, and a drawn node's ``fabric``,
    ``device-plugin`` or ``dra-driver``. ``down_s``: how long it stays down, drawn uniformly.
    """

    sb: Any
    plan: list[tuple[float, str]]
    rng: random.Random
    down_s: tuple[float, float] = (0.5, 3.0)
    started: float = field(default_factory=time.monotonic)
    kills: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while a kill is under way
    done: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        try:
            for at, name in self.plan:
                time.sleep(max(0.0, self.started + at - time.monotonic()))
                try:
                    self.kill(name)
                except Exception as exc:  # noqa: BLE001 (a component that does not come back is a finding)
                    self.errors.append(f"{name}: {exc}")
                    say(f"killer: {name} did not come back: {exc}")
        finally:
            self.done.set()

    def _say(self, text: str) -> None:
        say(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def kill(self, name: str) -> None:
        sb = self.sb
        node = self.rng.choice(sorted(sb.real_nodes))
        down = self.rng.uniform(*self.down_s)
        with self.lock:
            if name in CONTROL_PLANE:
                self._say(f"kill -9 {name}; down {down:.1f}s")
                self._cycle(sb.cluster, name, down)
            elif name in NODE:
                self._say(f"kill -9 {name} on {node}; down {down:.1f}s")
                self._cycle(sb.real_nodes[node], name, down)
            else:
                service = {
                    "api-replica": self.rng.choice(["api", *(f"api-{i + 1}" for i in range(1, len(sb.api_urls)))]),
                    "controller": "controller",
                    "fabric": f"fabric-{node}",
                    "device-plugin": f"device-plugin-{node}",
                    "dra-driver": f"dra-driver-{node}",
                }[name]
                self._say(f"kill -9 {service}; down {down:.1f}s")
                self._cycle(sb.supervisor, service, down)
            self.kills[name] += 1
            self._say(f"{name} is back")

    @staticmethod
    def _cycle(group: Any, name: str, down: float) -> None:
        group.kill(name, signal.SIGKILL)
        time.sleep(down)
        group.bring_up(name, READY_WITHIN_S)

    def revive_loop(self, stop: threading.Event) -> None:
        """Until ``stop``: start again what exited on its own (a crash, counted)."""
        while not stop.wait(1.0):
            with self.lock:
                for group in (self.sb.supervisor, self.sb.cluster, *self.sb.real_nodes.values()):
                    for event in group.revive():
                        if event.restarted:
                            self.crashes[event.name] += 1
                            self._say(f"crash: {event.describe()}")
