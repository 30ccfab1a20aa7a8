"""Kopf handlers for ``gpucaas controller``: keep the warm-image DaemonSet equal to the WarmImages.

Level-triggered: every pass lists all WarmImages and builds the whole DaemonSet
(:mod:`.daemonset`), then creates, replaces or deletes it, or leaves it when its template
digest already matches. Passes run at start-up (an empty list then removes a DaemonSet left
from before), on every WarmImage event, and on a timer (drift repair), one at a time.

The chart's ``warmImages`` value reaches the controller as a setting (a new value restarts
its pod); at start-up and on each timer pass the controller makes the WarmImages of that list
(labelled ``gpucaas.dev/source=chart``, which the API will not remove) and removes the chart's
WarmImages the list no longer names. Keeping them as objects, not in a template of the
chart, lets a first ``helm install`` apply before the CRD exists, and gives ``kubectl get
warmimages`` and the API one list.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf
from kubernetes import client

from core import image_refs
from core.crds import (
    API_VERSION,
    GROUP,
    LABEL_WARM_IMAGE_SOURCE,
    VERSION,
    WARM_IMAGE_FROM_CHART,
    WARMIMAGE_PLURAL,
)
from core.kube import Conflict, Kube, KubeError, NotFound
from services.warm_images import daemonset
from services.warm_images.settings import WarmImageSettings

log = logging.getLogger(__name__)

WARM_IMAGE = (GROUP, VERSION, WARMIMAGE_PLURAL)


class Reconciler:
    """One pass at a time over the WarmImages and the DaemonSet, through one client."""

    def __init__(self, api: Kube, settings: WarmImageSettings) -> None:
        self.api = api
        self.apps = client.AppsV1Api(api.api_client)
        self.settings = settings
        self._lock = threading.Lock()

    def list_objects(self) -> list[dict[str, Any]]:
        body = self.api.json(
            self.api.custom.list_cluster_custom_object, GROUP, VERSION, WARMIMAGE_PLURAL, idempotent=True
        )
        return list(body.get("items") or [])

    def sync_chart_list(self) -> list[str]:
        """Make the chart's WarmImages equal to its ``warmImages`` value; returns what changed."""
        c = self.api.custom
        wanted = {image_refs.warm_image_name(ref): ref for ref in self.settings.warm_images_from_chart}
        changed: list[str] = []
        by_name = {o["metadata"]["name"]: o for o in self.list_objects()}
        for name, ref in sorted(wanted.items()):
            obj = by_name.get(name)
            labels = {LABEL_WARM_IMAGE_SOURCE: WARM_IMAGE_FROM_CHART}
            if obj is None:
                body = {
                    "apiVersion": API_VERSION,
                    "kind": "WarmImage",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"image": ref},
                }
                try:
                    self.api.call(c.create_cluster_custom_object, GROUP, VERSION, WARMIMAGE_PLURAL, body)
                except Conflict:
                    continue  # an admin added it meanwhile; the next pass takes it over
                changed.append(f"added {ref}")
            elif (obj["metadata"].get("labels") or {}).get(LABEL_WARM_IMAGE_SOURCE) != WARM_IMAGE_FROM_CHART:
                patch = {"metadata": {"labels": labels}}
                self.api.call(c.patch_cluster_custom_object, GROUP, VERSION, WARMIMAGE_PLURAL, name, patch)
                changed.append(f"took over {ref} from the admins' list")
        for name, obj in sorted(by_name.items()):
            chart = (obj["metadata"].get("labels") or {}).get(LABEL_WARM_IMAGE_SOURCE) == WARM_IMAGE_FROM_CHART
            if chart and name not in wanted:
                try:
                    self.api.call(
                        c.delete_cluster_custom_object, GROUP, VERSION, WARMIMAGE_PLURAL, name, idempotent=True
                    )
                except NotFound:
                    continue
                changed.append(f"removed {obj['spec'].get('image')}")
        return changed

    def current(self) -> dict[str, Any] | None:
        s = self.settings
        try:
            return self.api.json(
                self.apps.read_namespaced_daemon_set,
                s.warm_images_daemonset,
                s.warm_images_namespace,
                idempotent=True,
            )
        except NotFound:
            return None

    def reconcile(self, *, chart: bool = False) -> str | None:
        """One pass (with ``chart``, the chart's list first); returns what it changed, or None."""
        with self._lock:
            s = self.settings
            synced = self.sync_chart_list() if chart else []
            if synced:
                log.info("chart's warm images: %s", "; ".join(synced))
            images = daemonset.images_of(self.list_objects())
            wanted = daemonset.desired(images, s)
            have = self.current()
            if daemonset.up_to_date(have, wanted):
                return None
            if wanted is None:
                try:
                    self.api.call(
                        self.apps.delete_namespaced_daemon_set,
                        s.warm_images_daemonset,
                        s.warm_images_namespace,
                        idempotent=True,
                    )
                except NotFound:
                    pass
                return "deleted (no warm images)"
            if have is None:
                self.api.call(self.apps.create_namespaced_daemon_set, s.warm_images_namespace, wanted)
                return f"created, holding {len(images)} image(s)"
            wanted["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
            self.api.call(
                self.apps.replace_namespaced_daemon_set, s.warm_images_daemonset, s.warm_images_namespace, wanted
            )
            return f"updated, holding {len(images)} image(s)"


def registrar(settings: WarmImageSettings) -> Any:
    """A ``register(registry, controller_settings)`` adding the handlers (the operator's registrar)."""

    def register(registry: kopf.OperatorRegistry, _controller_settings: Any) -> None:
        def attempt(memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], *, chart: bool = False) -> None:
            reconciler: Reconciler = memo.warm_images
            try:
                done = reconciler.reconcile(chart=chart)
            except Conflict:
                return  # written meanwhile; the next event or tick looks again
            except KubeError as exc:
                raise kopf.TemporaryError(f"warm images: {exc.summary()}", delay=5) from exc
            if done:
                logger.info("warm-image DaemonSet %s: %s", settings.warm_images_daemonset, done)

        @kopf.on.startup(registry=registry)
        def warm_images_startup(memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
            """The first pass, with the chart's list. It never holds up the operator's start: a
            refusal (RBAC), a missing CRD or an unreachable API server is logged, and the
            WarmImage events and the timer try again."""
            memo.warm_images = Reconciler(Kube(memo.kube_configuration), settings)
            try:
                attempt(memo, logger, chart=True)
            except kopf.TemporaryError as exc:
                logger.error("%s; the next WarmImage event or resync tries again", exc)

        @kopf.on.cleanup(registry=registry)
        def warm_images_cleanup(memo: Any, **_: Any) -> None:
            if getattr(memo, "warm_images", None):
                memo.warm_images.api.close()

        @kopf.on.event(*WARM_IMAGE, registry=registry)
        def warm_image_event(memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
            attempt(memo, logger)

        @kopf.timer(*WARM_IMAGE, id="warm-images-resync", interval=settings.warm_images_resync_s, registry=registry)
        def warm_images_resync(memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
            attempt(memo, logger, chart=True)

    return register
