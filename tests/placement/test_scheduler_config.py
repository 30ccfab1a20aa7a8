"""deploy/scheduler: the KubeSchedulerConfiguration calls the verbs this extender serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from devtools.local_cluster import KUBE_VERSION
from services.placement.fleet import FleetIndex
from services.placement.server import create_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "scheduler"
#: the release the tests run (its schema, x.y.0, checks the manifests)
TESTED_KUBE = "{}.{}.0".format(*KUBE_VERSION.lstrip("v").split(".")[:2])
#: A (kubeadm, host network): the Service's fixed ClusterIP; B (a pod): its DNS name.
URL_PREFIX = {
    "default": "http://10.96.0.88:8888",
    "second": "http://gpucaas-scheduler-extender.gpucaas-system.svc:8888",
}

#: The Lease rules of the bootstrap ClusterRole system:kube-scheduler (Kubernetes'
#: plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go): create any Lease,
#: get/update only the one named kube-scheduler.
SYSTEM_KUBE_SCHEDULER_LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "update"],
        "resourceNames": ["kube-scheduler"],
    },
]


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _extenders() -> list[tuple[str, dict[str, Any]]]:
    default = _docs("kube-scheduler-config.yaml")[0]
    config_map = next(d for d in _docs("second-scheduler.yaml") if d["kind"] == "ConfigMap")
    second = yaml.safe_load(config_map["data"]["config.yaml"])
    return [("default", default), ("second", second)]


@pytest.mark.parametrize(("which", "config"), _extenders(), ids=lambda v: v if isinstance(v, str) else "")
def test_extender_entry_matches_the_server(which: str, config: dict[str, Any]) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    [ext] = config["extenders"]
    routes = {r.path for r in create_app(FleetIndex()).routes if "POST" in getattr(r, "methods", set())}
    for verb in ("filterVerb", "bindVerb"):
        assert f"/{ext[verb]}" in routes
    # the filter answers the best fit alone: a prioritize call would only score ties alike
    assert "prioritizeVerb" not in ext and "weight" not in ext
    assert ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ext["ignorable"] is False
    assert ext["urlPrefix"] == URL_PREFIX[which]
    fit = config["profiles"][0]["pluginConfig"][0]
    assert fit["name"] == "NodeResourcesFit" and fit["args"]["scoringStrategy"]["type"] == "MostAllocated"


def test_the_dra_configuration_scores_only() -> None:
    """allocation.mode=dra: the extender scores nodes; the scheduler's DRA plugin filters,
    allocates the claims and binds (the chart serves no bind verb in that mode)."""
    from tests.deploy.rendering import render

    [config] = _docs("kube-scheduler-config-dra.yaml")
    assert (config["apiVersion"], config["kind"]) == ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")
    [ext] = config["extenders"]
    routes = {r.path for r in create_app(FleetIndex()).routes if "POST" in getattr(r, "methods", set())}
    assert f"/{ext['prioritizeVerb']}" in routes
    assert not {"filterVerb", "bindVerb", "preemptVerb", "managedResources"} & set(ext)
    assert ext["nodeCacheCapable"] is True and ext["urlPrefix"] == URL_PREFIX["default"]
    # the fields are kube-scheduler's Extender type's (k8s.io/kube-scheduler/config/v1)
    assert set(ext) <= {
        "urlPrefix",
        "filterVerb",
        "preemptVerb",
        "prioritizeVerb",
        "weight",
        "bindVerb",
        "enableHTTPS",
        "tlsConfig",
        "httpTimeout",
        "nodeCacheCapable",
        "managedResources",
        "ignorable",
    }
    objects = render({"allocation": {"mode": "dra"}, "schedulerExtender": {"enabled": True}})
    env = {
        e["name"]: e.get("value")
        for d in objects
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpucaas-scheduler-extender"
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GPUCAAS_PLACEMENT_BIND"] == "false"


def test_both_ways_configure_the_same_extender() -> None:
    (_, default), (_, second) = _extenders()
    strip = lambda exts: [{k: v for k, v in e.items() if k != "urlPrefix"} for e in exts]  # noqa: E731
    assert strip(default["extenders"]) == strip(second["extenders"])
    assert second["profiles"][0]["schedulerName"] == "gpucaas-scheduler"


def test_second_scheduler_manifests_validate() -> None:
    for doc in _docs("second-scheduler.yaml"):
        kubernetes_validate.validate(doc, TESTED_KUBE, strict=True)


def test_the_second_scheduler_runs_the_tested_release() -> None:
    """Its kube-scheduler is the release every test runs (upstream/build.sh builds it)."""
    build_sh = (DEPLOY.parents[1] / "upstream" / "build.sh").read_text()
    assert f"KUBE_VERSION={KUBE_VERSION}\n" in build_sh
    deployment = next(d for d in _docs("second-scheduler.yaml") if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/kube-scheduler:{KUBE_VERSION}"


def _allows(rules: list[dict[str, Any]], verb: str, group: str, resource: str, name: str) -> bool:
    """One RBAC rule check as the authorizer makes it (verbs, apiGroups, resources, resourceNames)."""
    for r in rules:
        if (
            (verb in r["verbs"] or "*" in r["verbs"])
            and (group in r["apiGroups"] or "*" in r["apiGroups"])
            and (resource in r["resources"] or "*" in r["resources"])
            and (not r.get("resourceNames") or name in r["resourceNames"])
        ):
            return True
    return False


def _rules_of(docs: list[dict[str, Any]], sa: str, sa_ns: str, namespace: str) -> list[dict[str, Any]]:
    """Rules bound to the ServiceAccount that apply in ``namespace`` (system:kube-scheduler from
    the bootstrap policy)."""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d.get("rules", [])
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    roles[("ClusterRole", None, "system:kube-scheduler")] = SYSTEM_KUBE_SCHEDULER_LEASE_RULES
    rules: list[dict[str, Any]] = []
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == sa_ns for s in b["subjects"]
        ):
            continue
        if b["kind"] == "RoleBinding" and b["metadata"]["namespace"] != namespace:
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        rules += roles.get((ref["kind"], ns, ref["name"]), [])
    return rules


def test_the_second_scheduler_may_hold_its_leader_lease() -> None:
    docs = _docs("second-scheduler.yaml")
    _, second = _extenders()[1]
    election = second["leaderElection"]
    lease_ns, lease = election["resourceNamespace"], election["resourceName"]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    rules = _rules_of(docs, sa, deployment["metadata"]["namespace"], lease_ns)
    for verb in ("get", "create", "update"):
        assert _allows(rules, verb, "coordination.k8s.io", "leases", lease), (verb, lease)
    # and no more than that Lease: another one in the namespace stays read/update-protected
    assert not _allows(rules, "update", "coordination.k8s.io", "leases", "someone-elses-lease")
    # the bootstrap role alone would not do (the defect this Role fixes)
    assert not _allows(SYSTEM_KUBE_SCHEDULER_LEASE_RULES, "update", "coordination.k8s.io", "leases", lease)


def test_the_default_scheduler_keeps_its_own_lease() -> None:
    default = _extenders()[0][1]
    election = default["leaderElection"]
    assert election["leaderElect"] is True
    assert election.get("resourceName", "kube-scheduler") == "kube-scheduler"
    assert election.get("resourceNamespace", "kube-system") == "kube-system"
    assert _allows(SYSTEM_KUBE_SCHEDULER_LEASE_RULES, "update", "coordination.k8s.io", "leases", "kube-scheduler")


def test_the_kubeadm_url_is_the_charts_fixed_cluster_ip() -> None:
    """A host-network static scheduler cannot resolve *.svc: it calls the Service's fixed ClusterIP."""
    from urllib.parse import urlsplit

    from tests.deploy.rendering import find, render

    url = urlsplit(URL_PREFIX["default"])
    objects = render({"schedulerExtender": {"enabled": True, "service": {"clusterIP": url.hostname}}})
    service = find(objects, "Service", "gpucaas-scheduler-extender")
    assert service["spec"]["clusterIP"] == url.hostname
    assert [p["port"] for p in service["spec"]["ports"]] == [url.port]
    assert not url.hostname.endswith(".svc")
    kubernetes_validate.validate(service, TESTED_KUBE, strict=True)
    # unset: the Service gets an address allocated as usual
    plain = find(render({"schedulerExtender": {"enabled": True}}), "Service", "gpucaas-scheduler-extender")
    assert "clusterIP" not in plain["spec"]
