"""The chart's RBAC, applied to an API server and asked about: each component may do what
it needs (the table in test_security_and_rbac.py) and nothing the table leaves out.

Marked ``cluster``: it runs against the local cluster's kube-apiserver by default and, with
``KUBECONFIG`` set, against that real cluster (docs/real-cluster-tests.md). The chart's
ServiceAccounts, roles and bindings are applied under unique names in a namespace of their
own, then every permission is checked with SubjectAccessReview, as ``kubectl auth can-i
--as`` does, and removed afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic

from tests.deploy.rendering import component, render
from tests.deploy.test_security_and_rbac import DRA_BINDING, expected_cluster_rules

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
pytestmark = pytest.mark.cluster


def _renamed(objects: list[dict[str, Any]], suffix: str, namespace: str) -> list[dict[str, Any]]:
    """The chart's RBAC objects with unique names, in ``namespace``."""
    out = []
    for obj in objects:
        if obj["kind"] not in RBAC_KINDS:
            continue
        obj = {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['name']}-{suffix}"}}
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] in ("ClusterRole", "Role"):
            obj["rules"] = [
                {**r, "resourceNames": [f"{n}-{suffix}" for n in r["resourceNames"]]} if r.get("resourceNames") else r
                for r in obj.get("rules") or []
            ]
        if "roleRef" in obj:
            obj["roleRef"] = {
                **obj["roleRef"],
                "name": (
                    f"{obj['roleRef']['name']}-{suffix}"
                    if not obj["roleRef"]["name"].startswith("system:")
                    else obj["roleRef"]["name"]
                ),
            }
            obj["subjects"] = [
                {**s, "name": f"{s['name']}-{suffix}", "namespace": namespace}
                if s.get("kind") == "ServiceAccount"
                else s
                for s in obj.get("subjects") or []
            ]
        out.append(obj)
    return out


#: Both allocation modes: the device plugin, or the DRA driver with every grant binding conditions add.
MODES = {
    "device-plugin": {"schedulerExtender": {"enabled": True}},
    "dra": {"schedulerExtender": {"enabled": True}, **DRA_BINDING},
}


@pytest.fixture(params=list(MODES), ids=list(MODES))
def values(request: pytest.FixtureRequest) -> dict[str, Any]:
    return MODES[request.param]


@pytest.fixture
def applied(k8s: client.ApiClient, unique_name, values) -> Iterator[tuple[str, dict[str, str]]]:
    suffix = unique_name("rbac").rsplit("-", 1)[1]
    namespace = f"gpucaas-rbac-{suffix}"
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": namespace}})
    objects = _renamed(render(values), suffix, namespace)
    dyn = dynamic.DynamicClient(k8s)
    made = []
    try:
        for obj in objects:
            res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            res.create(body=obj, namespace=obj["metadata"].get("namespace"))
            made.append((res, obj))
        accounts = {component(o): o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
        names = {
            (component(o), g, r, v): rule["resourceNames"][0]
            for o in objects
            if o["kind"] in ("ClusterRole", "Role")
            for rule in o.get("rules") or []
            if rule.get("resourceNames")
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
        yield namespace, accounts, names
    finally:
        for res, obj in reversed(made):
            if obj["kind"].startswith("Cluster"):
                res.delete(name=obj["metadata"]["name"])
        core.delete_namespace(namespace)


def _allowed(
    k8s: client.ApiClient,
    namespace: str,
    account: str,
    group: str,
    resource: str,
    verb: str,
    where: str | None = "default",
    name: str | None = None,
) -> bool:
    """``kubectl auth can-i VERB RESOURCE --as system:serviceaccount:NS:ACCOUNT``, as JSON on the wire."""
    name_, _, sub = resource.partition("/")
    attributes = {"group": group, "resource": name_, "subresource": sub, "verb": verb, "namespace": where, "name": name}
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{account}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": {k: v for k, v in attributes.items() if v},
        },
    }
    resp = k8s.call_api(
        *k8s.param_serialize(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
    )
    return bool(json.loads(resp.read())["status"].get("allowed"))


def test_every_component_may_do_what_it_needs_and_no_more(k8s: client.ApiClient, applied, values) -> None:
    namespace, accounts, names = applied
    checked = 0
    for comp, rules in expected_cluster_rules(values).items():
        account = accounts[comp]
        for (group, resource), verbs in rules.items():
            for verb in sorted(verbs):
                name = names.get((comp, group, resource, verb))
                assert _allowed(k8s, namespace, account, group, resource, verb, name=name), (
                    comp,
                    group,
                    resource,
                    verb,
                )
                if name is not None:  # a rule with resourceNames allows that object only
                    assert not _allowed(k8s, namespace, account, group, resource, verb, name="another"), comp
                checked += 1
        # Nothing the table leaves out: Secrets anywhere, and verbs the component was not given.
        assert not _allowed(k8s, namespace, account, "", "secrets", "list", "kube-system"), comp
        for (group, resource), verbs in rules.items():
            for verb in {"delete", "deletecollection", "update", "patch", "create"} - set(verbs):
                if resource.endswith("/status") or resource in ("bindings", "pods/binding", "pods/eviction"):
                    continue
                assert not _allowed(k8s, namespace, account, group, resource, verb), (comp, group, resource, verb)
    assert checked > 40
