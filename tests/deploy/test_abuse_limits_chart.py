"""The chart carries the API's abuse limits: per-client bounds on the Ingress, the image
registry allow-list and retention as the variables the API's settings read, and the
replicas' shared rate-limit storage from a Secret."""

from __future__ import annotations

import base64
import json
from typing import Any

from services.api.settings import Settings
from tests.deploy.rendering import production_values, render, render_notes


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_ingress_bounds_each_client() -> None:
    objects = render(
        {
            "api": {
                "ingress": {
                    "enabled": True,
                    "tlsSecretName": "edge-tls",
                    "annotations": {"example.com/x": "y"},
                    "limits": {"enabled": True, "connectionsPerClient": 32, "rpsPerClient": 20, "bodySize": "64k"},
                }
            }
        }
    )
    annotations = _one(objects, "Ingress", "gpucaas-api")["metadata"]["annotations"]
    assert annotations == {
        "nginx.ingress.kubernetes.io/limit-connections": "32",
        "nginx.ingress.kubernetes.io/limit-rps": "20",
        "nginx.ingress.kubernetes.io/proxy-body-size": "64k",
        "example.com/x": "y",
    }
    off = render(
        {
            "api": {
                "ingress": {
                    "enabled": True,
                    "tlsSecretName": "edge-tls",
                    "limits": {"enabled": False, "connectionsPerClient": 1, "rpsPerClient": 1, "bodySize": "1k"},
                }
            }
        }
    )
    assert "annotations" not in _one(off, "Ingress", "gpucaas-api")["metadata"]


def test_allow_list_and_retention_reach_the_api_settings(monkeypatch: Any) -> None:
    objects = render(
        {
            "api": {
                "imageRegistryAllowlist": ["10.0.0.5:5000", "registry.corp.internal"],
                "retentionDays": 7,
                "auditRetentionDays": 400,
            }
        }
    )
    container = _one(objects, "Deployment", "gpucaas-api")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert json.loads(env["GPUCAAS_IMAGE_REGISTRY_ALLOWLIST"]) == ["10.0.0.5:5000", "registry.corp.internal"]
    # the API's own settings class reads these values as the chart writes them
    monkeypatch.setenv("GPUCAAS_IMAGE_REGISTRY_ALLOWLIST", env["GPUCAAS_IMAGE_REGISTRY_ALLOWLIST"])
    monkeypatch.setenv("GPUCAAS_RETENTION_DAYS", env["GPUCAAS_RETENTION_DAYS"])
    monkeypatch.setenv("GPUCAAS_AUDIT_RETENTION_DAYS", env["GPUCAAS_AUDIT_RETENTION_DAYS"])
    settings = Settings()
    assert settings.image_registry_allowlist == ["10.0.0.5:5000", "registry.corp.internal"]
    assert settings.retention_days == 7 and settings.audit_retention_days == 400


def _api_env(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    container = _one(objects, "Deployment", "gpucaas-api")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container["env"]}


def test_rate_limit_storage_reaches_the_api_from_a_secret(monkeypatch: Any) -> None:
    # an existing Secret: referenced, never inlined, and no Secret of the chart's own
    objects = render({"api": {"rateLimitStorage": {"existingSecret": "shared-limits", "existingSecretKey": "uri"}}})
    assert _api_env(objects)["GPUCAAS_RATE_LIMIT_STORAGE_URL"] == {
        "name": "GPUCAAS_RATE_LIMIT_STORAGE_URL",
        "valueFrom": {"secretKeyRef": {"name": "shared-limits", "key": "uri"}},
    }
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == ["gpucaas-admin-token"]

    # a URI in the values: stored in a Secret the chart creates, which the API reads
    url = "redis://:s3cret@redis.internal:6379/2"
    objects = render({"api": {"rateLimitStorage": {"url": url}}})
    ref = _api_env(objects)["GPUCAAS_RATE_LIMIT_STORAGE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gpucaas-rate-limits", "key": "url"}
    secret = _one(objects, "Secret", "gpucaas-rate-limits")
    assert base64.b64decode(secret["data"]["url"]).decode() == url
    assert url not in json.dumps(_one(objects, "Deployment", "gpucaas-api"))
    # the API's own settings class takes what the Secret holds
    monkeypatch.setenv("GPUCAAS_RATE_LIMIT_STORAGE_URL", url)
    assert Settings().rate_limit_storage_url == url

    # neither: each replica counts alone, and the notes say so when there are several
    objects = render({})
    assert "GPUCAAS_RATE_LIMIT_STORAGE_URL" not in _api_env(objects)
    assert "counted in each of the 2 API replicas alone" in render_notes({})
    assert "alone" not in render_notes({"api": {"rateLimitStorage": {"existingSecret": "shared-limits"}}})
    assert "alone" not in render_notes({"api": {"replicas": 1, "pdb": {"enabled": False}}})


def test_production_values_share_the_rates() -> None:
    env = _api_env(render(production_values()))
    assert env["GPUCAAS_RATE_LIMIT_STORAGE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "gpucaas-rate-limits",
        "key": "url",
    }
