"""Admin endpoints over warm images: images every GPU node keeps pulled (``services.warm_images``).

Each is a WarmImage object; the controller keeps one DaemonSet holding them all on the GPU
nodes. An image the chart's ``warmImages`` value lists is the chart's: it is listed here
but removed by changing the value (``helm upgrade``), never through the API.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Response
from pydantic import Field, field_validator

from core import crds, image_refs
from core.kube import Conflict as KubeConflict, KubeError, NotFound as KubeNotFound
from services.api import errors
from services.api.domain import images, inventory, validation, warm_images
from services.api.domain.models import StrictInput
from services.api.routes.deps import AdminUser, KubeDep, SettingsDep

router = APIRouter(prefix="/v1/admin/warm-images", tags=["admin"])
WarmImageId = Path(pattern=r"^wi-[0-9a-f]{20}$", description="The warm image's id, as the list gives it.")


class WarmImageCreate(StrictInput):
    image: str = Field(..., min_length=1, max_length=512, description="The image reference, as tenants name it.")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return validation.check_image(value)


def _unavailable(exc: KubeError) -> errors.Unavailable:
    return errors.Unavailable(f"Kubernetes API unavailable: {exc.summary()}")


def list_objects(kube: Any) -> list[dict[str, Any]]:
    try:
        return kube.list_warm_images()
    except KubeError as exc:
        raise _unavailable(exc) from exc


def _rows(kube: Any, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    try:
        nodes = kube.list_nodes()
        states = kube.list_cluster_objects(crds.FABRICSTATE_PLURAL)
    except KubeError as exc:
        raise _unavailable(exc) from exc
    gpu_nodes = inventory.gpu_node_names(nodes, states)
    held_by = warm_images.node_images(nodes)
    return sorted((warm_images.row(o, held_by, gpu_nodes) for o in objects), key=lambda r: r["image"])


def _same_image(obj: dict[str, Any], reference: str) -> bool:
    ref = (obj.get("spec") or {}).get("image") or ""
    return bool(ref) and image_refs.normalized(ref) == image_refs.normalized(reference)


@router.get("")
def list_warm_images(kube: KubeDep, _admin: AdminUser) -> dict[str, Any]:
    """The warm images, each with the GPU nodes that hold it (the kubelets' ``status.images``)."""
    data = _rows(kube, list_objects(kube))
    return {"data": data, "count": len(data)}


@router.post("", status_code=201, responses={200: {"description": "The image was already warm."}})
def add_warm_image(
    kube: KubeDep, settings: SettingsDep, _admin: AdminUser, body: WarmImageCreate, response: Response
) -> dict[str, Any]:
    """Keep an image pulled on every GPU node. Adding one that is already warm (however its
    reference is spelt) changes nothing and answers 200."""
    why = images.refusal(body.image, settings.image_registry_allowlist)
    if why is not None:
        raise errors.Invalid(
            f"image: {why}; tenants could not run it. Allowed: a public registry, or one on the "
            "operator's allow-list (GPUCAAS_IMAGE_REGISTRY_ALLOWLIST)"
        )
    objects = list_objects(kube)
    existing = next((o for o in objects if _same_image(o, body.image)), None)
    if existing is None:
        if len(objects) >= warm_images.MAX_WARM_IMAGES:
            raise errors.Conflict(
                f"there are already {len(objects)} warm images, the most a GPU node keeps; remove one first"
            )
        try:
            existing = kube.create_cluster_object(crds.WARMIMAGE_PLURAL, warm_images.manifest(body.image))
        except KubeConflict:  # added meanwhile
            existing = next((o for o in list_objects(kube) if _same_image(o, body.image)), None)
            if existing is None:
                raise errors.Conflict(f"warm image {body.image!r} changed meanwhile; try again") from None
            response.status_code = 200
        except KubeError as exc:
            raise _unavailable(exc) from exc
    else:
        response.status_code = 200
    return _rows(kube, [existing])[0]


@router.delete("/{warm_image_id}", status_code=204)
def remove_warm_image(kube: KubeDep, _admin: AdminUser, warm_image_id: str = WarmImageId) -> Response:
    """Stop keeping an image warm. The nodes keep it until the kubelet's image garbage
    collection needs the space; running containers are not touched."""
    try:
        obj = kube.get_cluster_object(crds.WARMIMAGE_PLURAL, warm_image_id)
    except KubeNotFound as exc:
        raise errors.NotFound(f"no warm image {warm_image_id}") from exc
    except KubeError as exc:
        raise _unavailable(exc) from exc
    if warm_images.source_of(obj) == crds.WARM_IMAGE_FROM_CHART:
        raise errors.Conflict(
            f"warm image {obj['spec']['image']!r} is the chart's (its warmImages value): "
            "remove it there and run helm upgrade"
        )
    try:
        kube.delete_cluster_object(crds.WARMIMAGE_PLURAL, warm_image_id)
    except KubeNotFound:
        pass
    except KubeError as exc:
        raise _unavailable(exc) from exc
    return Response(status_code=204)
