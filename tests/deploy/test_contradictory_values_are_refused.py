"""templates/validation.yaml and values.schema.json refuse bad values at render time."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.deploy.rendering import render

CONTRADICTIONS = [
    (
        "both database sources",
        {"database": {"url": "postgresql://u@h/db"}},
        "either database.existingSecret or database.url",
    ),
    ("no database", {"database": {"existingSecret": ""}}, "the API needs PostgreSQL"),
    (
        "not a postgres url",
        {"database": {"existingSecret": "", "url": "mysql://h/db"}},
        "database.url must be a PostgreSQL URL",
    ),
    (
        "both rate-limit storage sources",
        {"api": {"rateLimitStorage": {"existingSecret": "limits", "url": "redis://r:6379/0"}}},
        "either api.rateLimitStorage.existingSecret or api.rateLimitStorage.url",
    ),
    (
        "not a redis rate-limit storage",
        {"api": {"rateLimitStorage": {"url": "memcached://m:11211"}}},
        "api.rateLimitStorage.url must be a Redis URI",
    ),
    ("pod tls without certificate", {"api": {"tls": {"existingSecret": ""}}}, "api.tls.enabled needs"),
    ("ingress without tls", {"api": {"ingress": {"enabled": True}}}, "api.ingress.enabled needs TLS"),
    (
        "public certificate without a public issuer",
        {"certManager": {"enabled": True}, "api": {"ingress": {"enabled": True}}},
        "certManager.enabled with api.ingress.enabled needs certManager.issuerRef.name",
    ),
    (
        "internal certificate without an internal issuer",
        {"certManager": {"enabled": True, "internalIssuer": {"create": False}}, "api": {"tls": {"existingSecret": ""}}},
        "certManager.internalIssuer.create false needs certManager.internalIssuer.issuerRef.name",
    ),
    (
        "two controllers without peering",
        {"controller": {"replicas": 2, "peering": {"enabled": False}}},
        "needs controller.peering.enabled",
    ),
    (
        "pdb blocks every api pod",
        {"api": {"replicas": 2, "pdb": {"maxUnavailable": 2}}},
        "api.pdb.maxUnavailable must be smaller",
    ),
    (
        "privileged and non-root fabric",
        {"fabric": {"privileged": True, "libvirtGroupId": 108}},
        "fabric.privileged and fabric.libvirtGroupId contradict",
    ),
    (
        "a simulator's board for libnvfm",
        {"fabric": {"simulatorBoard": "/var/lib/board.json"}},
        "fabric.simulatorBoard needs fabric.fmBackend simulator",
    ),
    (
        "no channel to a real Fabric Manager",
        {"fabric": {"fmChannel": "none"}},
        "fabric.fmChannel none needs fabric.fmBackend simulator",
    ),
    (
        "root tenants in restricted namespaces",
        {"api": {"tenantRunAsUser": 0}},
        "api.tenantRunAsUser 0 runs tenant containers as root",
    ),
    (
        "binding conditions without dra",
        {"draDriver": {"bindingConditions": True}},
        "draDriver.bindingConditions needs allocation.mode dra",
    ),
]

SCHEMA_ERRORS = [
    ("zero replicas", {"api": {"replicas": 0}}, "/api/replicas"),
    ("negative quota", {"api": {"defaultGpuQuota": -1}}, "/api/defaultGpuQuota"),
    ("unknown pod security level", {"controller": {"podSecurityLevel": "privileged"}}, "/controller/podSecurityLevel"),
    ("unknown key", {"api": {"replica": 3}}, "replica"),
    ("socket outside /run/gpucaas", {"fabricSocket": "/tmp/fabric.sock"}, "/fabricSocket"),
    ("bad log level", {"logLevel": "LOUD"}, "/logLevel"),
    ("unknown allocation mode", {"allocation": {"mode": "extender"}}, "/allocation/mode"),
    ("bad fm backend", {"fabric": {"fmBackend": "magic"}}, "/fabric/fmBackend"),
    ("relative sysfs path", {"gpuNodes": {"sysfsPath": "sys"}}, "/gpuNodes/sysfsPath"),
    ("bad digest", {"image": {"digest": "latest"}}, "/image/digest"),
    ("non-string node label", {"gpuNodes": {"nodeSelector": {"gpucaas.dev/gpu-node": True}}}, "/gpuNodes/nodeSelector"),
    ("negative tenant uid", {"api": {"tenantRunAsUser": -1}}, "/api/tenantRunAsUser"),
    ("unknown rate-limit storage key", {"api": {"rateLimitStorage": {"uri": "redis://r"}}}, "uri"),
    (
        "extender cluster ip not an address",
        {"schedulerExtender": {"service": {"clusterIP": "extender.svc"}}},
        "/schedulerExtender/service/clusterIP",
    ),
]


@pytest.mark.parametrize(("values", "message"), [c[1:] for c in CONTRADICTIONS], ids=[c[0] for c in CONTRADICTIONS])
def test_contradictions_fail_with_a_reason(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError) as err:
        render(values)
    assert message in str(err.value)


@pytest.mark.parametrize(("values", "where"), [c[1:] for c in SCHEMA_ERRORS], ids=[c[0] for c in SCHEMA_ERRORS])
def test_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(values)
    assert where in str(err.value)


def test_contradiction_fixed_renders() -> None:
    """Each refusal has a way out: the hinted fix renders."""
    assert render({"controller": {"replicas": 2}})
    assert render({"draDriver": {"bindingConditions": True}, "allocation": {"mode": "dra"}})
    assert render({"api": {"tenantRunAsUser": 0}, "controller": {"podSecurityLevel": "baseline"}})
    assert render({"api": {"ingress": {"enabled": True, "tlsSecretName": "edge"}}})
    assert render({"api": {"rateLimitStorage": {"url": "rediss://:pw@r:6380/0"}}})
    assert render(
        {"certManager": {"enabled": True, "issuerRef": {"name": "ca"}}, "api": {"tls": {"existingSecret": ""}}}
    )
    # in-pod TLS alone needs no public issuer: the chart's internal CA signs the Service's names
    assert render({"certManager": {"enabled": True}, "api": {"tls": {"existingSecret": ""}}})
