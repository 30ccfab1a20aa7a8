"""``gpucaas controller``'s operator, built and run: one Kopf operator hosting the handlers of several services.

:func:`run` builds one registry from the given registrars, each a ``register(registry,
settings)`` function adding its handlers: this service's :func:`.handlers.register` by
default. The programs floor (``gpucaas/controller.py``) adds the GPU-lease timers
beside them, by import, so this service never imports another. All Kopf settings
(peering, event posting, persistence, backoff, watching) are set here in
:func:`configure_kopf`, and nowhere else.

Authentication: the core adapter (:mod:`core.kube`) loads the client
configuration (kubeconfig or in-cluster) once; Kopf's login handler hands the
same credentials to Kopf (``kopf_connection_info``), and modules find the
configuration in ``memo.kube_configuration`` to build their own clients.

The ClusterKopfPeering object is the chart's (templates/controller/peering.yaml);
the controller creates it only when it is missing and it may, and says so
clearly when it may not (403) instead of dying.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

import kopf
import kubernetes

from core import collector
from core.kube import kopf_connection_info, load_configuration

from . import errors, handlers, kube
from .settings import ControllerSettings

log = logging.getLogger(__name__)

#: A module's ``register(registry, settings)``: adds its handlers to the operator's registry.
Registrar = Callable[[kopf.OperatorRegistry, ControllerSettings], None]
#: This service's own handlers; ``gpucaas controller`` adds the GPU-lease timers (gpucaas/controller.py).
DEFAULT_REGISTRARS: tuple[Registrar, ...] = (handlers.register,)

#: Annotation prefix under which Kopf keeps its progress and last-handled state.
KOPF_ANNOTATION_PREFIX = "gpucaas.dev"
FINALIZER = "gpucaas.dev/controller"


def configure_kopf(ks: kopf.OperatorSettings, settings: ControllerSettings) -> None:
    """Every Kopf setting of the operator process, in one place."""
    ks.peering.name = settings.peering
    ks.peering.standalone = settings.standalone
    ks.peering.priority = settings.priority
    ks.peering.clusterwide = True
    ks.peering.mandatory = not settings.standalone
    ks.posting.enabled = settings.post_events
    ks.posting.level = logging.WARNING
    ks.persistence.finalizer = FINALIZER
    # Annotations only: our CRDs' status schemas hold no kopf field (it would be pruned).
    ks.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_ANNOTATION_PREFIX)
    ks.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    ks.execution.max_workers = settings.workers
    ks.networking.request_timeout = settings.request_timeout_s
    ks.networking.connect_timeout = min(5.0, settings.request_timeout_s)
    ks.watching.server_timeout = settings.watch_timeout_s
    ks.watching.client_timeout = settings.watch_timeout_s + 10
    ks.watching.reconnect_backoff = 1.0
    ks.batching.error_delays = (1, 2, 5, 10, 20, 30)


def build_registry(
    settings: ControllerSettings,
    registrars: Sequence[Registrar] = DEFAULT_REGISTRARS,
) -> kopf.OperatorRegistry:
    """A registry holding the handlers that every registrar adds."""
    registry = kopf.OperatorRegistry()
    for register in registrars:
        register(registry, settings)
        log.debug("registered handlers of %s", register.__module__)
    return registry


def watched_resources(registry: kopf.OperatorRegistry) -> list[tuple[str, str, str]]:
    """(group, version, plural) of every resource a handler of ``registry`` watches, indexes or times.

    Read from the registry itself, so that the start-up check covers whatever handlers a
    process hosts, including those another service registers."""
    found: list[tuple[str, str, str]] = []
    for kind in ("_indexing", "_watching", "_spawning", "_changing"):  # Kopf has no public listing
        for handler in getattr(registry, kind).get_all_handlers():
            sel = handler.selector
            if sel is None:
                continue
            resource = (sel.group or "", sel.version or "", sel.plural or sel.any_name or "")
            if resource not in found:
                found.append(resource)
    return found


PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings"


def ensure_peering_object(cfg: kubernetes.client.Configuration, settings: ControllerSettings) -> str:
    """Make sure the ClusterKopfPeering replicas meet in exists (Kopf only patches it, never creates it).

    The chart creates it; this reads it first (``get`` is granted) and creates it only when
    absent. Returns what happened; a 403 or an unreachable API is logged clearly and the
    controller goes on (Kopf then waits, paused, until the object appears).
    """
    client = kube.KubeClient(cfg, timeout=settings.request_timeout_s)
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": settings.peering}}
    try:
        try:
            client.request("GET", f"{PEERING_PATH}/{settings.peering}")
            return "present"
        except errors.NotFound:
            pass
        client.request("POST", PEERING_PATH, body=body)
        log.info("created ClusterKopfPeering %s", settings.peering)
        return "created"
    except errors.Conflict:
        return "present"
    except errors.Forbidden as exc:
        log.error(
            "ClusterKopfPeering %s: %s; the controller stays paused until the object exists "
            "(the Helm chart creates it: controller.peering.enabled) or run with --standalone",
            settings.peering,
            exc.summary(),
        )
        return "forbidden"
    except errors.NotFound:
        log.error(
            "the ClusterKopfPeering CRD (clusterkopfpeerings.kopf.dev) is not installed: "
            "the controller stays paused until it is (or run with --standalone)"
        )
        return "no-crd"
    except errors.KubeError as exc:
        log.error(
            "ClusterKopfPeering %s: %s; the controller starts anyway and retries through Kopf",
            settings.peering,
            exc.summary(),
        )
        return "unavailable"
    finally:
        client.close()


def check_access(
    cfg: kubernetes.client.Configuration, settings: ControllerSettings, registry: kopf.OperatorRegistry | None = None
) -> list[str]:
    """List (limit 1) every resource the handlers of ``registry`` watch; the problems, each logged as an error.

    Kopf would retry a refused watch forever with a terse message; this says once, at start,
    "forbidden: <user> cannot list <resource>" or "Kubernetes unreachable at <url>". Never fatal.
    Without ``registry``, the one this service's own handlers make.
    """
    kinds = watched_resources(registry if registry is not None else build_registry(settings))
    client = kube.KubeClient(cfg, timeout=settings.request_timeout_s)
    problems: list[str] = []
    try:
        for group, version, plural in kinds:
            path = f"/api/{version}/{plural}" if not group else f"/apis/{group}/{version}/{plural}"
            try:
                client.request("GET", path, query=[("limit", "1")])
            except errors.Unavailable as exc:
                problems.append(exc.summary())
                break  # one line is enough when nothing answers
            except errors.KubeError as exc:
                problems.append(f"{plural}: {exc.summary()}")
    finally:
        client.close()
    for problem in problems:
        log.error("at start: %s", problem)
    return problems


async def serve(
    settings: ControllerSettings,
    registrars: Sequence[Registrar] = DEFAULT_REGISTRARS,
    *,
    stop_flag: asyncio.Future[Any] | asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Future[Any] | asyncio.Event | threading.Event | None = None,
    identity: str | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or SIGINT/SIGTERM in the main thread)."""
    cfg = load_configuration(
        kube.connection(
            settings.kubeconfig,
            context=settings.context,
            timeout_s=settings.request_timeout_s,
            pool_size=settings.workers * 4,
        )
    )
    registry = build_registry(settings, registrars)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf_connection_info(cfg)

    check_access(cfg, settings, registry)
    if not settings.standalone:
        ensure_peering_object(cfg, settings)
    ks = kopf.OperatorSettings()
    configure_kopf(ks, settings)
    peer_id = identity or f"{socket.gethostname()}/{os.getpid()}"
    log.info(
        "controller starting: modules=%s peering=%s standalone=%s priority=%d identity=%s server=%s",
        ",".join(r.__module__ for r in registrars),
        settings.peering,
        settings.standalone,
        settings.priority,
        peer_id,
        cfg.host,
    )
    # Full collections walk only what the last one left alive, not every watched object
    # (core/collector.py: they paused every handler 150-320 ms with a few hundred tenancies).
    stop_freezing = collector.freeze_survivors()
    try:
        await kopf.operator(
            registry=registry,
            settings=ks,
            clusterwide=True,
            # peering name/standalone/priority come from configure_kopf (passing them here would
            # make peering mandatory even when standalone).
            liveness_endpoint=settings.liveness,
            identity=peer_id,  # type: ignore[arg-type]  # kopf's Identity is a NewType of str
            memo=kopf.Memo(settings=settings, kube_configuration=cfg, identity=peer_id),
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        stop_freezing()


#: Kopf's own log says only warnings, and peering (pause/resume matter), unless at DEBUG
#: (``core.logging.configure_logging``'s ``quieter``, from the command)
KOPF_LOG_LEVELS = {"kopf": logging.WARNING, "kopf._core.engines.peering": logging.INFO}


def run(settings: ControllerSettings, registrars: Sequence[Registrar] = DEFAULT_REGISTRARS) -> None:
    """Run the operator until SIGINT/SIGTERM."""
    log.info("effective settings: %s", settings.model_dump_json())
    asyncio.run(serve(settings, registrars))
