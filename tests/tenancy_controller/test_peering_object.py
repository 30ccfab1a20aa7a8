"""The ClusterKopfPeering at start: the chart's object is used; a 403 is reported, never fatal."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from core.kube import KubeConnection, load_configuration
from services.tenancy_controller import main
from tests.core_kube.scripted import NOT_FOUND_STATUS, forbidden, write_kubeconfig

from .conftest import controller_settings

USER = "system:serviceaccount:gpucaas-system:gpucaas-controller"


def test_a_forbidden_create_is_reported_and_the_controller_goes_on(scripted: Any, tmp_path: Path, caplog) -> None:
    srv = scripted([(404, NOT_FOUND_STATUS), (403, forbidden(USER, "create", "clusterkopfpeerings", "kopf.dev"))])
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", srv.url)
    settings = controller_settings(kubeconfig, standalone=False, peering="gpucaas")
    cfg = load_configuration(KubeConnection(kubeconfig=kubeconfig))
    with caplog.at_level(logging.ERROR, logger=main.__name__):
        assert main.ensure_peering_object(cfg, settings) == "forbidden"
    assert f"forbidden: {USER} cannot create clusterkopfpeerings.kopf.dev" in caplog.text
    assert "controller.peering.enabled" in caplog.text  # the fix: the chart creates the object


def test_an_existing_peering_object_is_only_read(api, kubeconfig: Path) -> None:
    api.request(
        "POST",
        main.PEERING_PATH,
        body={"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "gpucaas"}},
    )
    settings = controller_settings(kubeconfig, standalone=False, peering="gpucaas")
    cfg = load_configuration(KubeConnection(kubeconfig=kubeconfig))
    assert main.ensure_peering_object(cfg, settings) == "present"


def test_a_missing_peering_object_is_created_when_allowed(api, kubeconfig: Path) -> None:
    settings = controller_settings(kubeconfig, standalone=False, peering="gpucaas-new")
    cfg = load_configuration(KubeConnection(kubeconfig=kubeconfig))
    assert main.ensure_peering_object(cfg, settings) == "created"
    assert api.request("GET", f"{main.PEERING_PATH}/gpucaas-new")["metadata"]["name"] == "gpucaas-new"


def test_unreachable_at_start_is_reported_not_fatal(tmp_path: Path, caplog) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    settings = controller_settings(kubeconfig, standalone=False, peering="gpucaas", request_timeout_s=2.0)
    cfg = load_configuration(KubeConnection(kubeconfig=kubeconfig))
    with caplog.at_level(logging.ERROR, logger=main.__name__):
        assert main.ensure_peering_object(cfg, settings) == "unavailable"
    assert "Kubernetes unreachable at http://127.0.0.1:9" in caplog.text


def test_missing_permissions_are_named_at_start(scripted: Any, tmp_path: Path, caplog) -> None:
    srv = scripted([(403, forbidden(USER, "list", "tenancies", "gpucaas.dev"))])
    settings = controller_settings(write_kubeconfig(tmp_path / "kubeconfig", srv.url))
    cfg = load_configuration(KubeConnection(kubeconfig=settings.kubeconfig))
    with caplog.at_level(logging.ERROR, logger=main.__name__):
        problems = main.check_access(cfg, settings)
    assert f"tenancies: forbidden: {USER} cannot list tenancies.gpucaas.dev" in problems
    assert f"forbidden: {USER} cannot list tenancies.gpucaas.dev" in caplog.text


def test_a_permitted_controller_starts_quietly(api, kubeconfig: Path) -> None:
    settings = controller_settings(kubeconfig)
    assert main.check_access(load_configuration(KubeConnection(kubeconfig=kubeconfig)), settings) == []
