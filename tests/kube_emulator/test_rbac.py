"""RBAC as kube-apiserver evaluates it: bindings, verbs, subresources, resourceNames, URLs, reviews."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kube_emulator.conftest import pod_body
from tests.kube_emulator.test_authn import kubectl, needs_kubectl, sa_client

RBAC = "rbac.authorization.k8s.io"


@pytest.fixture
def rbac_api(k8s: client.ApiClient) -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(k8s)


def role(rbac_api: client.RbacAuthorizationV1Api, name: str, rules: list[dict], namespace: str | None = None,
         **extra: object) -> None:
    body = {"metadata": {"name": name, **extra.pop("metadata", {})}, "rules": rules, **extra}
    if namespace:
        rbac_api.create_namespaced_role(namespace, body)
    else:
        rbac_api.create_cluster_role(body)


def bind(rbac_api: client.RbacAuthorizationV1Api, name: str, kind: str, role_name: str,
         subject: dict | None = None, namespace: str | None = None) -> None:
    subject = subject or {"kind": "ServiceAccount", "name": "robot", "namespace": "default"}
    body = {"metadata": {"name": name}, "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role_name},
            "subjects": [subject]}
    if namespace:
        rbac_api.create_namespaced_role_binding(namespace, body)
    else:
        rbac_api.create_cluster_role_binding(body)


def forbidden(call, *args, **kwargs) -> str:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    assert err.value.status == 403, err.value.body
    body = json.loads(err.value.body)
    assert body["reason"] == "Forbidden"
    return body["message"]


@pytest.fixture
def robot(kube_emulator, core: client.CoreV1Api):
    with sa_client(core, kube_emulator.url, "default", "robot") as api:
        yield api


def test_no_binding_no_access_with_the_servers_wording(robot: client.ApiClient) -> None:
    core = client.CoreV1Api(robot)
    assert forbidden(core.list_namespaced_pod, "default") == (
        'pods is forbidden: User "system:serviceaccount:default:robot" cannot list resource "pods" '
        'in API group "" in the namespace "default"')
    assert forbidden(core.read_namespace, "kube-system") == (
        'namespaces "kube-system" is forbidden: User "system:serviceaccount:default:robot" cannot get resource '
        '"namespaces" in API group "" in the namespace "kube-system"')
    assert forbidden(core.list_node) == (
        'nodes is forbidden: User "system:serviceaccount:default:robot" cannot list resource "nodes" '
        'in API group "" at the cluster scope')
    assert forbidden(core.read_namespaced_pod_log, "p", "default") == (
        'pods "p" is forbidden: User "system:serviceaccount:default:robot" cannot get resource "pods/log" '
        'in API group "" in the namespace "default"')
    assert forbidden(client.CustomObjectsApi(robot).list_cluster_custom_object, "gpucaas.dev", "v1alpha1",
                     "tenancies") == (
        'tenancies.gpucaas.dev is forbidden: User "system:serviceaccount:default:robot" cannot list resource '
        '"tenancies" in API group "gpucaas.dev" at the cluster scope')


def test_role_binding_grants_only_in_its_namespace(robot, rbac_api, core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    role(rbac_api, "pod-reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
         "default")
    bind(rbac_api, "robot-reads-pods", "Role", "pod-reader", namespace="default")
    mine = client.CoreV1Api(robot)
    mine.list_namespaced_pod("default")
    forbidden(mine.list_namespaced_pod, "other")
    forbidden(mine.list_pod_for_all_namespaces)
    forbidden(mine.create_namespaced_pod, "default", pod_body("p"))


def test_role_binding_to_cluster_role_is_scoped_to_its_namespace(robot, rbac_api, core) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    role(rbac_api, "cm-editor", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}])
    bind(rbac_api, "robot-edits-cms", "ClusterRole", "cm-editor",
         {"kind": "ServiceAccount", "name": "robot"}, namespace="default")  # SA namespace defaults to the binding's
    mine = client.CoreV1Api(robot)
    mine.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    mine.delete_collection_namespaced_config_map("default")
    forbidden(mine.create_namespaced_config_map, "other", {"metadata": {"name": "c"}})


def test_cluster_role_binding_subresources_and_wildcards(robot, rbac_api, core) -> None:
    role(rbac_api, "status-writer", [
        {"apiGroups": ["gpucaas.dev"], "resources": ["*/status"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": ["*"], "resources": ["tenancies"], "verbs": ["get"]},
    ])
    bind(rbac_api, "robot-status", "ClusterRole", "status-writer")
    core.create_namespaced_pod("default", pod_body("p"))
    mine = client.CoreV1Api(robot)
    mine.read_namespaced_pod_log("p", "default")
    forbidden(mine.read_namespaced_pod, "p", "default")  # pods/log does not grant pods
    custom = client.CustomObjectsApi(robot)
    with pytest.raises(ApiException) as err:  # allowed, then not found
        custom.get_cluster_custom_object_status("gpucaas.dev", "v1alpha1", "tenancies", "t")
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        custom.get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "t")
    assert err.value.status == 404
    forbidden(custom.get_cluster_custom_object, "gpucaas.dev", "v1alpha1", "gpuleases", "l")
    assert 'cannot update resource "gpuleases/status"' in forbidden(
        custom.replace_cluster_custom_object_status, "gpucaas.dev", "v1alpha1", "gpuleases", "l",
        {"metadata": {"name": "l"}})


def test_resource_names_allow_get_and_named_list_but_not_list_or_create(robot, rbac_api, core) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "mine"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "theirs"}})
    role(rbac_api, "one-cm", [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"],
                               "verbs": ["get", "list", "watch", "create", "update"]}], "default")
    bind(rbac_api, "robot-one-cm", "Role", "one-cm", namespace="default")
    mine = client.CoreV1Api(robot)
    assert mine.read_namespaced_config_map("mine", "default").metadata.name == "mine"
    forbidden(mine.read_namespaced_config_map, "theirs", "default")
    forbidden(mine.list_namespaced_config_map, "default")
    named = mine.list_namespaced_config_map("default", field_selector="metadata.name=mine")
    assert [c.metadata.name for c in named.items] == ["mine"]
    forbidden(mine.create_namespaced_config_map, "default", {"metadata": {"name": "mine2"}})


def test_watch_is_authorised_as_watch(robot, rbac_api) -> None:
    role(rbac_api, "lister", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}], "default")
    bind(rbac_api, "robot-lists", "Role", "lister", namespace="default")
    mine = client.CoreV1Api(robot)
    mine.list_namespaced_pod("default")
    message = forbidden(mine.list_namespaced_pod, "default", watch=True, timeout_seconds=1)
    assert 'cannot watch resource "pods"' in message


def test_non_resource_urls_and_discovery(kube_emulator, robot, rbac_api) -> None:
    http = urllib3.PoolManager()
    auth = {"Authorization": robot.configuration.api_key["authorization"]}
    for path in ("/version", "/api", "/api/v1", "/apis", "/apis/gpucaas.dev/v1alpha1", "/healthz"):
        assert http.request("GET", kube_emulator.url + path, headers=auth).status == 200, path
    r = http.request("POST", kube_emulator.url + "/emulator/v1/compact", headers=auth)
    assert r.status == 403
    assert json.loads(r.data)["message"] == (
        'forbidden: User "system:serviceaccount:default:robot" cannot post path "/emulator/v1/compact"')
    role(rbac_api, "compactor", [{"nonResourceURLs": ["/emulator/*"], "verbs": ["post"]}])
    bind(rbac_api, "robot-compacts", "ClusterRole", "compactor")
    assert http.request("POST", kube_emulator.url + "/emulator/v1/compact", headers=auth).status == 200


def test_aggregated_cluster_role(robot, rbac_api) -> None:
    role(rbac_api, "aggregate", [], aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]})
    bind(rbac_api, "robot-aggregate", "ClusterRole", "aggregate")
    mine = client.CoreV1Api(robot)
    forbidden(mine.list_node)
    role(rbac_api, "node-reader", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
         metadata={"labels": {"agg": "yes"}})
    mine.list_node()


def test_binding_to_a_missing_role_says_so(robot, rbac_api) -> None:
    bind(rbac_api, "robot-ghost", "ClusterRole", "ghost")
    assert forbidden(client.CoreV1Api(robot).list_node).endswith(
        f': RBAC: clusterrole.{RBAC} "ghost" not found')


def test_group_and_user_subjects(robot, rbac_api) -> None:
    role(rbac_api, "node-reader", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}])
    bind(rbac_api, "sas-read-nodes", "ClusterRole", "node-reader",
         {"kind": "Group", "name": "system:serviceaccounts:default", "apiGroup": RBAC})
    client.CoreV1Api(robot).list_node()


def test_access_and_rules_reviews(robot, rbac_api, k8s) -> None:
    role(rbac_api, "pod-reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}], "default")
    bind(rbac_api, "robot-reads-pods", "Role", "pod-reader", namespace="default")
    authz = client.AuthorizationV1Api(robot)
    yes = authz.create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}}})
    assert yes.status.allowed is True and "RoleBinding" in yes.status.reason
    no = authz.create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"namespace": "default", "verb": "delete", "resource": "pods"}}})
    assert no.status.allowed is False
    rules = authz.create_self_subject_rules_review({"spec": {"namespace": "default"}}).status
    assert {"verbs": ["get", "list"], "api_groups": [""], "resources": ["pods"]} in [
        {"verbs": r.verbs, "api_groups": r.api_groups, "resources": r.resources} for r in rules.resource_rules]
    # SubjectAccessReview needs its own permission: the robot may not ask about others, the admin may.
    sar = {"spec": {"user": "system:serviceaccount:default:robot",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}}}
    forbidden(authz.create_subject_access_review, sar)
    assert client.AuthorizationV1Api(k8s).create_subject_access_review(sar).status.allowed is True


@needs_kubectl
def test_kubectl_auth_can_i(kubeconfig: Path, kube_emulator, robot, rbac_api) -> None:
    token = robot.configuration.api_key["authorization"].split(" ", 1)[1]
    role(rbac_api, "pod-reader", [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}],
         "default")
    bind(rbac_api, "robot-reads-pods", "Role", "pod-reader", namespace="default")
    yes = kubectl(kubeconfig, "auth", "can-i", "list", "pods", "-n", "default", token=token)
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes"), yes.stderr
    sub = kubectl(kubeconfig, "auth", "can-i", "get", "pods", "--subresource=log", "-n", "default", token=token)
    assert sub.stdout.strip() == "yes", sub.stderr
    no = kubectl(kubeconfig, "auth", "can-i", "delete", "pods", "-n", "default", token=token)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    listed = kubectl(kubeconfig, "auth", "can-i", "--list", "-n", "default", token=token)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == ["pods"] and "[get list]" in line for line in listed.stdout.splitlines())
    denied = kubectl(kubeconfig, "get", "nodes", token=token)
    assert denied.returncode != 0
    assert ('nodes is forbidden: User "system:serviceaccount:default:robot" cannot list resource "nodes" '
            'in API group "" at the cluster scope') in denied.stderr


def test_every_decision_is_audited(kube_emulator, robot) -> None:
    mine = client.CoreV1Api(robot)
    forbidden(mine.list_namespaced_pod, "default")
    entries = [e for e in kube_emulator.security.audit if e["user"] == "system:serviceaccount:default:robot"]
    refused = [e for e in entries if not e["allowed"]]
    assert refused[-1] | {"time": 0} == {
        "user": "system:serviceaccount:default:robot",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
        "verb": "list", "group": "", "resource": "pods", "subresource": "", "namespace": "default", "name": "",
        "allowed": False, "time": 0,
        "message": 'pods is forbidden: User "system:serviceaccount:default:robot" cannot list resource "pods" '
                   'in API group "" in the namespace "default"'}


def test_audit_log_file(tmp_path: Path) -> None:
    from gpucaas.devtools.kube_emulator import KubeEmulator

    log = tmp_path / "audit.jsonl"
    with KubeEmulator(audit_log=log) as emu:
        http = urllib3.PoolManager()
        assert http.request("GET", f"{emu.url}/api/v1/namespaces",
                            headers={"Authorization": f"Bearer {emu.admin_token}"}).status == 200
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"user": "kubernetes-admin", "verb": "list", "resource": "namespaces", "allowed": True}.items() <= \
        entries[-1].items()
