"""One way to make a Kubernetes client: only ``core/kube`` loads a kubeconfig, reads the in-cluster
ServiceAccount or builds an ``ApiClient``; everything else (services, programs, devtools,
benchmarks, tests) asks it (``core.kube.new_api_client``, ``Kube``, ``connect``), so every
client has the same configuration order, timeouts and retry policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.kube.config import CLIENT_FACTORIES

ROOT = Path(__file__).resolve().parents[2]
#: the Python trees of the repository (not the virtual environment, caches or generated stubs)
TREES = ("benchmarks", "core", "devtools", "gpucaas", "services", "tests", "upstream", "vm_images", "deploy", "docs")

#: what makes a client, by name
RULES = {
    **{f"{name}(": re.compile(rf"\b{name}\(") for name in CLIENT_FACTORIES},
    "Kopf login": re.compile(r"\bkopf\.on\.login\(|\bkopf\.login_(?:via|with)_\w+|\bkopf\.ConnectionInfo\("),
}

#: (file, rule) -> why it may: each exception says what needs it
ALLOWED = {
    ("services/tenancy_controller/main.py", "Kopf login"): (
        "Kopf keeps its own aiohttp client on the controller's event loop; its login handler is "
        "where that client gets credentials, and it hands over core.kube.kopf_connection_info(cfg) "
        "of the controller's one configuration (Kopf's own login_via_client would read a kubeconfig "
        "by itself)"
    ),
}


def _python_files() -> list[Path]:
    files: list[Path] = []
    for tree in TREES:
        files.extend(p for p in (ROOT / tree).rglob("*.py") if "generated" not in p.parts)
    return sorted(files)


def _offences() -> list[str]:
    found = []
    for path in _python_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("core/kube/") or path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        for rule, pattern in RULES.items():
            if (rel, rule) in ALLOWED:
                continue
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{rel}:{line}: {rule}")
    return found


def test_only_core_kube_makes_kubernetes_clients() -> None:
    offences = _offences()
    assert not offences, "make clients through core.kube (new_api_client, Kube, connect):\n" + "\n".join(offences)


@pytest.mark.parametrize(("rel", "rule"), sorted(ALLOWED), ids=[f"{r}:{k}" for r, k in sorted(ALLOWED)])
def test_every_exception_is_still_needed(rel: str, rule: str) -> None:
    """An exception whose file no longer does what it allowed goes, so the list stays true."""
    assert RULES[rule].search((ROOT / rel).read_text(encoding="utf-8")), f"{rel} no longer needs {rule!r}"
