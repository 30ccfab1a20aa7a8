"""The warm-image DaemonSet, built from the list of WarmImages.

One pod per GPU node, whose only container (the CRI's pause image) mounts every warm image
as an image volume. The kubelet pulls an image volume before it starts the pod's containers
(``pullPolicy: IfNotPresent``: a node that has the image pulls nothing), through the node's
runtime and snapshotter, the path a tenant's container takes; nothing from the image runs.
A change of the list is a change of the pod template: each node's pod is replaced, all
nodes at once (``maxUnavailable: 100%``, the pods serve nothing), and the new pod pulls only
what the node lacks.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core import image_refs
from services.warm_images.settings import WarmImageSettings

COMPONENT = "warm-images"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpucaas-controller"
#: the pod template's digest, on the DaemonSet: equal digests, nothing to write
ANNOTATION_TEMPLATE = "gpucaas.dev/warm-images-template"
MOUNT_ROOT = "/warm"
#: the pause image's user; the pod needs no privilege at all
HOLDER_UID = 65535


def volume_name(reference: str) -> str:
    """A volume name that stays the same while the image is on the list (not its position)."""
    return "img-" + image_refs.warm_image_name(reference).removeprefix("wi-")[:12]


def images_of(warm_images: list[dict[str, Any]]) -> list[str]:
    """The WarmImages' references, one per image however it is spelt, in a stable order."""
    seen: dict[str, str] = {}
    for obj in warm_images:
        ref = ((obj.get("spec") or {}).get("image") or "").strip()
        if ref and not (obj.get("metadata") or {}).get("deletionTimestamp"):
            seen.setdefault(image_refs.normalized(ref), ref)
    return [seen[key] for key in sorted(seen)]


def desired(images: list[str], settings: WarmImageSettings) -> dict[str, Any] | None:
    """The DaemonSet that holds ``images`` on every GPU node; None for an empty list (no DaemonSet)."""
    if not images:
        return None
    labels = {
        "app.kubernetes.io/name": "gpucaas",
        LABEL_COMPONENT: COMPONENT,
    }
    selector = {**labels, "app.kubernetes.io/instance": settings.warm_images_daemonset}
    template: dict[str, Any] = {
        "metadata": {"labels": {**selector, LABEL_MANAGED_BY: MANAGER}},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 2,
            "nodeSelector": dict(settings.warm_images_node_selector),
            "tolerations": list(settings.warm_images_tolerations),
            "imagePullSecrets": [{"name": n} for n in settings.warm_images_pull_secrets],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": HOLDER_UID,
                "runAsGroup": HOLDER_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "hold",
                    "image": settings.warm_images_holder_image,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {
                        "requests": {"cpu": "1m", "memory": "4Mi"},
                        "limits": {"memory": "16Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {"name": volume_name(ref), "mountPath": f"{MOUNT_ROOT}/{volume_name(ref)}", "readOnly": True}
                        for ref in images
                    ],
                }
            ],
            "volumes": [
                {"name": volume_name(ref), "image": {"reference": ref, "pullPolicy": "IfNotPresent"}} for ref in images
            ],
        },
    }
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": settings.warm_images_daemonset,
            "namespace": settings.warm_images_namespace,
            "labels": {**selector, LABEL_MANAGED_BY: MANAGER},
            "annotations": {ANNOTATION_TEMPLATE: digest},
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": template,
        },
    }


def up_to_date(current: dict[str, Any] | None, wanted: dict[str, Any] | None) -> bool:
    """Whether the DaemonSet there (``current``) is the one wanted: same presence, same template digest."""
    if current is None or wanted is None:
        return current is None and wanted is None
    have = ((current.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TEMPLATE)
    return bool(have) and have == wanted["metadata"]["annotations"][ANNOTATION_TEMPLATE]
