"""The chart renders, lints strictly, and every object is valid Kubernetes.

Built-in kinds are checked by kubernetes-validate in strict mode (unknown fields
are errors) for the oldest and newest Kubernetes the chart targets; custom
resources against the schema of their own CRD: the chart's, strict subsets of
cert-manager's Certificate and Issuer and of the prometheus-operator's PodMonitor and
PrometheusRule (tests/deploy/custom_resources.py), and Traefik's own Middleware CRD, read
from the Traefik module that upstream/build.sh builds the sandbox's controller from
(unknown fields are errors there too, as ``kubectl apply --validate=strict`` would say).
"""

from __future__ import annotations

import copy
import importlib
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from core import crds as core_crds
from tests.deploy import custom_resources
from tests.deploy.rendering import (
    CHART,
    CORE_CRDS,
    KUBE_VERSIONS,
    chart_crds,
    find,
    production_values,
    render,
    render_notes,
)

VALUE_SETS = {
    "defaults": {},
    "production": production_values(),
    "everything-on": {
        "schedulerExtender": {"enabled": True},
        "certManager": {"enabled": True, "issuerRef": {"name": "ca"}},
        "api": {"ingress": {"enabled": True, "tlsSecretName": "edge-tls"}, "tls": {"existingSecret": ""}},
        "database": {"existingSecret": "", "url": "postgresql+psycopg://u:p@db:5432/gpucaas"},
        "fabric": {"libvirtGroupId": 108},
        "endpoints": {"traefik": {"middlewares": True}},
        "monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        "networkPolicy": {"apiFrom": [{"namespaceSelector": {"matchLabels": {"edge": "yes"}}}]},
    },
    "dra": {"allocation": {"mode": "dra"}},
    "dra-everything-on": {
        "allocation": {"mode": "dra"},
        "draDriver": {"bindingConditions": True},
        "schedulerExtender": {"enabled": True},
    },
}
#: resource.k8s.io/v1 (DeviceClass) is GA since Kubernetes 1.34 and only rendered in
#: allocation.mode=dra: those objects are checked for 1.34 and 1.36 (binding conditions).
DRA_KUBE_VERSIONS = ("1.34.0", "1.36.0")


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD in the chart's crds/."""
    schemas = {}
    for crd in chart_crds():
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            schemas[key] = version["schema"]["openAPIV3Schema"]
    schemas.update(custom_resources.SCHEMAS)
    middleware = _traefik_middleware_crd()
    schemas[("traefik.io/v1alpha1", "Middleware")] = middleware["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schemas


def _traefik_middleware_crd() -> dict[str, Any]:
    """Traefik's Middleware CRD, from the pinned Traefik module (upstream/traefik/go.mod)."""
    wrapper = Path(CHART).parents[2] / "upstream" / "traefik"
    out = subprocess.run(
        ["go", "mod", "download", "-json", "github.com/traefik/traefik/v3"],
        cwd=wrapper,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    folder = Path(json.loads(out.stdout)["Dir"])
    crd = yaml.safe_load(
        (folder / "docs/content/reference/dynamic-configuration/traefik.io_middlewares.yaml").read_text()
    )
    assert crd["spec"]["group"] == "traefik.io" and crd["spec"]["versions"][0]["name"] == "v1alpha1"
    return crd


def _no_unknown_fields(obj: Any, schema: dict[str, Any], where: str) -> None:
    """What Kubernetes would prune (or strict validation refuse): a field its CRD does not name."""
    if isinstance(obj, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        unknown = sorted(set(obj) - set(schema["properties"]))
        assert not unknown, f"{where}: unknown field(s) {unknown}"
        for key, value in obj.items():
            _no_unknown_fields(value, schema["properties"][key], f"{where}.{key}")
    elif isinstance(obj, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, value in obj.items():
            _no_unknown_fields(value, schema["additionalProperties"], f"{where}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(obj):
            _no_unknown_fields(value, schema["items"], f"{where}[{i}]")


def _validate_custom(obj: dict[str, Any], schemas: dict[tuple[str, str], dict[str, Any]]) -> None:
    schema = schemas[(obj["apiVersion"], obj["kind"])]
    jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)
    _no_unknown_fields(
        {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}, schema, obj["kind"]
    )


@pytest.fixture(scope="module")
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    return _crd_schemas()


@pytest.mark.parametrize("values_name", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_every_rendered_object_is_valid(values_name: str, crd_schemas: dict) -> None:
    objects = render(VALUE_SETS[values_name])
    assert objects, "the chart rendered nothing"
    checked_builtin = checked_custom = 0
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in crd_schemas:
            _validate_custom(obj, crd_schemas)
            checked_custom += 1
            continue
        versions = DRA_KUBE_VERSIONS if obj["apiVersion"].startswith("resource.k8s.io/") else KUBE_VERSIONS
        for version in versions:
            # raises ValidationError / SchemaNotFoundError: an unknown kind is a failure here
            kubernetes_validate.validate(obj, version, strict=True)
        checked_builtin += 1
    assert checked_builtin >= 15
    assert checked_custom >= 1  # the ClusterKopfPeering at least


@pytest.mark.parametrize("values_name", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_lint_strict_is_clean(values_name: str) -> None:
    import helm_python

    report = helm_python.lint(CHART, VALUE_SETS[values_name], strict=True, namespace="gpucaas-system")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


def test_example_custom_resources_match_their_crds(crd_schemas: dict) -> None:
    """The objects the services exchange fit the schemas the chart installs."""
    tenancy = {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "Tenancy",
        "metadata": {"name": "acme"},
        "spec": {
            "gpuQuota": 16,
            "podQuota": 20,
            "network": {"allowInternet": True},
            "nfs": {"server": "10.0.0.5", "path": "/export/acme", "readOnly": False},
        },
        "status": {"phase": "Ready", "namespace": "tenant-acme", "observedGeneration": 1},
    }
    lease = {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "GPULease",
        "metadata": {"name": "node-a-0000-18-00-0"},
        "spec": {
            "node": "node-a",
            "pciAddress": "0000:18:00.0",
            "deviceId": "0x2330",
            "physicalId": 2,
            "model": "H100-SXM5",
        },
        "status": {"state": "Free"},
    }
    fabric = {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "FabricState",
        "metadata": {"name": "node-a"},
    }
    for obj in (tenancy, lease, fabric):
        _validate_custom(obj, crd_schemas)
    bad = copy.deepcopy(lease)
    bad["status"]["state"] = "Borrowed"
    with pytest.raises(jsonschema.ValidationError):
        _validate_custom(bad, crd_schemas)
    bad_tenancy = copy.deepcopy(tenancy)
    bad_tenancy["spec"]["gpuQuota"] = -1
    with pytest.raises(jsonschema.ValidationError):
        _validate_custom(bad_tenancy, crd_schemas)


def test_chart_crds_are_the_core_crds_and_upgrades_update_them() -> None:
    """files/crds/ carries exact copies of core/crds/*.yaml, which templates/crds.yaml renders as
    they are plus ``helm.sh/resource-policy: keep``: as templates, `helm upgrade` updates them
    (crds/ is installed once and never again), and `helm uninstall` leaves them with every
    Tenancy and GPULease. crds/ keeps only Kopf's peering CRDs (the ClusterKopfPeering template
    needs its CRD before the templates are applied)."""
    files = CHART / "files" / "crds"
    for name in core_crds.CRD_FILES:
        core_text = (CORE_CRDS / name).read_text()
        assert (files / name).read_text() == core_text, f"files/crds/{name} is not core/crds/{name}: run `make crds`"
    assert {p.name for p in files.iterdir()} == set(core_crds.CRD_FILES)
    assert {p.name for p in (CHART / "crds").iterdir()} == {"kopfpeerings.kopf.dev.yaml"}
    for values in ({}, production_values()):
        rendered = {o["metadata"]["name"]: o for o in render(values) if o["kind"] == "CustomResourceDefinition"}
        assert set(rendered) == {name.removesuffix(".yaml") for name in core_crds.CRD_FILES}
        for name, crd in rendered.items():
            assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
            as_core = {**crd, "metadata": {k: v for k, v in crd["metadata"].items() if k != "annotations"}}
            assert as_core == yaml.safe_load((CORE_CRDS / f"{name}.yaml").read_text())
    kinds = {crd["spec"]["names"]["kind"] for crd in chart_crds()}
    assert kinds == {"Tenancy", "GPULease", "FabricState", "WarmImage", "ClusterKopfPeering", "KopfPeering"}
    for crd in chart_crds():
        kubernetes_validate.validate(crd, KUBE_VERSIONS[-1], strict=True)


def test_runtime_class_targets_gpu_nodes() -> None:
    objects = render(production_values())
    rc = find(objects, "RuntimeClass", "kata-qemu-nvidia-gpu")
    assert rc["handler"] == "kata-qemu-nvidia-gpu"
    assert rc["scheduling"]["nodeSelector"] == {"gpucaas.dev/gpu-node": "true"}
    assert rc["scheduling"]["tolerations"][0]["key"] == "gpucaas.dev/gpu-node"
    assert set(rc["overhead"]["podFixed"]) == {"cpu", "memory"}


def test_values_map_to_env_vars() -> None:
    """Each component setting reaches its container as the variable its settings class reads."""
    objects = render(
        {
            "logLevel": "DEBUG",
            "resourceName": "example.com/gpu",
            "fabricSocket": "/run/gpucaas/fm.sock",
            "api": {"port": 9443, "defaultGpuQuota": 4, "adminToken": {"existingSecret": "adm"}},
            "fabric": {"fmAddress": "10.1.1.1:6666", "fmBackend": "simulator", "diskImage": "fm.qcow2"},
            "devicePlugin": {"fabricRequired": False},
            "controller": {"peering": {"name": "gpucaas-peers"}, "nodeCidrs": ["203.0.113.0/24"]},
            "schedulerExtender": {"enabled": True, "bind": False},
        }
    )

    def env(kind: str, name: str) -> dict[str, Any]:
        container = find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names)), f"{name}: duplicate env {names}"
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}

    api = env("Deployment", "gpucaas-api")
    assert api["GPUCAAS_PORT"] == "9443"
    assert api["GPUCAAS_DEFAULT_GPU_QUOTA"] == "4"
    assert api["GPUCAAS_GPU_RESOURCE"] == "example.com/gpu"
    assert api["GPUCAAS_LOG_LEVEL"] == "DEBUG"
    assert api["GPUCAAS_DATABASE_URL"] == {"secretKeyRef": {"name": "gpucaas-database", "key": "database-url"}}
    assert api["GPUCAAS_ADMIN_TOKEN"] == {"secretKeyRef": {"name": "adm", "key": "admin-token"}}
    assert api["GPUCAAS_TLS_CERT"] == "/etc/gpucaas/tls/tls.crt"
    plugin = env("DaemonSet", "gpucaas-device-plugin")
    fabric = env("DaemonSet", "gpucaas-fabric")
    assert plugin["GPUCAAS_FABRIC_SOCKET"] == fabric["GPUCAAS_FABRIC_SOCKET"] == "/run/gpucaas/fm.sock"
    assert plugin["GPUCAAS_RESOURCE_NAME"] == "example.com/gpu"
    assert plugin["GPUCAAS_FABRIC_REQUIRED"] == "false"
    assert plugin["GPUCAAS_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert fabric["GPUCAAS_FABRIC_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert fabric["GPUCAAS_FABRIC_FM_ADDRESS"] == "10.1.1.1:6666"
    assert fabric["GPUCAAS_FABRIC_FM_BACKEND"] == "simulator"
    assert fabric["GPUCAAS_FABRIC_DISK_IMAGE"] == "/var/lib/gpucaas/images/fm.qcow2"
    controller = env("Deployment", "gpucaas-controller")
    assert controller["GPUCAAS_CONTROLLER_PEERING"] == "gpucaas-peers"
    assert controller["GPUCAAS_CONTROLLER_STANDALONE"] == "false"
    assert controller["GPUCAAS_LOG_LEVEL"] == "DEBUG"
    for component in (api, plugin, fabric, controller):
        assert component["GPUCAAS_LOG_FORMAT"] == "json"  # logJson defaults to true
    assert controller["GPUCAAS_CONTROLLER_LIVENESS"] == "http://0.0.0.0:8080/healthz"
    assert json.loads(controller["GPUCAAS_CONTROLLER_NODE_CIDRS"]) == ["203.0.113.0/24"]
    assert find(objects, "ClusterKopfPeering", "gpucaas-peers")
    extender = env("Deployment", "gpucaas-scheduler-extender")
    assert extender["GPUCAAS_PLACEMENT_GPU_RESOURCE"] == "example.com/gpu"
    assert extender["GPUCAAS_PLACEMENT_BIND"] == "false"
    assert extender["GPUCAAS_LOG_LEVEL"] == "DEBUG"
    standalone = render({"controller": {"peering": {"enabled": False}}})
    container = find(standalone, "Deployment", "gpucaas-controller")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "GPUCAAS_CONTROLLER_STANDALONE", "value": "true"} in container["env"]
    assert not any(o["kind"] == "ClusterKopfPeering" for o in standalone)


#: Values standing in for a Secret's content, by variable (the database URL otherwise).
SECRET_STAND_INS = {
    "GPUCAAS_RATE_LIMIT_STORAGE_URL": "redis://:secret@redis:6379/0",
    "GPUCAAS_ADMIN_TOKEN": "x7Kq2mW9pL4vR8nT3bY6cF1hJ5dG0sZa",  # as the chart generates it: alphanumeric
}


@pytest.mark.parametrize(
    ("settings_module", "settings_class", "kind", "name"),
    [
        ("services.api.settings", "Settings", "Deployment", "gpucaas-api"),
        ("services.tenancy_controller.settings", "ControllerSettings", "Deployment", "gpucaas-controller"),
        ("services.device_plugin.settings", "DevicePluginSettings", "DaemonSet", "gpucaas-device-plugin"),
        ("services.gpu_leases.settings", "LeaseAgentSettings", "DaemonSet", "gpucaas-device-plugin"),
        ("services.fabric.settings", "FabricSettings", "DaemonSet", "gpucaas-fabric"),
        ("services.placement.settings", "PlacementSettings", "Deployment", "gpucaas-scheduler-extender"),
        ("services.dra_driver.settings", "DraDriverSettings", "DaemonSet", "gpucaas-dra-driver"),
        ("services.warm_images.settings", "WarmImageSettings", "Deployment", "gpucaas-controller"),
    ],
    ids=[
        "api",
        "controller",
        "device-plugin",
        "gpu-leases",
        "fabric",
        "scheduler-extender",
        "dra-driver",
        "warm-images",
    ],
)
def test_rendered_env_is_accepted_by_the_service_settings(
    settings_module: str, settings_class: str, kind: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env the chart sets builds the service's settings class, and every
    GPUCAAS_* variable the chart sets is one that class (or its CLI) reads."""
    module = importlib.import_module(settings_module)
    cls = getattr(module, settings_class)
    values = production_values() | {"schedulerExtender": {"enabled": True}}
    if name == "gpucaas-dra-driver":
        values |= {"allocation": {"mode": "dra"}, "draDriver": {"bindingConditions": True}}
    objects = render(values)
    container = find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]
    prefix = cls.model_config.get("env_prefix", "")
    known = {f"{prefix}{field}".upper() for field in cls.model_fields}
    for field in cls.model_fields.values():
        alias = field.validation_alias
        if alias is not None and hasattr(alias, "choices"):
            known.update(str(c).upper() for c in alias.choices)
    # the logging variables every process reads (core/logging.py), and the classes
    # `gpucaas device-plugin` reads beside each other (gpucaas/gpu_node.py)
    from core.logging import LoggingSettings
    from gpucaas.controller import command as controller_command
    from gpucaas.dra_node import command as dra_driver_command
    from gpucaas.gpu_node import command as device_plugin_command

    also_read = {f"GPUCAAS_LOG_{field}".upper() for field in LoggingSettings.model_fields}
    if name == "gpucaas-device-plugin":
        also_read |= {env for o in device_plugin_command.settings_options for env in o.env}
    if name == "gpucaas-controller":  # the lease timers' and warm images' settings beside the controller's
        also_read |= {env for o in controller_command.settings_options for env in o.env}
    if name == "gpucaas-dra-driver":  # the lease agent's settings beside the driver's
        also_read |= {env for o in dra_driver_command.settings_options for env in o.env}
    for var in container["env"]:
        assert var["name"] in known | also_read, f"{name}: {var['name']} is read by nobody"
        source = var.get("valueFrom", {})
        if "secretKeyRef" in source:  # what such a Secret holds
            value = SECRET_STAND_INS.get(var["name"], "postgresql+psycopg://gpucaas:secret@db:5432/gpucaas")
        elif "fieldRef" in source:
            value = "node-a"
        else:
            value = var["value"]
        monkeypatch.setenv(var["name"], value)
    cls()  # pydantic-settings reads the environment: every value the chart passes must validate


def test_queueing_reaches_the_api_and_the_controller() -> None:
    """queueing.mode is one value for the API (pods labelled with their LocalQueue) and the
    controller (Kueue's objects kept per tenancy), with the GPU nodes' instance type; Kueue's
    rights are granted only with it."""
    for mode, instance_type in (("none", "hgx-h100-8"), ("kueue", "hgx-b200-8")):
        objects = render({"queueing": {"mode": mode, "gpuInstanceType": instance_type}})

        def env(kind: str, name: str, objects: list = objects) -> dict[str, Any]:
            container = find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]
            return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}

        assert env("Deployment", "gpucaas-api")["GPUCAAS_QUEUEING"] == mode
        controller = env("Deployment", "gpucaas-controller")
        assert controller["GPUCAAS_CONTROLLER_QUEUEING"] == mode
        assert controller["GPUCAAS_CONTROLLER_GPU_INSTANCE_TYPE"] == instance_type
        groups = {g for r in find(objects, "ClusterRole", "gpucaas-controller")["rules"] for g in r["apiGroups"]}
        assert ("kueue.x-k8s.io" in groups) == (mode == "kueue")


def test_allocation_mode_reaches_the_api_and_the_controller_and_picks_the_node_daemon() -> None:
    """allocation.mode is one value for every part: the API's and the controller's setting, and
    the node daemon (device plugin or DRA driver) the chart deploys."""
    for mode, daemon, absent in (
        ("device-plugin", "gpucaas-device-plugin", "gpucaas-dra-driver"),
        ("dra", "gpucaas-dra-driver", "gpucaas-device-plugin"),
    ):
        objects = render({"allocation": {"mode": mode}})

        def env(kind: str, name: str, objects: list = objects) -> dict[str, Any]:
            container = find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]
            return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}

        assert env("Deployment", "gpucaas-api")["GPUCAAS_ALLOCATION_MODE"] == mode
        assert env("Deployment", "gpucaas-controller")["GPUCAAS_CONTROLLER_ALLOCATION_MODE"] == mode
        assert find(objects, "DaemonSet", daemon)
        names = {o["metadata"]["name"] for o in objects}
        assert absent not in names
        assert "gpucaas-firmware-golden" in names  # the lease agent runs beside either node daemon
    dra = render(
        {
            "allocation": {"mode": "dra"},
            "draDriver": {"bindingConditions": True, "stateDir": "/var/lib/x"},
            "devicePlugin": {"cdiKind": "example.com/gpu"},
        }
    )
    spec = find(dra, "DaemonSet", "gpucaas-dra-driver")["spec"]["template"]["spec"]
    driver = {e["name"]: e.get("value", e.get("valueFrom")) for e in spec["containers"][0]["env"]}
    assert driver["GPUCAAS_DRA_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert driver["GPUCAAS_DRA_BINDING_CONDITIONS"] == "true"
    assert driver["GPUCAAS_DRA_STATE_DIR"] == "/var/lib/x"
    assert driver["GPUCAAS_DRA_CDI_KIND"] == "example.com/gpu"  # the device plugin's CDI names
    assert {"name": "state", "hostPath": {"path": "/var/lib/x", "type": "DirectoryOrCreate"}} in spec["volumes"]
    # the probes connect to the endpoint the driver registers with the kubelet
    from core.dra import DRIVER
    from services.dra_driver.settings import DraDriverSettings

    settings = DraDriverSettings(node_name="n", plugins_dir=driver["GPUCAAS_DRA_PLUGINS_DIR"])
    endpoint = str(settings.plugins_dir / DRIVER / "dra.sock")
    assert spec["containers"][0]["livenessProbe"]["exec"]["command"][-1] == endpoint
    assert spec["containers"][0]["readinessProbe"]["exec"]["command"][-1] == endpoint


def test_device_classes_are_the_cores() -> None:
    """The chart's DeviceClass is exactly core/dra.py's device_class(), which the claim
    templates (tenancy controller) and the driver's attributes agree with."""
    from core import dra

    assert not [o for o in render({}) if o["kind"] == "DeviceClass"]
    classes = [o for o in render({"allocation": {"mode": "dra"}}) if o["kind"] == "DeviceClass"]
    assert [
        {k: v for k, v in o.items() if k != "metadata"} | {"metadata": {"name": o["metadata"]["name"]}} for o in classes
    ] == [dra.device_class()]
    assert not [
        o
        for o in render({"allocation": {"mode": "dra"}, "draDriver": {"deviceClasses": False}})
        if o["kind"] == "DeviceClass"
    ]


def test_database_url_value_becomes_a_secret() -> None:
    url = "postgresql+psycopg://u:p@db:5432/gpucaas"
    objects = render({"database": {"existingSecret": "", "url": url}})
    secret = find(objects, "Secret", "gpucaas-database")
    import base64

    assert base64.b64decode(secret["data"]["database-url"]).decode() == url
    # the only Secret of the defaults: the generated admin token
    assert [o["metadata"]["name"] for o in render({}) if o["kind"] == "Secret"] == ["gpucaas-admin-token"]


def test_notes_tell_how_to_reach_the_api() -> None:
    assert "https://gpus.example.com/" in render_notes(production_values())
    notes = render_notes({})
    assert "port-forward svc/gpucaas-api" in notes
    assert "gpucaas doctor" in notes


def test_notes_in_dra_mode_say_who_checks_the_gpus() -> None:
    notes = render_notes(
        {"allocation": {"mode": "dra"}, "devicePlugin": {"firmware": {"golden": {"0x2330": {"sha256": ["0" * 64]}}}}}
    )
    assert "DRA allocation mode" in notes and "DRA allocation mode" not in render_notes({})
    assert "lease agent runs\nbeside the driver" in notes and "WARNING" not in notes
    unchecked = render_notes({"allocation": {"mode": "dra"}, "devicePlugin": {"leases": {"enabled": False}}})
    assert "GPUs pass from tenant to tenant\nunchecked" in unchecked
    assert "firmware.golden is empty" in render_notes({"allocation": {"mode": "dra"}})


def test_dra_driver_runs_the_lease_agent_with_the_firmware_golden() -> None:
    objects = render({"allocation": {"mode": "dra"}})
    ds = next(o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("dra-driver"))
    container = ds["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUCAAS_LEASES"] == "true" and env["GPUCAAS_DRA_CDI_DIR"] == env["GPUCAAS_DRA_CDI_DIR"].strip()
    assert env["GPUCAAS_FIRMWARE_GOLDEN_FILE"] == "/etc/gpucaas/firmware/golden.json"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["sys"] == env["GPUCAAS_DRA_SYSFS_ROOT"] == "/host/sys"
    assert any(o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("firmware-golden") for o in objects)


def uncommented_keys(text: str) -> list[str]:
    """Keys of the top two levels with no comment above them.

    A key is commented when the line above it is a comment, or when it continues a
    group of same-level one-line keys that a comment opens (``nodeSelector: {}``,
    ``tolerations: []``, ``affinity: {}`` under one comment). Deeper keys are
    described by their block's comment.
    """
    lines = text.splitlines()
    missing = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped or indent > 2:
            continue
        j = i - 1
        while j >= 0:
            above = lines[j]
            above_indent = len(above) - len(above.lstrip())
            if above.strip().startswith("#"):
                break
            one_line_sibling = above.strip() and above_indent == indent and not above.rstrip().endswith(":")
            if not one_line_sibling:
                j = -1
                break
            j -= 1
        if j < 0:
            missing.append(stripped)
    return missing


def test_every_value_is_commented() -> None:
    text = (CHART / "values.yaml").read_text()
    assert yaml.safe_load(text)["api"]["enabled"] is True  # the file the rule reads is the real values
    assert uncommented_keys(text) == []
    # the rule bites: a new key after a blank line, or a block without a comment
    assert uncommented_keys(text + "\nsneaky: 1\n") == ["sneaky: 1"]
    assert uncommented_keys("api:\n  # -- ok\n  a: 1\n\n  block:\n    x: 1\n") == ["api:", "block:"]
