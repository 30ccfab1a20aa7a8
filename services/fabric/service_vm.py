"""The service VM under libvirt (the one adapter that imports ``libvirt``).

:class:`ServiceVM` owns one domain: it defines it from the XML builder (or
reuses an existing domain of the same name instead of duplicating it), starts
it, watches it and restarts it when it dies unasked, and stops it cleanly.

Watching is by polling ``virDomainGetState`` every ``watch_interval_s``, woken
early by libvirt lifecycle events (``use_events``: a "stopped"/"crashed" event of
our domain triggers the check at once). Polling stays the ground truth: it works
with every driver, survives a libvirtd restart (the connection is reopened, the
event callback registered again) and catches what no event reports (the domain
undefined behind our back is redefined). A crash -- QEMU killed,
guest panic with ``on_crash=destroy``, host OOM -- shows as ``shut off``; the
watcher restarts the domain after a backoff (``restart_backoff_initial_s``,
doubling up to ``restart_backoff_max_s``, reset once the VM stayed up
``restart_stable_s``) and then calls ``on_restarted`` so the fabric service
reconnects to the Fabric Manager inside and replays the active partitions.
"""

from __future__ import annotations

import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core import fabric_messages as fm
from core.backoff import Backoff
from services.fabric.domain_xml import DomainSpec, build_domain_xml, network_xml, spec_hash
from services.fabric.errors import ServiceVMError

log = logging.getLogger(__name__)


def _libvirt() -> Any:
    import libvirt

    global _quiet
    if not _quiet:
        # libvirt prints every error to stderr by default; ours are raised and logged instead.
        libvirt.registerErrorHandler(lambda *_: None, None)
        _quiet = True
    return libvirt


_quiet = False
_event_loop_lock = threading.Lock()
_event_loop_started = False


def _ensure_event_loop() -> None:
    """Run libvirt's default event loop in a daemon thread (once per process)."""
    global _event_loop_started
    libvirt = _libvirt()
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _event_loop_started = True


_STATE_NAMES = {
    0: "nostate",
    1: "running",
    2: "blocked",
    3: "paused",
    4: "shutdown",
    5: "shutoff",
    6: "crashed",
    7: "pmsuspended",
}
_RUNNING = {1, 2}  # running, blocked (idle vCPU)


@dataclass
class BackoffPolicy(Backoff):
    """The restart backoff (``delay(n)`` before restart ``n`` of a crash streak); a VM that stayed
    up ``stable_s`` ends the streak."""

    stable_s: float = 120.0


def with_uuid(xml: str, uuid: str) -> str:
    root = ET.fromstring(xml)
    for old in root.findall("uuid"):
        root.remove(old)
    el = ET.Element("uuid")
    el.text = uuid
    root.insert(1, el)
    return ET.tostring(root, encoding="unicode")


