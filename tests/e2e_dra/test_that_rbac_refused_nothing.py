"""Run after the other DRA end-to-end tests: no gpucaas process (the DRA driver, the node
agents' kubelet side under the Node authorizer) was refused a request."""

from __future__ import annotations

from gpucaas.sandbox import identities, runner


def test_no_process_was_refused_in_the_dra_mode(dra_sandbox: runner.Sandbox) -> None:
    assert dra_sandbox.audit_log is not None
    assert "dra-driver" in dra_sandbox.identities
    assert any(name.startswith("node-") for name in dra_sandbox.identities)
    identities.check_no_refusals(dra_sandbox.audit_log, dra_sandbox.identities, settle_timeout=0)
