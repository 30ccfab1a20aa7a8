"""What the console's browser tests share: a navigation that survives the machine's network
changing under Chromium.

Chromium watches the host's interfaces over netlink and fails the navigations it has in flight
with ``net::ERR_NETWORK_CHANGED`` when one appears or goes, loopback requests included. Under
``make test`` the other worker creates veths, bridges and network namespaces for its real nodes
all the time, so a page load can fail for a reason that is this machine's, not the console's:
a person would press reload, and so do :func:`goto` and :func:`reload`. The console's own GETs retry a failure
at the network level themselves (services/api/console/static/js/api.js).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"


def goto(page: Any, url: str, *, tries: int = 5) -> None:
    """``page.goto(url)``, loaded again while the failure is the network changing."""
    _again(lambda: page.goto(url), tries)


def reload(page: Any, *, tries: int = 5) -> None:
    """``page.reload()``, again while the failure is the network changing."""
    _again(page.reload, tries)


def _again(load: Callable[[], object], tries: int) -> None:
    from playwright.sync_api import Error

    for attempt in range(1, tries + 1):
        try:
            load()
            return
        except Error as e:
            if NETWORK_CHANGED not in str(e) or attempt == tries:
                raise