class ServiceVM:
    """Lifecycle of the Fabric Manager service VM domain."""

    def __init__(
        self,
        uri: str,
        spec: DomainSpec,
        template: str,
        *,
        watch_interval_s: float = 1.0,
        backoff: BackoffPolicy | None = None,
        stop_timeout_s: float = 30.0,
        on_restarted: Callable[[], None] | None = None,
        use_events: bool = True,
    ) -> None:
        self.uri = uri
        self.spec = spec
        self.xml = build_domain_xml(spec, template)
        self.watch_interval_s = watch_interval_s
        self.backoff = backoff or BackoffPolicy()
        self.stop_timeout_s = stop_timeout_s
        self.on_restarted = on_restarted
        self.restarts = 0
        self.reused = False
        self.message = ""
        self._conn: Any = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.use_events = use_events
        self._callback_id: int | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._streak = 0
        self._up_since: float | None = None
        self._last_id: int | None = None
        self._state = "unknown"

    # --- connection -----------------------------------------------------------------
    def _connection(self) -> Any:
        libvirt = _libvirt()
        with self._lock:
            if self._conn is not None:
                try:
                    if self._conn.isAlive():
                        return self._conn
                except libvirt.libvirtError:
                    pass
                self._close_conn()
            if self.use_events:
                _ensure_event_loop()  # before open: the connection delivers events from then on
            try:
                self._conn = libvirt.open(self.uri)
            except libvirt.libvirtError as exc:
                raise ServiceVMError(f"cannot connect to libvirt at {self.uri}: {exc}") from exc
            if self.use_events:
                try:
                    self._callback_id = self._conn.domainEventRegisterAny(
                        None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
                    )
                except libvirt.libvirtError as exc:
                    log.warning("libvirt lifecycle events unavailable (%s); polling only", exc)
            return self._conn

    def _on_lifecycle(self, _conn: Any, dom: Any, event: int, _detail: int, _opaque: Any) -> None:
        libvirt = _libvirt()
        if dom.name() == self.spec.name and event in (
            libvirt.VIR_DOMAIN_EVENT_STOPPED,
            libvirt.VIR_DOMAIN_EVENT_CRASHED,
        ):
            self._wake.set()

    def _close_conn(self) -> None:
        if self._conn is not None:
            if self._callback_id is not None:
                try:
                    self._conn.domainEventDeregisterAny(self._callback_id)
                except Exception:  # noqa: BLE001 - connection already dead
                    pass
                self._callback_id = None
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - already dead
                pass
            self._conn = None

    def _lookup(self) -> Any | None:
        libvirt = _libvirt()
        try:
            return self._connection().lookupByName(self.spec.name)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise ServiceVMError(f"looking up domain {self.spec.name}: {exc}") from exc

    # --- define / start / stop ------------------------------------------------------------
    def ensure_network(self) -> None:
        """For fm_channel=network: the isolated network exists and is active."""
        if self.spec.fm_channel != "network":
            return
        libvirt = _libvirt()
        conn = self._connection()
        try:
            net = conn.networkLookupByName(self.spec.fm_network)
        except libvirt.libvirtError:
            try:
                net = conn.networkDefineXML(network_xml(self.spec.fm_network))
                log.info("defined isolated network %s for the Fabric Manager API", self.spec.fm_network)
            except libvirt.libvirtError as exc:
                raise ServiceVMError(f"defining network {self.spec.fm_network}: {exc}") from exc
        try:
            if not net.isActive():
                net.create()
            net.setAutostart(True)
        except libvirt.libvirtError as exc:
            raise ServiceVMError(f"starting network {self.spec.fm_network}: {exc}") from exc

    def set_spec(self, spec: DomainSpec, template: str) -> None:
        """Change the definition; applied to the persistent domain now, to the VM at its next boot."""
        with self._lock:
            self.spec = spec
            self.xml = build_domain_xml(spec, template)
            self.ensure_defined()

    def ensure_defined(self) -> Any:
        """Define the domain, or reuse the existing one of the same name.

        An existing domain whose metadata hash matches is reused as is; one that
        differs gets its persistent definition updated (a running domain keeps
        running and picks the new definition up at its next start).
        """
        libvirt = _libvirt()
        dom = self._lookup()
        want = spec_hash(self.xml)
        xml = self.xml
        if dom is not None:
            have = spec_hash(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
            self.reused = True
            if have == want:
                log.info("reusing existing domain %s", self.spec.name)
                return dom
            log.warning(
                "domain %s exists with another definition (hash %s, want %s): redefining", self.spec.name, have, want
            )
            xml = with_uuid(self.xml, dom.UUIDString())  # same domain, new definition
        try:
            dom = self._connection().defineXML(xml)
        except libvirt.libvirtError as exc:
            raise ServiceVMError(f"defining domain {self.spec.name}: {exc}") from exc
        log.info(
            "defined domain %s (type %s, %d hostdevs)", self.spec.name, self.spec.domain_type, len(self.spec.hostdevs)
        )
        return dom

    def start(self) -> bool:
        """Define (or reuse) and start the domain if it is not running; idempotent.

        Returns True when the domain was booted now (the Fabric Manager in it is fresh).
        """
        libvirt = _libvirt()
        with self._lock:
            self._stopping = False
            self.ensure_network()
            dom = self.ensure_defined()
            state = dom.state()[0]
            booted = False
            if state == libvirt.VIR_DOMAIN_PAUSED:
                dom.resume()
            elif state not in _RUNNING:
                booted = True
                try:
                    dom.create()
                except libvirt.libvirtError as exc:
                    self.message = str(exc)
                    raise ServiceVMError(f"starting domain {self.spec.name}: {exc}") from exc
                log.info("started service VM %s (id %s)", self.spec.name, dom.ID())
            else:
                log.info("service VM %s already running (id %s)", self.spec.name, dom.ID())
            self._last_id = dom.ID()
            self._up_since = time.monotonic()
            self._state = "running"
            self.message = ""
            return booted

    def stop(self, *, timeout_s: float | None = None) -> None:
        """Shut the VM down (ACPI), destroying it after ``timeout_s``; stops the watcher first."""
        libvirt = _libvirt()
        self.stop_watch()
        with self._lock:
            self._stopping = True
            dom = self._lookup()
            if dom is None or dom.state()[0] not in (*_RUNNING, libvirt.VIR_DOMAIN_PAUSED):
                self._state = "shutoff"
                return
            try:
                dom.shutdown()
            except libvirt.libvirtError as exc:
                log.warning("shutdown of %s refused (%s); destroying", self.spec.name, exc)
            deadline = time.monotonic() + (self.stop_timeout_s if timeout_s is None else timeout_s)
            while time.monotonic() < deadline and dom.state()[0] in _RUNNING:
                time.sleep(0.2)
            if dom.state()[0] != libvirt.VIR_DOMAIN_SHUTOFF:
                try:
                    dom.destroy()
                except libvirt.libvirtError as exc:
                    raise ServiceVMError(f"destroying domain {self.spec.name}: {exc}") from exc
            self._state = "shutoff"
            log.info("service VM %s stopped", self.spec.name)

    def undefine(self) -> None:
        libvirt = _libvirt()
        dom = self._lookup()
        if dom is not None:
            if dom.isActive():
                dom.destroy()
            try:
                dom.undefine()
            except libvirt.libvirtError as exc:
                raise ServiceVMError(f"undefining {self.spec.name}: {exc}") from exc

    def close(self) -> None:
        self.stop_watch()
        with self._lock:
            self._close_conn()

    # --- state ------------------------------------------------------------------------------
    def state(self) -> fm.ServiceVMState:
        return {
            "state": self._state,
            "domain": self.spec.name,
            "restarts": self.restarts,
            "crash_streak": self._streak,
            "message": self.message,
        }

    def domain_id(self) -> int | None:
        dom = self._lookup()
        return dom.ID() if dom is not None and dom.isActive() else None

    # --- watching ---------------------------------------------------------------------------
    def start_watch(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._wake.clear()
        self._connection()  # registers the event callback before the first event can matter
        self._thread = threading.Thread(target=self._watch_loop, name=f"watch-{self.spec.name}", daemon=True)
        self._thread.start()

    def stop_watch(self) -> None:
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=max(self.watch_interval_s * 4, 10))
        self._thread = None

    def _watch_loop(self) -> None:
        while True:
            self._wake.wait(self.watch_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.check_once()
            except ServiceVMError as exc:
                self.message = str(exc)
                self._state = "unknown"
                log.warning("service VM watch: %s", exc)
                with self._lock:
                    self._close_conn()
            except Exception:
                log.exception("service VM watch failed")

    def check_once(self) -> bool:
        """One look at the domain; restart it if it died. Returns True when it was restarted."""
        libvirt = _libvirt()
        with self._lock:
            if self._stopping:
                return False
            dom = self._lookup()
            if dom is None:
                log.error("domain %s disappeared: redefining", self.spec.name)
                dom = self.ensure_defined()
                state, reason = libvirt.VIR_DOMAIN_SHUTOFF, 0
            else:
                state, reason = dom.state()
            if state in _RUNNING:
                now = time.monotonic()
                if self._up_since is not None and now - self._up_since >= self.backoff.stable_s:
                    self._streak = 0
                dom_id = dom.ID()
                changed = self._last_id is not None and dom_id != self._last_id
                self._last_id = dom_id
                self._state = "running"
                if not changed:
                    return False
                # Restarted by someone else (libvirt autostart, an operator): FM restarted too.
                log.warning("service VM %s restarted outside the watcher (id %s)", self.spec.name, dom_id)
                self._up_since = now
                self.restarts += 1
            elif state == libvirt.VIR_DOMAIN_PAUSED:
                self._state = "paused"
                return False
            elif state == libvirt.VIR_DOMAIN_SHUTDOWN:
                self._state = "shutting down"  # on its way to shut off: restart once it is there
                return False
            else:
                self._state = (
                    "crashed"
                    if state in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_CRASHED)
                    else _STATE_NAMES.get(state, str(state))
                )
                self._streak += 1
                delay = self.backoff.delay(self._streak)
                log.error(
                    "service VM %s is %s (reason %s); restarting in %.1fs (crash %d in a row)",
                    self.spec.name,
                    _STATE_NAMES.get(state, state),
                    reason,
                    delay,
                    self._streak,
                )
        if state not in _RUNNING:
            if self._stop.wait(delay):
                return False
            with self._lock:
                if self._stopping:
                    return False
                self._state = "restarting"
                try:
                    dom = self._lookup() or self.ensure_defined()
                    if not dom.isActive():
                        dom.create()
                except libvirt.libvirtError as exc:
                    self.message = f"restart failed: {exc}"
                    log.error("restarting %s failed: %s", self.spec.name, exc)
                    return False
                self.restarts += 1
                self._last_id = dom.ID()
                self._up_since = time.monotonic()
                self._state = "running"
                self.message = ""
                log.warning("service VM %s restarted (restart %d, id %s)", self.spec.name, self.restarts, self._last_id)
        if self.on_restarted is not None:
            try:
                self.on_restarted()
            except Exception as exc:
                self.message = f"after restart: {exc}"
                log.exception("after-restart hook failed")
        return True
