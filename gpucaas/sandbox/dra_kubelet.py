"""The kubelet's DRA side, played by the sandbox node agent over the real gRPC protocols.

Modelled on the kubelet (kubernetes ``pkg/kubelet/pluginmanager`` and ``pkg/kubelet/cm/dra``):

* **plugin watcher** (``pluginmanager/pluginwatcher``): the registration directory
  (``/var/lib/kubelet/plugins_registry``) is watched for sockets; for a new one the
  kubelet calls ``pluginregistration.v1.Registration/GetInfo``, hands a ``DRAPlugin`` to
  its DRA handler (which accepts it when it offers a service version it speaks,
  ``v1.DRAPlugin``), then answers ``NotifyRegistrationStatus``. A socket that disappears
  deregisters its plugin; one re-created (a restarted plugin) is registered again. The
  kubelet uses fsnotify; this stand-in polls the directory.
* **DRA manager** (``cm/dra/manager.go``, ``claiminfo.go``, ``state/checkpoint.go``):
  before a pod's containers start, each of its ``spec.resourceClaims`` is resolved (a
  ``resourceClaimName``, or the claim the resourceclaim controller generated, named in
  ``status.resourceClaimStatuses``), read, and checked: allocated, and reserved for this
  pod (``status.reservedFor`` holds its UID). The claims are grouped by driver and each
  driver gets one ``NodePrepareResources`` with the claims' namespace/UID/name; the CDI
  device ids it answers go to the container. The claim, the pods using it and the CDI ids
  are kept in a claim-info cache saved to a checkpoint file, so that after a restart the
  kubelet still knows what to unprepare. When the last pod using a claim ends,
  ``NodeUnprepareResources`` is called (from the cache: the claim may be gone by then).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc

from core.kube import Kube, NotFound
from services.dra_driver import api

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"
CHECKPOINT = "dra_manager_state.json"
#: The DRA service versions this kubelet speaks (manager.go: the v1 service since 1.34).
SUPPORTED_SERVICES = (api.DRA_SERVICE,)


class PrepareFailed(Exception):
    """A claim of the pod cannot be prepared (yet); the message is the kubelet's event text."""


@dataclass
class Plugin:
    driver: str
    endpoint: str
    registration_socket: str
    channel: grpc.Channel = field(repr=False)
    socket_id: tuple[int, int] = (0, 0)  # inode and mtime: a re-created socket is a new plugin

    def stub(self) -> Any:
        return api.dra_grpc.DRAPluginStub(self.channel)


@dataclass
class ClaimInfo:
    """One prepared claim (claiminfo.go): which pods use it and what each driver answered."""

    namespace: str
    name: str
    uid: str
    drivers: list[str]
    pods: list[str]  # pod UIDs
    cdi_ids: list[str]
    devices: list[str]  # "<driver>/<pool>/<device>"


def _socket_id(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_ino, st.st_mtime_ns)


