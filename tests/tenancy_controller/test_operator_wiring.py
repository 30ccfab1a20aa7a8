"""The operator process: the tenancy handlers in one registry, Kopf settings in one place, the CLI."""

from __future__ import annotations

import kopf
import pytest
from typer.testing import CliRunner

from gpucaas.cli import app
from services.tenancy_controller import main
from services.tenancy_controller.settings import ControllerSettings


def test_registry_holds_every_tenancy_handler():
    registry = main.build_registry(ControllerSettings())
    ids = {h.id for h in registry._changing.get_all_handlers()}  # Kopf has no public listing
    assert {"reconcile-resume", "reconcile-create", "reconcile-update/spec", "finalize"} <= ids
    watching = {h.id for h in registry._watching.get_all_handlers()}
    assert {"child-namespaces", "child-ciliumnetworkpolicies", "child-persistentvolumes"} <= watching
    assert {h.id for h in registry._spawning.get_all_handlers()} == {"resync"}


def test_kueues_kinds_are_watched_only_when_it_queues():
    def watched(settings: ControllerSettings) -> set[str]:
        return {h.id for h in main.build_registry(settings)._watching.get_all_handlers()}

    def indexed(settings: ControllerSettings) -> set[str]:
        return {h.id for h in main.build_registry(settings)._indexing.get_all_handlers()}

    kueue_handlers = {
        "child-clusterqueues",
        "child-localqueues",
        "shared-flavor",
        "shared-priority-classes",
        "pool-cohort",
        "pool-nodes",
        "pool-tenancies",
    }
    assert not kueue_handlers & watched(ControllerSettings())
    assert kueue_handlers <= watched(ControllerSettings(queueing="kueue"))
    # the pool's inputs: nodes are watched (and their verbs granted) only when Kueue queues
    assert not {"gpu_nodes", "tenancy_guarantees"} & indexed(ControllerSettings())
    assert {"gpu_nodes", "tenancy_guarantees"} <= indexed(ControllerSettings(queueing="kueue"))
    assert ("", "v1", "nodes") not in main.watched_resources(main.build_registry(ControllerSettings()))


def test_kopf_settings_in_one_place():
    ks = kopf.OperatorSettings()
    main.configure_kopf(ks, ControllerSettings(peering="p1", priority=7, workers=3, standalone=False))
    assert (ks.peering.name, ks.peering.priority, ks.peering.mandatory, ks.peering.clusterwide) == ("p1", 7, True, True)
    assert ks.persistence.finalizer == "gpucaas.dev/controller"
    assert isinstance(ks.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert ks.execution.max_workers == 3
    ks2 = kopf.OperatorSettings()
    main.configure_kopf(ks2, ControllerSettings(standalone=True))
    assert ks2.peering.standalone and not ks2.peering.mandatory


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("GPUCAAS_CONTROLLER_PEERING", "from-env")
    monkeypatch.setenv("GPUCAAS_CONTROLLER_NODE_CIDRS", '["203.0.113.0/24"]')
    monkeypatch.setenv("GPUCAAS_KUBECONFIG", "/tmp/kc")
    s = ControllerSettings()
    assert (s.peering, s.node_cidrs, str(s.kubeconfig)) == ("from-env", ["203.0.113.0/24"], "/tmp/kc")
    monkeypatch.setenv("GPUCAAS_CONTROLLER_NODE_CIDRS", '["not-a-cidr"]')
    with pytest.raises(ValueError, match="node_cidrs"):
        ControllerSettings()


def test_cli_registered_with_env_vars():
    result = CliRunner().invoke(app, ["controller", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--kubeconfig",
        "--peering",
        "--standalone",
        "--priority",
        "--liveness",
        "GPUCAAS_CONTROLLER_PEERING",
    ):
        assert option in result.output
