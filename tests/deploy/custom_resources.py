"""Schemas of the other projects' custom resources the chart renders, strict subsets (unknown
fields are errors) of what their CRDs accept, written for the fields the chart uses:

- cert-manager's ``Certificate`` and ``Issuer`` (cert-manager.io/v1);
- the prometheus-operator's ``PodMonitor`` and ``PrometheusRule`` (monitoring.coreos.com/v1),
  after its CRDs ``monitoring.coreos.com_podmonitors.yaml`` and ``..._prometheusrules.yaml``
  (example/prometheus-operator-crd/ in github.com/prometheus-operator/prometheus-operator,
  v0.93): the same types, enums, patterns and required fields. Neither project's CRDs are
  vendored here.
"""

from __future__ import annotations

from typing import Any

#: The prometheus-operator's duration pattern (``monitoringv1.Duration``).
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


def _resource(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": {"type": "object", "required": ["name", "namespace"]},
            "spec": spec,
        },
    }


ISSUER_REF = _object(
    {
        "name": {"type": "string", "minLength": 1},
        "kind": {"enum": ["Issuer", "ClusterIssuer"]},
        "group": {"type": "string"},
    },
    ("name",),
)

CERTIFICATE_SCHEMA = _resource(
    "cert-manager.io/v1",
    "Certificate",
    _object(
        {
            "secretName": {"type": "string", "minLength": 1},
            "issuerRef": ISSUER_REF,
            "isCA": {"type": "boolean"},
            "commonName": {"type": "string", "maxLength": 64},
            "privateKey": _object(
                {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                    "size": {"type": "integer"},
                    "rotationPolicy": {"enum": ["Never", "Always"]},
                }
            ),
            "duration": {"type": "string", "pattern": "^[0-9]+h$"},
            "renewBefore": {"type": "string", "pattern": "^[0-9]+h$"},
            "dnsNames": {"type": "array", "items": {"type": "string"}},
        },
        ("secretName", "issuerRef"),
    ),
)

ISSUER_SCHEMA = _resource(
    "cert-manager.io/v1",
    "Issuer",
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "selfSigned": _object({}),
            "ca": _object({"secretName": {"type": "string", "minLength": 1}}, ("secretName",)),
        },
        "minProperties": 1,
        "maxProperties": 1,
    },
)

SELECTOR = _object(
    {
        "matchLabels": STRING_MAP,
        "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"]}},
    }
)
SECRET_KEY = _object({"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}}, ("key",))

PODMONITOR_SCHEMA = _resource(
    "monitoring.coreos.com/v1",
    "PodMonitor",
    _object(
        {
            "selector": SELECTOR,
            "namespaceSelector": _object(
                {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}
            ),
            "podMetricsEndpoints": {
                "type": "array",
                "items": _object(
                    {
                        "port": {"type": "string"},
                        "path": {"type": "string"},
                        "interval": {"type": "string", "pattern": DURATION},
                        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                        "tlsConfig": _object(
                            {
                                "ca": _object({"secret": SECRET_KEY, "configMap": SECRET_KEY}),
                                "serverName": {"type": "string"},
                                "insecureSkipVerify": {"type": "boolean"},
                            }
                        ),
                    }
                ),
            },
        },
        ("selector",),
    ),
)

PROMETHEUSRULE_SCHEMA = _resource(
    "monitoring.coreos.com/v1",
    "PrometheusRule",
    _object(
        {
            "groups": {
                "type": "array",
                "items": _object(
                    {
                        "name": {"type": "string", "minLength": 1},
                        "interval": {"type": "string", "pattern": DURATION},
                        "rules": {
                            "type": "array",
                            "items": _object(
                                {
                                    "alert": {"type": "string"},
                                    "record": {"type": "string"},
                                    "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                                    "for": {"type": "string", "pattern": DURATION},
                                    "labels": STRING_MAP,
                                    "annotations": STRING_MAP,
                                },
                                ("expr",),
                            ),
                        },
                    },
                    ("name",),
                ),
            }
        }
    ),
)

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("cert-manager.io/v1", "Certificate"): CERTIFICATE_SCHEMA,
    ("cert-manager.io/v1", "Issuer"): ISSUER_SCHEMA,
    ("monitoring.coreos.com/v1", "PodMonitor"): PODMONITOR_SCHEMA,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUSRULE_SCHEMA,
}
