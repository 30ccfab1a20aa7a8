"""What a first `helm install` meets: every Secret the chart references exists (the chart or
cert-manager makes it, or docs/deploy.md has the step), no secret sits in a values file, a
plain install needs no other project's CRDs, internal names are issued by the internal CA and
public ones by the public issuer, the schema is migrated once by a hook Job, and `helm test`
checks the API and the controller."""

from __future__ import annotations

import base64
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.rendering import (
    KUBE_VERSIONS,
    NAMESPACE,
    PRODUCTION_VALUES,
    REPO,
    component,
    find,
    is_hook,
    pod_spec,
    production_values,
    render,
    render_notes,
)

DEPLOY_DOC = REPO / "docs" / "deploy.md"


def _env(workload: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod_spec(workload)["containers"][0]["env"]}


def _referenced_secrets(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Secret name -> where it is referenced (env, volumes, Ingress TLS, Traefik, PodMonitors)."""
    out: dict[str, str] = {}
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in ("Deployment", "DaemonSet", "Job", "Pod"):
            spec = pod_spec(obj)
            for c in spec["containers"]:
                for e in c.get("env") or []:
                    if ref := (e.get("valueFrom") or {}).get("secretKeyRef"):
                        out[ref["name"]] = where
            for v in spec.get("volumes") or []:
                if "secret" in v and not v["secret"].get("optional"):
                    out[v["secret"]["secretName"]] = where
        elif obj["kind"] == "Ingress":
            out.update({t["secretName"]: where for t in obj["spec"].get("tls") or []})
        elif obj["kind"] == "Middleware" and "forwardAuth" in obj["spec"]:
            out[obj["spec"]["forwardAuth"]["tls"]["caSecret"]] = where
        elif obj["kind"] == "PodMonitor":
            for ep in obj["spec"]["podMetricsEndpoints"]:
                if secret := ((ep.get("tlsConfig") or {}).get("ca") or {}).get("secret"):
                    out[secret["name"]] = where
        elif obj["kind"] == "Issuer" and "ca" in obj["spec"]:
            out[obj["spec"]["ca"]["secretName"]] = where
    return out


def _documented_secret_steps() -> set[str]:
    """Names of the Secrets docs/deploy.md has the reader create (`kubectl ... create secret ... NAME`)."""
    text = DEPLOY_DOC.read_text().replace("\\\n", " ")
    return set(re.findall(r"kubectl\b[^\n]*\bcreate secret (?:generic|tls) ([a-z0-9-]+)", text))


@pytest.mark.parametrize("values_name", ["defaults", "production"])
def test_every_referenced_secret_is_made_by_the_chart_or_a_documented_step(values_name: str) -> None:
    values = production_values() if values_name == "production" else {}
    objects = render(values)
    made = {o["metadata"]["name"] for o in objects if o["kind"] == "Secret"}
    made |= {o["spec"]["secretName"] for o in objects if o["kind"] == "Certificate"}  # cert-manager writes them
    documented = _documented_secret_steps()
    missing = {name: where for name, where in _referenced_secrets(objects).items() if name not in made | documented}
    assert not missing, f"referenced, made by nothing and in no step of docs/deploy.md: {missing}"
    if values_name == "production":  # what production leaves to the operator, each a documented step
        assert set(_referenced_secrets(objects)) - made == {"gpucaas-database", "gpucaas-rate-limits"}


def test_no_values_file_holds_a_secret() -> None:
    """Credentials only ever come from Secrets: no URL with a password, no token, in the values."""
    for path in (PRODUCTION_VALUES, REPO / "deploy" / "helm" / "gpucaas" / "values.yaml"):
        values = yaml.safe_load(path.read_text())

        def walk(node: Any, where: str, path: Any = path) -> None:
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, f"{where}.{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{where}[{i}]")
            elif isinstance(node, str):
                assert not re.search(r"://[^/@\s]*:[^/@\s]+@", node), f"{path.name}: {where} holds a password"
                if where.endswith(("url", "token", "password")):
                    assert node == "", f"{path.name}: {where} must stay empty (a Secret holds it)"

        walk(values, "")


def test_the_admin_token_is_generated_once_and_kept() -> None:
    objects = render({})
    secret = find(objects, "Secret", "gpucaas-admin-token")
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    token = base64.b64decode(secret["data"]["admin-token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{48}", token)
    # offline (no cluster to look it up in) every render makes a new one; on a cluster `lookup`
    # reads the stored one back, so an upgrade keeps it
    again = base64.b64decode(find(render({}), "Secret", "gpucaas-admin-token")["data"]["admin-token"]).decode()
    assert again != token
    assert _env(find(objects, "Deployment", "gpucaas-api"))["GPUCAAS_ADMIN_TOKEN"] == {
        "secretKeyRef": {"name": "gpucaas-admin-token", "key": "admin-token"}
    }
    from services.api.settings import Settings

    assert Settings(admin_token=token).admin_token is not None  # the API's own rule accepts it
    own = render({"api": {"adminToken": {"existingSecret": "vault-synced", "key": "token"}}})
    assert not [o for o in own if o["kind"] == "Secret"]
    assert _env(find(own, "Deployment", "gpucaas-api"))["GPUCAAS_ADMIN_TOKEN"] == {
        "secretKeyRef": {"name": "vault-synced", "key": "token"}
    }
    assert "get secret gpucaas-admin-token" in render_notes({})


#: The kinds a cluster without any add-on serves, and the chart's own (its crds/ and templates).
def _needs_only_kubernetes_and_the_chart(objects: list[dict[str, Any]]) -> list[str]:
    own = {"kopf.dev/v1", "gpucaas.dev/v1alpha1"}
    foreign = []
    for obj in objects:
        if obj["apiVersion"] in own:
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            foreign.append(f"{obj['apiVersion']}/{obj['kind']}")
    return foreign


def test_a_plain_install_needs_no_other_projects_crds() -> None:
    """Defaults: no Traefik Middleware, no cert-manager or prometheus-operator object; each comes
    with its own switch (endpoints.traefik.middlewares, certManager, monitoring)."""
    assert _needs_only_kubernetes_and_the_chart(render({})) == []
    production = set(_needs_only_kubernetes_and_the_chart(render(production_values())))
    assert production == {
        "traefik.io/v1alpha1/Middleware",
        "cert-manager.io/v1/Certificate",
        "cert-manager.io/v1/Issuer",
        "monitoring.coreos.com/v1/PodMonitor",
        "monitoring.coreos.com/v1/PrometheusRule",
    }


def test_traefik_middlewares_are_optional_and_private_endpoints_fail_closed_without_them() -> None:
    notes = render_notes({})
    assert "Traefik serves no private endpoint until they" in notes
    off = render({})
    assert not [o for o in off if o["apiVersion"].startswith("traefik.io/")]
    on = render({"endpoints": {"traefik": {"middlewares": True}}})
    middlewares = {o["metadata"]["name"]: o for o in on if o["kind"] == "Middleware"}
    assert set(middlewares) == {"gpucaas-endpoint-auth", "gpucaas-endpoint-strip"}
    # with or without them, the API annotates private endpoints with the same chain, which
    # Traefik refuses to route while a middleware in it is missing
    for objects in (off, on):
        chain = _env(find(objects, "Deployment", "gpucaas-api"))["GPUCAAS_ENDPOINT_AUTH_ANNOTATIONS"]
        assert chain == (
            '{"traefik.ingress.kubernetes.io/router.middlewares":'
            f'"{NAMESPACE}-gpucaas-endpoint-auth@kubernetescrd,{NAMESPACE}-gpucaas-endpoint-strip@kubernetescrd"}}'
        )
    assert "Traefik serves no private endpoint" not in render_notes({"endpoints": {"traefik": {"middlewares": True}}})
    other = {"endpoints": {"authAnnotations": {"nginx.ingress.kubernetes.io/auth-url": "https://x/v1/endpoint-auth"}}}
    assert "Traefik serves no private endpoint" not in render_notes(other)


def _internal(name: str) -> bool:
    return name.endswith((".svc", ".svc.cluster.local")) or "." not in name or name.endswith(f".{NAMESPACE}")


def test_internal_names_from_the_internal_ca_public_names_from_the_public_issuer() -> None:
    objects = render(production_values())
    certificates = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Certificate"}
    internal, public = certificates["gpucaas-api-tls"], certificates["gpucaas-api-public-tls"]
    ca = certificates["gpucaas-ca"]
    assert all(_internal(n) for n in internal["dnsNames"]) and "gpucaas-api.gpucaas-system.svc" in internal["dnsNames"]
    assert internal["issuerRef"] == {"name": "gpucaas-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert public["dnsNames"] == ["gpus.example.com"]
    assert public["issuerRef"]["name"] == "letsencrypt-production"
    for spec in certificates.values():  # the public issuer is never asked for an internal name
        if spec["issuerRef"]["name"] == "letsencrypt-production":
            assert not any(_internal(n) for n in spec["dnsNames"])
    # the internal CA: self-signed root -> CA Issuer on its Secret
    issuers = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Issuer"}
    assert issuers["gpucaas-selfsigned"] == {"selfSigned": {}}
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == "gpucaas-selfsigned"
    assert issuers["gpucaas-ca"] == {"ca": {"secretName": ca["secretName"]}}
    # who uses which: the pods serve the internal certificate, the Ingress the public one,
    # Traefik's forwardAuth verifies the API with the internal CA
    api = pod_spec(find(objects, "Deployment", "gpucaas-api"))
    assert {"name": "tls", "secret": {"secretName": "gpucaas-api-tls", "defaultMode": 0o440}} in api["volumes"]
    assert find(objects, "Ingress", "gpucaas-api")["spec"]["tls"][0]["secretName"] == public["secretName"]
    assert (
        find(objects, "Middleware", "gpucaas-endpoint-auth")["spec"]["forwardAuth"]["tls"]["caSecret"]
        == (internal["secretName"])
    )
    # an internal PKI of one's own instead of the chart's CA
    own = render(
        production_values()
        | {
            "certManager": {
                **production_values()["certManager"],
                "internalIssuer": {"create": False, "issuerRef": {"name": "corp-pki", "kind": "ClusterIssuer"}},
            }
        }
    )
    assert not [o for o in own if o["kind"] == "Issuer"]
    assert find(own, "Certificate", "gpucaas-api-tls")["spec"]["issuerRef"]["name"] == "corp-pki"


def _hook(obj: dict[str, Any]) -> tuple[str, int, str]:
    a = obj["metadata"]["annotations"]
    return a["helm.sh/hook"], int(a.get("helm.sh/hook-weight", "0")), a.get("helm.sh/hook-delete-policy", "")


def test_migrations_run_once_from_a_hook_job_and_the_replicas_wait() -> None:
    from services.api.settings import Settings

    objects = render(production_values())
    job = find(objects, "Job", "gpucaas-migrate")
    account = find(objects, "ServiceAccount", "gpucaas-migrate")
    assert _hook(job) == ("pre-install,pre-upgrade", 0, "before-hook-creation,hook-succeeded")
    assert _hook(account)[0] == _hook(job)[0] and _hook(account)[1] < _hook(job)[1]  # made before the Job
    spec = pod_spec(job)
    assert spec["containers"][0]["args"] == ["api", "migrate"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    env = _env(job)
    assert env["GPUCAAS_DATABASE_URL"] == {"secretKeyRef": {"name": "gpucaas-database", "key": "database-url"}}
    assert _env(find(objects, "Deployment", "gpucaas-api"))["GPUCAAS_MIGRATE_ON_START"] == "false"
    assert Settings(migrate_on_start="false").migrate_on_start is False  # as the API reads the value
    # the release's own objects are not hooks: a hook is not part of what it installs
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Job"] == ["gpucaas-migrate"]
    assert {component(o) for o in objects if is_hook(o)} == {"migrate", "helm-test"}

    # database.url: the Job reads its own hook copy (hooks run before the release's Secret exists)
    url = "postgresql+psycopg://u:p@db:5432/gpucaas"
    from_url = render({"database": {"existingSecret": "", "url": url}})
    copy = find(from_url, "Secret", "gpucaas-migrate-database")
    assert _hook(copy)[1] < 0 and base64.b64decode(copy["data"]["database-url"]).decode() == url
    assert _env(find(from_url, "Job", "gpucaas-migrate"))["GPUCAAS_DATABASE_URL"]["secretKeyRef"]["name"] == (
        "gpucaas-migrate-database"
    )
    assert not is_hook(find(from_url, "Secret", "gpucaas-database"))

    # installs that skip hooks: every replica migrates at start (under the database's lock)
    skipped = render({"api": {"migrations": {"hookJob": False}}})
    assert not [o for o in skipped if o["kind"] == "Job"]
    assert _env(find(skipped, "Deployment", "gpucaas-api"))["GPUCAAS_MIGRATE_ON_START"] == "true"


def test_helm_test_checks_the_api_and_the_controller() -> None:
    objects = render(production_values())
    pods = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    assert set(pods) == {"gpucaas-test-api", "gpucaas-test-controller"}
    for pod in pods.values():
        assert _hook(pod)[0] == "test" and pod["spec"]["serviceAccountName"] == "gpucaas-helm-test"
        assert pod["spec"]["containers"][0]["command"][:3] == ["python", "-m", "gpucaas.helm_test"]
    _, _, _, which, url, ca = pods["gpucaas-test-api"]["spec"]["containers"][0]["command"]
    host = re.fullmatch(r"https://([^:/]+):443/readyz", url)
    assert which == "api" and host is not None
    assert host.group(1) in find(objects, "Certificate", "gpucaas-api-tls")["spec"]["dnsNames"]
    volume = pods["gpucaas-test-api"]["spec"]["volumes"][0]["secret"]
    assert volume["secretName"] == "gpucaas-api-tls" and volume["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert pods["gpucaas-test-api"]["spec"]["automountServiceAccountToken"] is False  # no Kubernetes rights
    assert ca == "/etc/gpucaas/ca/ca.crt"
    command = pods["gpucaas-test-controller"]["spec"]["containers"][0]["command"]
    assert command[3:] == ["controller", NAMESPACE, "gpucaas-controller"]
    role = find(objects, "Role", "gpucaas-helm-test")
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["gpucaas-controller"], "verbs": ["get"]}
    ]
    # the release's, not test hooks: `helm test --logs` reads every test hook's logs as a pod's
    kinds = ("ServiceAccount", "Role", "RoleBinding")
    identity = [o for o in objects if o["metadata"]["name"] == "gpucaas-helm-test" and o["kind"] in kinds]
    assert sorted(o["kind"] for o in identity) == sorted(kinds)
    assert not any(is_hook(o) for o in identity)
