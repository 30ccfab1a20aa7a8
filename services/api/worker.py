"""The submission worker: durable queue → Tenancy → Pod, and pod phases → container status.

Two threads per API process:

* the *submitter* claims due ``Queued`` rows (``FOR UPDATE SKIP LOCKED`` on PostgreSQL,
  so replicas share the queue), brings the row's Tenancy to the database record (a watch of
  the Tenancies, :mod:`services.api.tenancy_watch`, says when it already is: no request then),
  waits (by rescheduling, never by blocking) until the Tenancy's ``status.phase`` is
  ``Ready``, then creates the pod. The pod name is derived from the container id and
  409 AlreadyExists counts as success, so a submission retried after a crash or an
  API restart can never produce a second pod. The rows of different tenancies move on side
  by side (``worker_concurrency`` threads, one tenancy each, its rows in order): a burst
  over many tenancies no longer waits for its pods to be made one at a time. Kubernetes
  being unreachable only reschedules the row with exponential backoff; it stays
  ``Queued`` until it works.
  It also deletes the pods of cancelled containers.
* the *watcher*, the one :class:`~core.kube.Informer`, lists then watches pods labelled
  ``gpucaas.dev/container-id`` and copies phase, node, GPU count, message and times into
  the container rows. After every (re)list (the first, after a 410, after a failure) it
  fails containers whose pod vanished without being cancelled.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session

from core import crds, kueue
from core.backoff import Backoff
from core.kube import Forbidden, Informer, Invalid, KubeError
from services.api.domain import endpoints, pods, reasons, sizing, tenant_secrets, volumes
from services.api.domain.models import Container, ContainerStatus, Tenancy, utcnow
from services.api.kube import Kube
from services.api.settings import Settings
from services.api.store import log_archive, retention, tenancies as tenancy_store, worker_state
from services.api.tenancy_watch import TenancyWatch
from services.api.usage.recorder import Recorder as UsageRecorder

log = logging.getLogger(__name__)

TENANCY_READY_POLL = 0.5


def _requeues(row: Container, pod: dict[str, Any]) -> bool:
    """Whether the pod's end puts the container back in the queue: the queue preempted it, and
    it asked for that (``restart_on_preemption``)."""
    return row.restart_on_preemption and reasons.preempted_by_queue(pod)


class SubmissionWorker:
    def __init__(self, *, engine: Engine, kube: Kube, settings: Settings, replica: str | None = None) -> None:
        self.engine = engine
        self.kube = kube
        self.settings = settings
        self.replica = replica or f"{socket.gethostname()}-{id(self):x}"[:64]
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._informer: Informer | None = None  # the watcher
        self._tenancies: TenancyWatch | None = None  # the Tenancies as last seen: no read before each pass's pods
        self._listing_started = utcnow()  # when the watcher's last listing began
        self.submitted = 0  # pods created by this replica (for metrics)
        self._submitted_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # the tenancies' rows side by side (run_once)
        self._pool_lock = threading.Lock()
        # containers whose endpoint objects this replica removed (a finished pod stays for its log)
        self._endpoints_removed: set[str] = set()
        # deleted pods whose usage finalizer a failed call left on: (namespace, name) -> finalizers read
        self._unreleased: dict[tuple[str, str], list[str]] = {}
        self.usage = UsageRecorder(engine=engine, kube=kube, gpu_resource=settings.gpu_resource)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        t = threading.Thread(target=self._submit_loop, name="gpucaas-submitter", daemon=True)
        t.start()
        self._threads.append(t)
        self._informer = self._pod_informer()
        if self._informer is not None:
            self._informer.start()
        if self.kube.adapter is not None:
            self._tenancies = TenancyWatch(self.kube.adapter).start()
        log.info("submission worker started (replica %s)", self.replica)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._informer is not None:
            self._informer.stop(timeout)
        if self._tenancies is not None:
            self._tenancies.stop(timeout)
        for t in self._threads:
            t.join(timeout)
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._release_claims()
        self._threads.clear()
        log.info("submission worker stopped (replica %s)", self.replica)

    def _release_claims(self) -> None:
        """Hand this replica's claimed rows back, once nothing of it can still be moving them
        (a pass that outlived the join keeps its claims until they run out)."""
        if any(t.is_alive() for t in self._threads):
            return
        try:
            with Session(self.engine) as session:
                released = worker_state.release_claims(session, replica=self.replica)
        except Exception:  # the claims run out on their own
            log.warning("could not hand back this replica's claims; they run out on their own", exc_info=True)
            return
        if released:
            log.info("handed back %d claimed submission(s)", released)

    def wake(self) -> None:
        """A new submission or cancellation was committed: look at the queue now."""
        self._wake.set()

    # -- submitter ------------------------------------------------------------------

    def _submit_loop(self) -> None:
        next_prune = time.monotonic()
        while not self._stop.is_set():
            try:
                busy = self.run_once()
            except Exception:  # e.g. database briefly unreachable
                log.exception("submission pass failed")
                busy = False
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.settings.retention_interval_seconds
                try:
                    retention.prune(self.engine, self.kube, days=self.settings.retention_days)
                    retention.prune_audit(self.engine, days=self.settings.audit_retention_days)
                except Exception:  # retried at the next interval
                    log.exception("retention pass failed")
            if not busy:
                self._wake.wait(self.settings.worker_poll_seconds)
                self._wake.clear()

    def run_once(self) -> bool:
        """One pass: reap cancelled pods, then submit what is due. True if it did anything."""
        did = self._push_tenancies()
        did = self._reap_cancelled() or did
        self._retry_releases()
        with Session(self.engine) as session:
            claimed = worker_state.claim_due(
                session, replica=self.replica, claim_seconds=self.settings.worker_claim_seconds
            )
        by_tenancy: dict[str, list[Container]] = {}
        for row in claimed:  # oldest first within each tenancy, as claimed
            by_tenancy.setdefault(row.tenancy, []).append(row)
        if len(by_tenancy) <= 1 or self.settings.worker_concurrency <= 1:
            for rows in by_tenancy.values():
                did = self._submit_tenancy(rows) or did
            return did
        pool = self._submit_pool()
        if pool is None:  # stopping: the rows stay claimed until their claim runs out, then any replica takes them
            return did
        try:
            for moved in pool.map(self._submit_tenancy, by_tenancy.values()):
                did = moved or did
        except CancelledError:  # stop() cancelled the tenancies not yet started: as above
            return True
        return did

    def _submit_pool(self) -> ThreadPoolExecutor | None:
        """The pool the tenancies' rows run in; None once stop() was called (a pass still
        running when stop() gave up on joining it must not make a pool nothing shuts down)."""
        with self._pool_lock:
            if self._stop.is_set():
                return None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.settings.worker_concurrency, thread_name_prefix="gpucaas-submit"
                )
            return self._pool

    def _submit_tenancy(self, rows: list[Container]) -> bool:
        """Move one tenancy's claimed rows on, in order. True if it did anything."""
        did = False
        ready_cache: dict[str, dict[str, Any]] = {}
        pull_cache: dict[str, list[str]] = {}  # tenancy -> its registry credentials, listed once a pass
        not_ready: dict[str, str] = {}  # tenancy -> why, found earlier in this pass
        unavailable: str | None = None  # Kubernetes did not answer: do not try the rest now
        for row in rows:
            if self._stop.is_set():
                break
            if unavailable is not None or row.tenancy in not_ready:
                with Session(self.engine) as session:
                    if unavailable is not None:
                        worker_state.reschedule(
                            session,
                            container_id=row.id,
                            delay=self._backoff(row.attempts),
                            message=unavailable,
                            count_attempt=True,
                        )
                    else:
                        worker_state.reschedule(
                            session,
                            container_id=row.id,
                            delay=TENANCY_READY_POLL,
                            message=not_ready[row.tenancy],
                            count_attempt=False,
                        )
                continue
            unavailable = self._submit(row, ready_cache, not_ready, pull_cache)
            did = True
        return did

    def _push_tenancies(self) -> bool:
        """Push every tenancy whose custom resource lags its row (a change made while Kubernetes
        did not answer): a quota or internet access changes in the cluster without waiting for
        the tenancy's next submission. True if it pushed any."""
        with Session(self.engine) as session:
            rows = tenancy_store.unpushed(session)
        pushed = False
        for row in rows:
            if self._stop.is_set():
                break
            try:
                push_tenancy(self.kube, self.settings, row, retry=False)
            except KubeError as exc:
                log.warning("tenancy %s: custom resource not upserted yet (%s)", row.name, exc)
                break  # Kubernetes does not answer: the next pass tries again
            self._pushed(row)
            pushed = True
        return pushed

    def _pushed(self, row: Tenancy) -> None:
        """Record ``row.revision`` as pushed, unless the row read says it already was (the push
        before each submission: no write on that path)."""
        if row.pushed_revision >= row.revision:
            return
        with Session(self.engine) as session:
            tenancy_store.mark_pushed(session, name=row.name, revision=row.revision)

    def _backoff(self, attempts: int) -> float:
        """Seconds before a row that failed ``attempts`` times (0 the first time) is tried again."""
        return Backoff(0.5, self.settings.retry_max_seconds).delay(attempts + 1)

    def _submit(
        self,
        row: Container,
        ready_cache: dict[str, dict[str, Any]],
        not_ready: dict[str, str],
        pull_cache: dict[str, list[str]],
    ) -> str | None:
        """Move one claimed row on; returns the queue message when Kubernetes did not answer."""
        ctx = f"container {row.id} tenancy {row.tenancy}"
        try:
            tenancy_cr = ready_cache.get(row.tenancy)
            if tenancy_cr is None:
                with Session(self.engine) as session:
                    tenancy = session.get(Tenancy, row.tenancy)
                if tenancy is None:
                    with Session(self.engine) as session:
                        worker_state.mark_failed(
                            session, container_id=row.id, message=f"tenancy {row.tenancy!r} was deleted"
                        )
                    return None
                body = tenancy_body(self.settings, tenancy)
                watched = self._tenancies.in_step(body) if self._tenancies is not None else None
                tenancy_cr = watched if watched is not None else self.kube.upsert_tenancy(body)
                self._pushed(tenancy)
                phase = (tenancy_cr.get("status") or {}).get("phase") or "Pending"
                if phase != "Ready":
                    message = (tenancy_cr.get("status") or {}).get("message")
                    text = f"waiting for tenancy {row.tenancy!r} to be Ready (phase {phase})"
                    not_ready[row.tenancy] = f"{text}: {message}" if message else text
                    with Session(self.engine) as session:
                        worker_state.reschedule(
                            session,
                            container_id=row.id,
                            delay=TENANCY_READY_POLL,
                            message=not_ready[row.tenancy],
                            count_attempt=False,
                        )
                    return None
                ready_cache[row.tenancy] = tenancy_cr
            pull_secrets, missing = self._tenant_secrets(row, pull_cache)
            missing = missing or self._missing_volumes(row)
            if missing:
                with Session(self.engine) as session:
                    worker_state.mark_failed(session, container_id=row.id, message=missing)
                return None
            body = pods.build_pod(
                container_id=row.id,
                tenancy=row.tenancy,
                image=row.image,
                gpus=row.gpus,
                command=row.command,
                args=row.args,
                env=row.env,
                timeout_seconds=row.timeout_seconds,
                nfs=(tenancy_cr.get("spec") or {}).get("nfs"),
                gpu_resource=self.settings.gpu_resource,
                allocation_mode=self.settings.allocation_mode,
                runtime_class=self.settings.runtime_class,
                run_as_user=self.settings.tenant_run_as_user,
                image_pull_secrets=pull_secrets,
                size=sizing.size_for(
                    self.settings.share, row.gpus, cpu=row.cpu, memory=row.memory, shm_size=row.shm_size
                ),
                volumes=row.volumes or (),
                name=row.pod_name,
                queue=kueue.LOCAL_QUEUE if self.settings.queueing == kueue.KUEUE else None,
                interruptible=row.interruptible,
                run=row.preemptions,
            )
            uid = self.kube.create_pod(body)
            created = uid is not None
            log.info(
                "%s: pod %s/%s %s",
                ctx,
                body["metadata"]["namespace"],
                body["metadata"]["name"],
                "created" if created else "already existed",
            )
            if row.ports:
                self._serve_endpoints(row, body["metadata"]["namespace"], body["metadata"]["name"], uid)
            with self._submitted_lock:
                self.submitted += created
            with Session(self.engine) as session:
                still_wanted = worker_state.mark_pod_created(session, container_id=row.id, pod_name=row.pod_name)
            if not still_wanted:  # cancelled while we were creating it
                self._delete_pod(row)
        except KubeError as exc:
            if isinstance(exc, Forbidden) and "exceeded quota" in str(exc):
                # the tenancy's ResourceQuota is full for now: wait in the queue, saying so
                with Session(self.engine) as session:
                    worker_state.reschedule(
                        session,
                        container_id=row.id,
                        delay=self._backoff(1),
                        message=f"waiting for quota: {exc}",
                        count_attempt=False,
                    )
                return None
            if isinstance(exc, Forbidden) and "error looking up service account" in str(exc):
                # a namespace just made: kube-controller-manager adds its default ServiceAccount
                # in a moment, and until then admission refuses every pod there
                return self._retry_later(row, ctx, exc)
            if not _rejected(exc):
                return self._retry_later(row, ctx, exc)
            log.warning("%s: Kubernetes rejected the submission: %s", ctx, exc)
            with Session(self.engine) as session:
                worker_state.mark_failed(session, container_id=row.id, message=f"Kubernetes rejected the pod: {exc}")
        except Exception as exc:  # anything unexpected: retry later
            log.exception("%s: unexpected error while submitting", ctx)
            return self._retry_later(row, ctx, exc)
        return None

    def _retry_later(self, row: Container, ctx: str, exc: Exception) -> str:
        delay = self._backoff(row.attempts)
        why = exc.summary() if isinstance(exc, KubeError) else str(exc)
        if isinstance(exc, Forbidden):  # RBAC: the platform's fault, not the tenant's; say which permission
            log.error("%s: %s; retry in %.1fs (grant it in the API's ClusterRole)", ctx, why, delay)
            message = f"queued: the API may not submit pods ({why}); retrying"
        else:
            log.warning("%s: Kubernetes unavailable (%s); retry in %.1fs", ctx, why, delay)
            message = f"queued: Kubernetes unavailable ({why}); retrying"
        with Session(self.engine) as session:
            worker_state.reschedule(session, container_id=row.id, delay=delay, message=message, count_attempt=True)
        return message

    def _tenant_secrets(self, row: Container, pull_cache: dict[str, list[str]]) -> tuple[list[str], str | None]:
        """The tenancy's registry credential Secrets (for imagePullSecrets; listed once per
        tenancy in a pass, its rows being submitted one after another), and why the container
        cannot start when its env names a secret that does not exist."""
        ns = crds.tenant_namespace(row.tenancy)
        pull = pull_cache.get(row.tenancy)
        if pull is None:
            registry = self.kube.list_secrets_metadata(ns, tenant_secrets.selector(tenant_secrets.KIND_REGISTRY))
            pull = pull_cache[row.tenancy] = sorted(o["metadata"]["name"] for o in registry)
        refs = {k: v["secret"] for k, v in (row.env or {}).items() if isinstance(v, dict)}
        if not refs:
            return pull, None
        have = {
            tenant_secrets.public_secret(o)["name"]
            for o in self.kube.list_secrets_metadata(ns, tenant_secrets.selector(tenant_secrets.KIND_SECRET))
        }
        gone = sorted(f"env.{k}: secret {v!r} not found" for k, v in refs.items() if v not in have)
        if gone:
            return pull, "; ".join(gone) + " (create it with POST /v1/secrets, then submit again)"
        return pull, None

    def _missing_volumes(self, row: Container) -> str | None:
        """Why the container cannot start when a volume it mounts no longer exists."""
        names = volumes.mounts_of(row.volumes)
        if not names:
            return None
        ns = crds.tenant_namespace(row.tenancy)
        have = {volumes.public_volume(o)["name"] for o in self.kube.list_pvcs(ns, volumes.selector())}
        gone = [f"volumes: volume {n!r} not found" for n in names if n not in have]
        return "; ".join(gone) + " (create it with POST /v1/volumes, then submit again)" if gone else None

    def _serve_endpoints(self, row: Container, namespace: str, pod: str, uid: str | None) -> None:
        """The Service, Ingresses and network policy of the container's ports, owned by its pod
        (``uid``: None when the pod existed already; a retried submission finds them made: each
        create is idempotent)."""
        if not uid:
            uid = (self.kube.get_pod(namespace, pod).get("metadata") or {}).get("uid")
        objects = endpoints.objects(
            row.id,
            row.tenancy,
            row.ports or (),
            self.settings.endpoint_config,
            owner={"name": pod, "uid": uid} if uid else None,
        )
        made = self.kube.apply_endpoint_objects(objects)
        log.info(
            "container %s tenancy %s: %d endpoint objects made for ports %s",
            row.id,
            row.tenancy,
            made,
            ",".join(str(p["port"]) for p in row.ports or ()),
        )

    def _remove_endpoints(self, container_id: str, tenancy: str) -> None:
        """Stop serving a container's ports once it has ended (once per replica; best effort:
        the garbage collector removes them with the pod in any case)."""
        if container_id in self._endpoints_removed:
            return
        try:
            gone = self.kube.delete_endpoint_objects(endpoints.object_refs(container_id, tenancy))
        except KubeError as exc:
            log.warning("container %s: endpoint objects not removed yet (%s); will retry", container_id, exc)
            return
        self._endpoints_removed.add(container_id)
        if gone:
            log.info("container %s tenancy %s: %d endpoint objects removed", container_id, tenancy, gone)

    def _delete_pod(self, row: Container) -> None:
        try:
            last = self.kube.delete_pod(crds.tenant_namespace(row.tenancy), row.pod_name)
        except KubeError as exc:
            log.warning("container %s: pod delete failed (%s); will retry", row.id, exc)
            with Session(self.engine) as session:
                worker_state.mark_pod_deleted(session, container_id=row.id, deleted=False)
            return
        if last is not None:
            # the run ends: at the container's own end if the pod had one (the watch, down
            # while the kubelet reported it, may never see it), else now
            self.usage.observe(last, deleted=True)
            self.usage.pod_deleted(row.id, when=utcnow())
        with Session(self.engine) as session:
            worker_state.mark_pod_deleted(session, container_id=row.id)
        log.info("container %s tenancy %s: pod %s deleted (cancelled)", row.id, row.tenancy, row.pod_name)

    def _keep_log(self, container_id: str, tenancy: str, pod: str, *, run: int | None = None) -> None:
        """Copy the tail of the pod's log into the database (best effort: a pod that never
        started has none, and a failed read is retried on the next event or relist), as the
        last run's, or (``run``) as that earlier run's."""
        try:
            resp = self.kube.pod_log(crds.tenant_namespace(tenancy), pod)
        except KubeError as exc:
            log.info("container %s: no log kept (%s)", container_id, exc)
            return
        try:
            text = resp.data.decode(errors="replace")
        finally:
            resp.release_conn()
        if log_archive.container_gone(text):  # what was kept before (a snapshot) stays
            log.info("container %s: no log kept (the node no longer has its container)", container_id)
            return
        with Session(self.engine) as session:
            log_archive.keep(
                session,
                container_id=container_id,
                tenancy=tenancy,
                text=text,
                max_bytes=self.settings.log_archive_bytes,
                run=run,
            )
        log.info("container %s tenancy %s: kept %d bytes of log", container_id, tenancy, len(text.encode()))

    def _reap_cancelled(self) -> bool:
        with Session(self.engine) as session:
            rows = list(worker_state.cancelled_with_pods(session))
        for row in rows:
            if self._stop.is_set():
                break
            if row.pod_created:
                self._keep_log(row.id, row.tenancy, row.pod_name)
            if row.ports:
                self._remove_endpoints(row.id, row.tenancy)
            self._delete_pod(row)
        return False  # retries of failed deletes wait for the next poll

    # -- watcher --------------------------------------------------------------------

    def _pod_informer(self) -> Informer | None:
        """The pods labelled ``gpucaas.dev/container-id``, listed then watched; None without a
        Kubernetes configuration (the API runs, and reports Kubernetes unavailable)."""
        adapter = self.kube.adapter
        if adapter is None:
            log.warning("no pod watch: Kubernetes is not configured")
            return None
        return Informer(
            adapter,
            "/api/v1/pods",
            query=[("labelSelector", crds.LABEL_CONTAINER)],
            name="pod watch",
            before_list=self._listing_begins,
            on_list=self._listed,
            on_event=self._watched,
            backoff=Backoff(0.5, self.settings.retry_max_seconds, jitter=0.5),
        )

    def _listing_begins(self) -> None:
        self._listing_started = utcnow()

    def _watched(self, kind: str, pod: dict[str, Any]) -> None:
        self._apply(pod, deleted=kind == "DELETED")
        if kind != "DELETED":
            self._release(pod)

    def _listed(self, items: list[dict[str, Any]]) -> None:
        """Every pod of the listing applied; then what vanished since the last one (deleted while
        nobody watched) ends: its usage run, and a container still running, failed."""
        present: set[str] = set()
        for pod in items:
            cid = self._apply(pod, deleted=False)
            self._release(pod)
            if cid:
                present.add(cid)
        started = self._listing_started
        self.usage.close_vanished(present=present, before=started)
        with Session(self.engine) as session:
            for row in worker_state.running_without_pod(session, present=present, before=started):
                worker_state.mark_failed(session, container_id=row.id, message="pod disappeared")
                log.warning("container %s tenancy %s: pod disappeared", row.id, row.tenancy)

    def _release(self, pod: dict[str, Any]) -> None:
        """Let a deleted pod go once it says no more, its last state just recorded (:meth:`_apply`).

        ``deletionGracePeriodSeconds`` 0 is the point where Kubernetes would remove the pod but
        for ``gpucaas.dev/usage``: the kubelet has reported the containers' end and deleted it,
        or the pod never ran on a node, had already ended, or was force-deleted."""
        meta = pod.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if (
            crds.FINALIZER_POD_USAGE not in finalizers
            or not meta.get("deletionTimestamp")
            or meta.get("deletionGracePeriodSeconds") != 0
        ):
            return
        self._try_release((str(meta.get("namespace")), str(meta.get("name"))), finalizers)

    def _try_release(self, key: tuple[str, str], finalizers: list[str], *, level: int = logging.WARNING) -> bool:
        """Take the finalizer off; a failed call is kept for the next pass. False when it failed."""
        try:
            self.kube.release_pod(*key, finalizers)
        except KubeError as exc:
            log.log(level, "pod %s/%s: usage finalizer not removed yet (%s); will retry", *key, exc)
            self._unreleased[key] = finalizers
            return False
        self._unreleased.pop(key, None)
        return True

    def _retry_releases(self) -> None:
        """The releases a failed call left, tried again (a pod changed since is left to its event)."""
        for key, finalizers in list(self._unreleased.items()):
            if self._stop.is_set() or not self._try_release(key, finalizers, level=logging.INFO):
                return  # stopping, or Kubernetes does not answer: the next pass

    def _apply(self, pod: dict[str, Any], *, deleted: bool) -> str | None:
        meta = pod.get("metadata") or {}
        cid = (meta.get("labels") or {}).get(crds.LABEL_CONTAINER)
        if not cid:
            return None
        with Session(self.engine) as session:
            current = session.get(Container, cid)
        name = meta.get("name")
        if current is not None and name and name != current.pod_name:
            # an earlier attempt's pod: refused by its node, or an earlier run the queue preempted
            # (the container has a newer one): not its state, but an earlier run's end is metered
            self.usage.observe(pod, deleted=deleted, row=current)
            if not deleted and not meta.get("deletionTimestamp"):
                self._delete_attempt(current, name)
            return cid
        if not deleted and current is not None and self._retry_refused(current, pod):
            return cid
        self.usage.observe(pod, deleted=deleted, row=current)
        if current is not None and name and self._requeue_preempted(current, pod, name, deleted=deleted):
            return cid
        if deleted:
            with Session(self.engine) as session:
                row = session.get(Container, cid)
                if row is not None and row.status in (ContainerStatus.PENDING, ContainerStatus.RUNNING):
                    report = pods.container_status_from_pod(pod, self.settings.gpu_resource)
                    if report.status in (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED):
                        worker_state.apply_pod_report(session, container_id=cid, report=report, pod_name=name)
                    else:  # it never ran to its end: Kueue's preemption says why, else someone deleted it
                        message = reasons.stopped_by_queue(pod) or reasons.POD_DELETED
                        worker_state.mark_failed(
                            session, container_id=cid, message=message, pod_name=name, reason=report.reason
                        )
            return cid
        # Nothing above wrote this row (each step that does returns): the read at the top is
        # its state. A change another thread makes meanwhile (a cancellation) is guarded by the
        # report's conditional update, as it would be after a second read.
        row = current
        if row is not None and row.status == ContainerStatus.CANCELLED:
            if not meta.get("deletionTimestamp"):
                # a live pod of a cancelled container (e.g. created late by a crashed replica)
                self._keep_log(row.id, row.tenancy, row.pod_name)
                self._delete_pod(row)
            return cid
        with Session(self.engine) as session:
            report = pods.container_status_from_pod(pod, self.settings.gpu_resource)
            if worker_state.apply_pod_report(session, container_id=cid, report=report, pod_name=name):
                log.info("container %s: %s on %s", cid, report.status, report.node_name or "-")
            finished = report.status in (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED)
            # A pod the queue stops is deleted by it, and its node may remove the container as soon
            # as it has ended: its log is kept once while it stops (a snapshot), then read again at
            # its end, when the node still has it. (A run that goes back in the queue keeps its
            # own: _requeue_preempted.)
            stopping = reasons.stopped_by_queue(pod) is not None and not (row is not None and _requeues(row, pod))
            keep = False
            if row is not None and (finished or stopping):
                keep = log_archive.get(session, container_id=cid) is None or (finished and stopping)
        if keep and row is not None:
            self._keep_log(cid, row.tenancy, row.pod_name)
        if finished and row is not None and row.ports:
            self._remove_endpoints(cid, row.tenancy)
        return cid

    def _requeue_preempted(self, row: Container, pod: dict[str, Any], name: str, *, deleted: bool) -> bool:
        """A container that asked for it (``restart_on_preemption``) whose run the queue preempted
        goes back in the queue for its next run, in a new pod, once this one has ended (its
        process gone: a terminal report, or the pod deleted). True when the pod was handled here."""
        if row.status not in (ContainerStatus.PENDING, ContainerStatus.RUNNING) or not _requeues(row, pod):
            return False
        ended_run = row.preemptions + 1
        report = pods.container_status_from_pod(pod, self.settings.gpu_resource)
        if not deleted and report.status not in (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED):
            # still stopping (SIGTERM, its grace period): its end comes next. Its log so far is kept
            # once now: the node may remove the container as soon as it has ended (Kueue deletes the pod)
            with Session(self.engine) as session:
                snapshot = log_archive.get(session, container_id=row.id, run=ended_run) is None
            if snapshot:
                self._keep_log(row.id, row.tenancy, name, run=ended_run)
            return False
        cause = reasons.stopped_by_queue(pod) or "Preempted by the queue"
        run = ended_run + 1
        message = f"{cause}; back in the queue for run {run}"
        upcoming = pods.pod_name(row.id, pods.attempt_of(name, row.id) + 1)
        with Session(self.engine) as session:
            won = worker_state.requeue_preempted(
                session, container_id=row.id, pod_name=name, next_pod_name=upcoming, message=message
            )
        if won:
            log.info("container %s tenancy %s: preempted; queued again for run %d", row.id, row.tenancy, run)
            self.wake()
        if won and not deleted:  # the ended run's output, for ?attempt=<run> once its pod is gone
            self._keep_log(row.id, row.tenancy, name, run=ended_run)
        if not deleted and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._delete_attempt(row, name)  # Kueue deletes the pods it stops; an ended run's pod holds nothing
        return True

    def _retry_refused(self, row: Container, pod: dict[str, Any]) -> bool:
        """A pod its node refused before it started is made again, under the next attempt's
        name, ``pods.ADMISSION_RETRIES`` times at most; then the container fails with the
        kubelet's message. Refused: at admission (``UnexpectedAdmissionError``: the device
        plugin or the kubelet restarting, say; the pod fails), or at the container's start
        for a GPU quarantined after admission (the pod would stay Pending for ever).
        True when the pod was handled here."""
        if row.status not in (ContainerStatus.QUEUED, ContainerStatus.PENDING):
            return False  # before the checks: the claims' check reads the cluster
        why = pods.refused_at_admission(pod)
        stays_pending = False
        if why is None:
            why = pods.refused_before_start(pod) or self._claim_not_reserved(pod)
            stays_pending = why is not None
        if why is None:
            return False
        attempt = pods.attempt_of(row.pod_name, row.id)
        if attempt < 0:
            return False
        refusals = attempt - row.preemptions  # each run after a preemption took a pod name too
        if refusals >= pods.ADMISSION_RETRIES:
            if not stays_pending:
                return False  # the failed pod's report fails the container
            with Session(self.engine) as session:
                worker_state.mark_failed(
                    session,
                    container_id=row.id,
                    message=f"the node could not start it: {why}",
                    pod_name=row.pod_name,
                )
            log.warning("container %s tenancy %s: failed, the node could not start it", row.id, row.tenancy)
            self._delete_attempt(row, row.pod_name)
            return True
        upcoming = pods.pod_name(row.id, attempt + 1)
        delay = Backoff(self.settings.admission_retry_seconds, math.inf).delay(refusals + 1)
        message = (
            f"the node refused the pod ({why}); making another in {delay:.0f}s "
            f"({refusals + 1} of {pods.ADMISSION_RETRIES})"
        )
        with Session(self.engine) as session:
            won = worker_state.requeue_refused(
                session,
                container_id=row.id,
                pod_name=row.pod_name,
                next_pod_name=upcoming,
                message=message,
                delay=delay,
            )
        if won:
            log.warning("container %s tenancy %s: %s", row.id, row.tenancy, message)
        self._delete_attempt(row, row.pod_name)
        return True

    def _claim_not_reserved(self, pod: dict[str, Any]) -> str | None:
        """Why a bound DRA pod will never start: one of its claims is not reserved for it
        (:func:`pods.claim_not_reserved`). A read per event of a pod bound and not started yet
        (its binding, the kubelet's first status): none for the device-plugin mode's pods.

        The event may be late: a short container can have started and ended since, and the
        resourceclaim controller takes an ended pod's reservation back. So a claim found
        without the pod is a refusal only if the pod, read after the claim, is still bound and
        not started (:meth:`_still_before_start`)."""
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        for name in pods.bound_before_start_with_claims(pod):
            try:
                claim = self.kube.get_resource_claim(namespace, name)
            except KubeError as exc:  # the pod's next event asks again
                log.info("pod %s: its ResourceClaim %s not read (%s)", pod["metadata"].get("name"), name, exc)
                return None
            why = pods.claim_not_reserved(pod, claim) if claim is not None else None
            if why:
                return why if self._still_before_start(pod, name) else None
        return None

    def _still_before_start(self, pod: dict[str, Any], claim: str) -> bool:
        """The pod as Kubernetes has it now is the same pod, bound, Pending, not started and
        using ``claim``. A reservation is taken back only from a pod that has ended or is being
        deleted, so a pod read after its unreserved claim and still before its start was never
        reserved, not one whose run was missed."""
        meta = pod.get("metadata") or {}
        try:
            now = self.kube.get_pod(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        except KubeError as exc:  # gone, or unreachable: the pod's next event asks again
            log.info("pod %s: not read again (%s)", meta.get("name"), exc)
            return False
        same = (now.get("metadata") or {}).get("uid") == meta.get("uid")
        return same and claim in pods.bound_before_start_with_claims(now)

    def _delete_attempt(self, row: Container, name: str) -> None:
        """Delete an earlier attempt's pod: refused (it never ran) or a preempted run that has ended;
        it holds nothing but its name."""
        try:
            self.kube.delete_pod(crds.tenant_namespace(row.tenancy), name)
        except KubeError as exc:
            log.info("container %s: refused pod %s not deleted yet (%s)", row.id, name, exc)


def push_tenancy(kube: Kube, settings: Settings, row: Tenancy, *, retry: bool = True) -> dict[str, Any]:
    """Bring the tenancy's custom resource to ``row`` (the caller records ``row.revision`` as
    pushed); returns the resource. Raises :class:`KubeError` when Kubernetes did not take it."""
    return kube.upsert_tenancy(tenancy_body(settings, row), retry=retry)


def tenancy_body(settings: Settings, row: Tenancy) -> dict[str, Any]:
    """The Tenancy resource the record ``row`` stands for."""
    return pods.build_tenancy(
        name=row.name,
        gpu_quota=row.gpu_quota,
        pod_quota=row.pod_quota,
        guaranteed_gpus=row.guaranteed_gpus,
        weight=row.weight,
        allow_internet=row.allow_internet,
        nfs=row.nfs,
        share=settings.share,
        volumes=settings.volume_quota,
        revision=row.revision,
    )


def _rejected(exc: KubeError) -> bool:
    """A definite refusal of this submission (fail it), rather than an outage or RBAC gap (retry).

    422/400 (schema), 403 from admission (Pod Security, quota: no "User ... cannot" in the message)
    and other 4xx are final; 403 RBAC denials, 401, 404, 409 and Unavailable are retried.
    """
    if isinstance(exc, Invalid):
        return True
    if isinstance(exc, Forbidden):
        return not exc.is_rbac
    return type(exc) is KubeError and exc.status is not None and 400 <= exc.status < 500