def claim_name_of(pod: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """The ResourceClaim a pod's ``spec.resourceClaims`` entry stands for (None: not created yet).

    As ``resourceclaim.Name()`` in k8s.io/dynamic-resource-allocation: a direct
    ``resourceClaimName``, else the name the controller reported in the pod's status.
    """
    if entry.get("resourceClaimName"):
        return entry["resourceClaimName"]
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == entry.get("name"):
            return status.get("resourceClaimName")
    return None


class DraKubelet:
    """The DRA plugin watcher and manager of one node."""

    def __init__(
        self, kube: Kube, node_name: str, registry_dir: Path, state_dir: Path, poll_interval: float = 0.5
    ) -> None:
        self.kube = kube
        self.node = node_name
        self.registry_dir = Path(registry_dir)
        self.state_file = Path(state_dir) / CHECKPOINT
        self.poll_interval = poll_interval
        self.plugins: dict[str, Plugin] = {}
        self.claims: dict[str, ClaimInfo] = {}  # by claim UID
        self.pod_claims: dict[str, list[str]] = {}  # "<ns>/<pod>" -> claim UIDs
        self.registrations = 0
        self._retry_unprepare: set[str] = set()  # pods whose claims a driver could not unprepare yet
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._load()

    # --- checkpoint (state/checkpoint.go) ---------------------------------------------
    def _load(self) -> None:
        if not self.state_file.exists():
            return
        data = json.loads(self.state_file.read_text())
        self.claims = {c["uid"]: ClaimInfo(**c) for c in data.get("claims", [])}
        self.pod_claims = {k: list(v) for k, v in data.get("pods", {}).items()}
        log.info("DRA manager: %d prepared claim(s) restored from the checkpoint", len(self.claims))

    def _save(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"claims": [asdict(c) for c in self.claims.values()], "pods": self.pod_claims}, indent=1)
        )
        tmp.replace(self.state_file)

    # --- plugin watcher -----------------------------------------------------------------
    def scan(self) -> None:
        """One pass of the plugin watcher over the registration directory."""
        sockets = (
            {str(p): _socket_id(p) for p in self.registry_dir.glob("*.sock")} if self.registry_dir.is_dir() else {}
        )
        with self._lock:
            for driver, plugin in list(self.plugins.items()):
                if sockets.get(plugin.registration_socket) != plugin.socket_id:
                    log.info("DRA plugin %s deregistered (socket %s gone)", driver, plugin.registration_socket)
                    plugin.channel.close()
                    del self.plugins[driver]
                    self._changed.notify_all()
            known = {p.registration_socket for p in self.plugins.values()}
        for sock in sorted(set(sockets) - known):
            self._register(sock, sockets[sock])

    def _register(self, sock: str, socket_id: tuple[int, int]) -> None:
        try:
            with grpc.insecure_channel(f"unix://{sock}") as channel:
                reg = api.reg_grpc.RegistrationStub(channel)
                info = reg.GetInfo(api.reg_pb2.InfoRequest(), timeout=5)
                error = ""
                if info.type != api.PLUGIN_TYPE:
                    error = f"plugin type {info.type!r} is not handled by this kubelet stand-in"
                elif not set(info.supported_versions) & set(SUPPORTED_SERVICES):
                    error = (
                        f"none of the DRA services {list(info.supported_versions)} is supported "
                        f"(this kubelet speaks {list(SUPPORTED_SERVICES)})"
                    )
                reg.NotifyRegistrationStatus(
                    api.reg_pb2.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
                )
        except grpc.RpcError as exc:  # not serving yet: the next scan tries again
            log.debug("registration socket %s not answering: %s", sock, exc)
            return
        if error:
            log.warning("refused plugin at %s: %s", sock, error)
            return
        plugin = Plugin(info.name, info.endpoint, sock, grpc.insecure_channel(f"unix://{info.endpoint}"), socket_id)
        with self._lock:
            old = self.plugins.get(info.name)
            if old is not None:
                old.channel.close()
            self.plugins[info.name] = plugin
            self.registrations += 1
            self._changed.notify_all()
        log.info("DRA plugin %s registered (endpoint %s)", info.name, info.endpoint)

    def wait_for_plugin(self, driver: str, timeout: float) -> Plugin:
        with self._lock:
            if not self._changed.wait_for(lambda: driver in self.plugins or self._stop.is_set(), timeout):
                raise PrepareFailed(f"DRA driver {driver} is not registered on node {self.node}")
            if driver not in self.plugins:
                raise PrepareFailed("node agent stopping")
            return self.plugins[driver]

    def run_watcher(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
                for key in sorted(self._retry_unprepare):  # as the kubelet's pod workers retry
                    self.unprepare_pod(*key.split("/", 1))
            except Exception as exc:  # noqa: BLE001 (the watcher keeps watching)
                log.warning("plugin watcher pass failed: %s", exc)
            self._stop.wait(self.poll_interval)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._changed.notify_all()
            for p in self.plugins.values():
                p.channel.close()

    # --- DRA manager --------------------------------------------------------------------
    @staticmethod
    def has_claims(pod: dict[str, Any]) -> bool:
        return bool(pod.get("spec", {}).get("resourceClaims"))

    def _read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        claim = self.kube.call(
            self.kube.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            "resourceclaims",
            name,
            idempotent=True,
            what=f"read ResourceClaim {namespace}/{name}",
        )
        return cast("dict[str, Any]", claim)  # the custom-objects API answers plain JSON

    def prepare_pod(self, pod: dict[str, Any], plugin_timeout: float = 30.0) -> list[ClaimInfo]:
        """PrepareResources (manager.go): every claim of the pod prepared, or PrepareFailed."""
        md = pod["metadata"]
        key, pod_uid = f"{md['namespace']}/{md['name']}", md.get("uid", "")
        out: list[ClaimInfo] = []
        to_prepare: dict[str, list[dict[str, Any]]] = {}  # driver -> claims
        for entry in pod["spec"].get("resourceClaims") or []:
            name = claim_name_of(pod, entry)
            if name is None:
                raise PrepareFailed(f"claim {entry.get('name')!r} of the pod has not been created yet")
            try:
                claim = self._read_claim(md["namespace"], name)
            except NotFound:
                raise PrepareFailed(f"ResourceClaim {md['namespace']}/{name} not found") from None
            uid = claim["metadata"]["uid"]
            status = claim.get("status") or {}
            if not status.get("allocation"):
                raise PrepareFailed(f"ResourceClaim {name} is not allocated")
            if not any(r.get("uid") == pod_uid for r in status.get("reservedFor") or []):
                raise PrepareFailed(f"ResourceClaim {name} is not reserved for pod {key}")
            with self._lock:
                info = self.claims.get(uid)
                if info is not None:  # prepared already (another pod, or a restart): add this pod
                    if pod_uid not in info.pods:
                        info.pods.append(pod_uid)
                    out.append(info)
                    continue
            results = status["allocation"].get("devices", {}).get("results") or []
            drivers = sorted({r["driver"] for r in results})
            info = ClaimInfo(md["namespace"], name, uid, drivers, [pod_uid], [], [])
            out.append(info)
            for d in drivers:
                to_prepare.setdefault(d, []).append({"namespace": md["namespace"], "uid": uid, "name": name})
        prepared: dict[str, ClaimInfo] = {i.uid: i for i in out}
        for driver, claims in to_prepare.items():
            stub = self.wait_for_plugin(driver, plugin_timeout).stub()
            try:
                resp = stub.NodePrepareResources(
                    api.dra_pb2.NodePrepareResourcesRequest(claims=[api.dra_pb2.Claim(**c) for c in claims]), timeout=60
                )
            except grpc.RpcError as exc:
                raise PrepareFailed(
                    f"NodePrepareResources of driver {driver} failed: {exc.code().name}: {exc.details()}"
                ) from None
            for c in claims:
                answer = resp.claims.get(c["uid"])
                if answer is None:
                    raise PrepareFailed(f"driver {driver} did not answer for claim {c['name']}")
                if answer.error:
                    raise PrepareFailed(f"driver {driver} could not prepare claim {c['name']}: {answer.error}")
                info = prepared[c["uid"]]
                for dev in answer.devices:
                    info.cdi_ids.extend(dev.cdi_device_ids)
                    info.devices.append(f"{driver}/{dev.pool_name}/{dev.device_name}")
        with self._lock:
            for info in out:
                self.claims.setdefault(info.uid, info)
            self.pod_claims[key] = [i.uid for i in out]
            self._save()
        return out

    def unprepare_pod(self, namespace: str, name: str) -> list[str]:
        """UnprepareResources: claims no other pod uses are unprepared; returns their names.

        A driver that is not registered (restarting) leaves the claim in the cache, to be
        unprepared by a later call (the node agent retries on its relist).
        """
        key = f"{namespace}/{name}"
        done: list[str] = []
        with self._lock:
            uids = self.pod_claims.get(key)
            if uids is None:
                return done
            users = {u for k, us in self.pod_claims.items() if k != key for u in us}
        remaining: list[str] = []
        for uid in uids:
            info = self.claims.get(uid)
            if info is None:
                continue
            if uid in users:  # still used by another pod on this node
                continue
            ok = True
            for driver in info.drivers:
                plugin = self.plugins.get(driver)
                if plugin is None:
                    ok = False
                    break
                try:
                    resp = plugin.stub().NodeUnprepareResources(
                        api.dra_pb2.NodeUnprepareResourcesRequest(
                            claims=[api.dra_pb2.Claim(namespace=info.namespace, uid=uid, name=info.name)]
                        ),
                        timeout=60,
                    )
                    err = resp.claims[uid].error if uid in resp.claims else "no answer"
                except grpc.RpcError as exc:
                    err = f"{exc.code().name}: {exc.details()}"
                if err:
                    log.warning("NodeUnprepareResources of %s for claim %s failed: %s", driver, info.name, err)
                    ok = False
                    break
            if ok:
                with self._lock:
                    self.claims.pop(uid, None)
                done.append(info.name)
            else:
                remaining.append(uid)
        with self._lock:
            if remaining:
                self.pod_claims[key] = remaining
                self._retry_unprepare.add(key)
            else:
                self.pod_claims.pop(key, None)
                self._retry_unprepare.discard(key)
            self._save()
        return done

    def pods_with_claims(self) -> list[str]:
        with self._lock:
            return list(self.pod_claims)
