"""The project's custom resource definitions (group gpucaas.dev, version v1alpha1).

The YAML manifests beside this module are the single source: the Helm chart's
``crds/`` folder carries identical copies (a test keeps them in step), the
tests' and the sandbox's local clusters get them applied, and code builds custom
resource paths from the constants here.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

GROUP = "gpucaas.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

TENANCY_PLURAL = "tenancies"
GPULEASE_PLURAL = "gpuleases"
FABRICSTATE_PLURAL = "fabricstates"
WARMIMAGE_PLURAL = "warmimages"

CRD_FILES = (
    "tenancies.gpucaas.dev.yaml",
    "gpuleases.gpucaas.dev.yaml",
    "fabricstates.gpucaas.dev.yaml",
    "warmimages.gpucaas.dev.yaml",
)

TENANT_NAMESPACE_PREFIX = "tenant-"
LABEL_TENANCY = "gpucaas.dev/tenancy"
LABEL_CONTAINER = "gpucaas.dev/container-id"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# on every tenant pod the API creates: the API takes it off once it has recorded the pod's last
# state, so a pod that ends and goes while the API's watch is down is still seen at its end
FINALIZER_POD_USAGE = "gpucaas.dev/usage"
# which of the two lists a WarmImage comes from: the chart's warmImages value (the controller keeps
# those) or an admin's `caasctl warm-images add` (the API's)
LABEL_WARM_IMAGE_SOURCE = "gpucaas.dev/source"
WARM_IMAGE_FROM_CHART = "chart"
WARM_IMAGE_FROM_API = "api"
# the tenancy record's revision a Tenancy resource holds: a push of an older revision is dropped
ANNOTATION_TENANCY_REVISION = "gpucaas.dev/revision"


def tenant_namespace(tenancy: str) -> str:
    """The namespace a tenancy's pods live in."""
    return f"{TENANT_NAMESPACE_PREFIX}{tenancy}"


@cache
def _load(filename: str) -> dict[str, Any]:
    import yaml  # only the manifests need it; node daemons import the constants (their RSS)

    text = resources.files(__package__).joinpath("crds", filename).read_text()
    return yaml.safe_load(text)


def crd_manifests() -> list[dict[str, Any]]:
    """Fresh copies of every CRD manifest, ready to create through the API."""
    import copy

    return [copy.deepcopy(_load(f)) for f in CRD_FILES]


def crd_manifest(plural: str) -> dict[str, Any]:
    for crd in crd_manifests():
        if crd["spec"]["names"]["plural"] == plural:
            return crd
    raise KeyError(plural)
