"""Warm images as the admin endpoints show them: the WarmImage objects, and which GPU nodes hold each.

Whether a node holds an image is the kubelet's own report, the Node's ``status.images``
(:mod:`core.image_refs`), not the warm-image pods' state: an image a tenant's container
pulled counts too, and one the kubelet's image garbage collection removed does not.
The kubelet reports at most ``nodeStatusMaxImages`` images (50 by default), the largest
first; a warm image smaller than the node's 50 largest is then not seen as held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core import crds, image_refs

#: at most this many warm images: each is held on every GPU node's disk
MAX_WARM_IMAGES = 32


def source_of(obj: Mapping[str, Any]) -> str:
    """``chart`` for a WarmImage of the chart's ``warmImages`` value (the controller keeps those),
    ``api`` for one an admin added."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    chart = labels.get(crds.LABEL_WARM_IMAGE_SOURCE) == crds.WARM_IMAGE_FROM_CHART
    return crds.WARM_IMAGE_FROM_CHART if chart else crds.WARM_IMAGE_FROM_API


def manifest(reference: str) -> dict[str, Any]:
    """A new WarmImage for ``reference``, named after its normalised form."""
    return {
        "apiVersion": crds.API_VERSION,
        "kind": "WarmImage",
        "metadata": {
            "name": image_refs.warm_image_name(reference),
            "labels": {crds.LABEL_WARM_IMAGE_SOURCE: crds.WARM_IMAGE_FROM_API},
        },
        "spec": {"image": reference},
    }


def node_images(nodes: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Each node's ``status.images`` names, normalised."""
    return {n["metadata"]["name"]: image_refs.node_image_names(n) for n in nodes}


def row(obj: Mapping[str, Any], held_by: Mapping[str, frozenset[str]], gpu_nodes: Iterable[str]) -> dict[str, Any]:
    """One WarmImage: its image, where it comes from, and the GPU nodes that hold it and lack it."""
    meta = obj.get("metadata") or {}
    ref = (obj.get("spec") or {}).get("image") or ""
    nodes = sorted(gpu_nodes)
    holding = {n for n in nodes if image_refs.held(ref, held_by.get(n, frozenset()))}
    return {
        "id": meta.get("name"),
        "image": ref,
        "source": source_of(obj),
        "created_at": meta.get("creationTimestamp"),
        "nodes_holding": len(holding),
        "nodes_total": len(nodes),
        "missing_on": [n for n in nodes if n not in holding],
    }


def node_status(warm: Iterable[Mapping[str, Any]], images: frozenset[str]) -> list[dict[str, Any]]:
    """Per warm image, whether one node (its ``status.images`` names) holds it."""
    out = []
    for obj in warm:
        ref = (obj.get("spec") or {}).get("image") or ""
        out.append({"image": ref, "held": image_refs.held(ref, images)})
    return sorted(out, key=lambda r: r["image"])
