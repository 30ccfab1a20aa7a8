"""Parsing ExtenderArgs and pods, building results: the protocol's pure half."""

from __future__ import annotations

import json

import pytest

from services.placement import extender
from services.placement.errors import InvalidRequest
from tests.placement.factories import pod


def test_lowercase_keys_are_accepted_like_gos_decoder_does() -> None:
    args = extender.parse_extender_args(json.dumps({"pod": pod(1), "nodenames": ["a"]}))
    assert args.node_names == ["a"] and args.pod["metadata"]["name"] == "job-7f3a"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [{"name": "a"}]}, 0),
        ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}, 2),
        ({"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]}, 4),
        (
            {
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                ]
            },
            3,
        ),
        (
            {
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            8,
        ),
    ],
    ids=["none", "int-limit", "request-only", "two-containers-sum", "init-container-max"],
)
def test_pod_gpu_count(spec: dict, expected: int) -> None:
    assert extender.pod_gpu_count({"spec": spec}) == expected


def test_a_dra_pod_counts_the_gpus_of_its_gpucaas_claims() -> None:
    """As the API builds a pod in the DRA mode (services/api/domain/pods.py): one pod-level claim
    from the tenancy's template of that size, used by the container."""
    from services.api.domain.pods import build_pod  # the API's own pod, not a hand-written shape

    pod = build_pod(tenancy="t", container_id="c1", image="busybox:1.36", gpus=4, allocation_mode="dra")
    assert "nvidia.com/gpu" not in (pod["spec"]["containers"][0]["resources"].get("limits") or {})
    assert extender.pod_gpu_count(pod) == 4


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # one claim used by two containers is allocated once
        (
            {
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpucaas-gpus-2"}],
                "containers": [{"resources": {"claims": [{"name": "g"}]}}, {"resources": {"claims": [{"name": "g"}]}}],
            },
            2,
        ),
        # a claim no container uses, another vendor's template, a malformed name: nothing
        ({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpucaas-gpus-8"}], "containers": [{}]}, 0),
        (
            {
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "other-gpus"}],
                "containers": [{"resources": {"claims": [{"name": "g"}]}}],
            },
            0,
        ),
        (
            {
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": 8}],
                "containers": [{"resources": {"claims": [{"name": "g"}]}}],
            },
            0,
        ),
    ],
    ids=["shared-claim-once", "unused-claim", "foreign-template", "malformed-template"],
)
def test_dra_claim_counting(spec: dict, expected: int) -> None:
    assert extender.pod_gpu_count({"spec": spec}) == expected


def test_negative_or_fractional_gpu_counts_are_refused() -> None:
    for value in ("-1", "0.5", True):
        with pytest.raises(InvalidRequest) as info:
            extender.pod_gpu_count({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": value}}}]}})
        assert info.value.field == "Pod.spec.containers[0].resources.limits[nvidia.com/gpu]"


def test_binding_args() -> None:
    args = extender.parse_binding_args(b'{"PodName":"p","PodNamespace":"tenant-x","PodUID":"u-1","Node":"gpu-node-a"}')
    assert args == extender.BindingArgs("p", "tenant-x", "u-1", "gpu-node-a")
    assert extender.build_binding_result() == {"Error": ""}
    with pytest.raises(InvalidRequest, match="^Node: "):
        extender.parse_binding_args(b'{"PodName":"p","PodNamespace":"n"}')
