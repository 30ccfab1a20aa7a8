"""The admin's GPU rows (``/v1/admin/gpus``): a lease joined with its node's fabric report."""

from __future__ import annotations

from typing import Any

from services.api.domain.inventory import gpu_summaries


def _lease(pci: str, physical_id: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"node": "n", "pciAddress": pci}
    if physical_id is not None:
        spec["physicalId"] = physical_id
    return {"metadata": {"name": f"n-{pci}"}, "spec": spec, "status": {"state": "Free"}}


def test_a_gpus_physical_id_is_the_fabric_reports_and_the_leases_only_where_the_report_lacks_it() -> None:
    """A node agent that made its leases before it learnt the fabric's map wrote PCI order in them."""
    fabric = {
        "metadata": {"name": "n"},
        "status": {"gpus": [{"pciBusId": "0000:3A:00.0", "physicalId": 1, "healthy": True}]},
    }
    rows = gpu_summaries([_lease("0000:3a:00.0", 3), _lease("0000:ff:00.0", 8)], [fabric], None)
    assert [(r["pci_address"], r["physical_id"], r["healthy"]) for r in rows] == [
        ("0000:3a:00.0", 1, True),
        ("0000:ff:00.0", 8, None),
    ]
