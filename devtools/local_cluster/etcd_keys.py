"""Keys of the local cluster's etcd through its JSON gateway (``/v3/kv/...``), for the tests.

:class:`Snapshot` remembers the keys a freshly set-up cluster holds; :meth:`Snapshot.reset`
deletes every key written since, puts back those deleted since, and restores the CRDs as
they were, so that each test starts from the same cluster as if it were new (restarting
kube-apiserver per test would cost seconds). kube-apiserver learns of the deletions through
its etcd watch like of any other write, so its caches follow.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

#: Keys the control plane rewrites on its own; never deleted (their absence would be noticed
#: only by the component that owns them, and it writes them again anyway).
KEEP_PREFIXES = (
    b"/registry/masterleases/",
    b"/registry/leases/kube-system/",
    b"/registry/apiserver.k8s.io/",
    b"/registry/ranges/",
    b"/registry/health",
    b"/registry/events/kube-system/",
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class EtcdKeys:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:  # a loopback URL
            return dict(json.loads(resp.read()))

    def keys(self, prefix: bytes = b"/registry/") -> set[bytes]:
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        out = self._post("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end), "keys_only": True})
        return {base64.b64decode(kv["key"]) for kv in out.get("kvs", [])}

    def values(self, prefix: bytes) -> dict[bytes, bytes]:
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        out = self._post("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end)})
        return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", "")) for kv in out.get("kvs", [])}

    def put(self, items: dict[bytes, bytes]) -> None:
        ops = [{"request_put": {"key": _b64(k), "value": _b64(v)}} for k, v in sorted(items.items())]
        for i in range(0, len(ops), 100):
            self._post("/v3/kv/txn", {"success": ops[i : i + 100]})

    def delete(self, keys: set[bytes]) -> None:
        if not keys:
            return
        ops = [{"request_delete_range": {"key": _b64(k)}} for k in sorted(keys)]
        for i in range(0, len(ops), 100):  # etcd's --max-txn-ops is 128
            self._post("/v3/kv/txn", {"success": ops[i : i + 100]})


#: Keys restored to their snapshot value when changed (a test that edits a CRD); other
#: objects the control plane keeps updating itself and are left as they are.
RESTORE_PREFIXES = (b"/registry/apiextensions.k8s.io/customresourcedefinitions/",)


class Snapshot:
    """The keys of a cluster at one moment; :meth:`reset` returns it to that set of keys."""

    def __init__(self, etcd: EtcdKeys) -> None:
        self.etcd = etcd
        self.items = etcd.values(b"/registry/")
        self.keys = set(self.items)

    def added(self) -> set[bytes]:
        return {k for k in self.etcd.keys() - self.keys if not k.startswith(KEEP_PREFIXES)}

    def reset(self) -> set[bytes]:
        """Delete what was added since the snapshot, put back what was deleted or changed
        (:data:`RESTORE_PREFIXES`); returns the keys put back."""
        now = self.etcd.values(b"/registry/")
        extra = {k for k in set(now) - self.keys if not k.startswith(KEEP_PREFIXES)}
        back = {k: v for k, v in self.items.items() if k not in now or (k.startswith(RESTORE_PREFIXES) and now[k] != v)}
        self.etcd.delete(extra)
        self.etcd.put(back)
        return set(back)
