"""Assemble README.md from docs/readme/_head.md and the per-part sections, in reading order.

Each part's owner edits its own docs/readme/<part>.md; run `python docs/build_readme.py`
after a change (a test checks README.md is up to date).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "_head", "sandbox", "api", "tenancy_controller", "device_plugin", "fabric", "fabric_manager",
    "gpu_leases", "placement", "caasctl", "deploy", "kube_emulator", "_tail",
)


def render() -> str:
    parts = [(ROOT / "docs" / "readme" / f"{name}.md").read_text().strip() for name in SECTIONS]
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    out = render()
    if "--check" in sys.argv:
        sys.exit(0 if (ROOT / "README.md").read_text() == out else 1)
    (ROOT / "README.md").write_text(out)
