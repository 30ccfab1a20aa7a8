"""What the console's browser tests share: a navigation that survives the machine's network
changing under Chromium.

Chromium watches the host's interfaces over netlink and fails the navigations it has in flight
with ``net::ERR_NETWORK_CHANGED`` when one appears or goes, loopback requests included. Under
``make test`` the other worker creates veths, bridges and network namespaces for its real nodes
all the time, so a page load can fail for a reason that is this machine's, not the console's:
a person would press reload, and so does :func:`goto`. The console's own GETs retry a failure
at the network level themselves (services/api/console/static/js/api.js).
"""

from __future__ import annotations

from typing import Any

NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"


def goto(page: Any, url: str, *, tries: int = 5) -> None:
    """``page.goto(url)``, loaded again while the failure is the network changing."""
    from playwright.sync_api import Error

    for attempt in range(1, tries + 1):
        try:
            page.goto(url)
            return
        except Error as e:
            if NETWORK_CHANGED not in str(e) or attempt == tries:
                raise
