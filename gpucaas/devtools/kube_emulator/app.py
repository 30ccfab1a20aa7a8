"""The HTTP transport of the emulator: an aiohttp application over the :class:`Store`.

aiohttp rather than an ASGI app under uvicorn: watches and ``log?follow=true`` are
long-lived chunked streams that must be cut when a client goes away or the emulator
stops, and aiohttp's ``StreamResponse`` plus handler cancellation give exactly that,
while the whole server (``AppRunner``/``TCPSite``) starts and stops inside any event
loop, e.g. the background thread of :class:`gpucaas.devtools.kube_emulator.server.KubeEmulator`,
without uvicorn's process-level signal handling. It is already a dependency (Kopf's
client is aiohttp too).

One catch-all route parses Kubernetes paths itself (``/api/v1/namespaces/{ns}/pods/{name}/log``,
``/apis/{group}/{version}/...``, the legacy ``/watch/`` prefix), because the namespace,
resource and subresource positions depend on the segments, which is where kmock failed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import yaml
from aiohttp import web

from gpucaas.devtools.kube_emulator import (
    errors,
    fieldvalidation,
    openapi,
    patching,
    protobuf,
    request_context,
    tables,
)
from gpucaas.devtools.kube_emulator.resources import ResourceType
from gpucaas.devtools.kube_emulator.security import Security
from gpucaas.devtools.kube_emulator.selectors import parse_field_selector, parse_label_selector
from gpucaas.devtools.kube_emulator.store import POD_KEY, Store, Watcher

log = logging.getLogger(__name__)

EMULATOR_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-gpucaas-kube-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22 (emulated)",
    "compiler": "gc",
    "platform": "linux/amd64",
}
STORE_KEY = web.AppKey("store", Store)
OPTIONS_KEY = web.AppKey("options", dict)
SECURITY_KEY = web.AppKey("security", Security)


def truthy(value: str | None) -> bool:
    """Query booleans as the clients send them: ``true``, ``True``, ``1``."""
    return value is not None and value.strip().lower() in ("true", "1", "yes")


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _error_response(exc: errors.ApiError) -> web.Response:
    return _json_response(exc.status(), exc.code)


def build_app(store: Store, *, bookmark_interval: float = 5.0, security: Security | None = None) -> web.Application:
    """The aiohttp application serving ``store`` as a Kubernetes API (authenticated, authorised: ``security``)."""
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[STORE_KEY] = store
    app[SECURITY_KEY] = security or Security()
    app[OPTIONS_KEY] = {"bookmark_interval": bookmark_interval}
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app


async def _dispatch(request: web.Request) -> web.StreamResponse:
    store = request.app[STORE_KEY]
    ctx = request_context.RequestContext(user_agent=request.headers.get("User-Agent", ""))
    token = request_context.CURRENT.set(ctx)
    try:
        # authentication, authorisation, review APIs, admission (security.py)
        answered, warnings = await request.app[SECURITY_KEY].guard(request, store)
        if answered is not None:
            return answered
        ctx.warnings.extend(warnings)  # Pod Security warn mode, sent with the response below
        resp = await _route(request, store)
    except errors.ApiError as exc:
        resp = _error_response(exc)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug in the emulator: say so like the API server would
        log.exception("kube emulator: internal error on %s %s", request.method, request.path)
        err = errors.ApiError(f"emulator internal error: {exc!r}")
        resp = _error_response(err)
    finally:
        request_context.CURRENT.reset(token)
    if not resp.prepared:
        for text in ctx.warnings:  # RFC 7234 warn-code 299, as the API server sends them
            resp.headers.add("Warning", '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return resp


def _write_options(request: web.Request) -> None:
    """``fieldManager``, ``force`` and ``fieldValidation`` of a write, into the request context."""
    ctx = request_context.current()
    if ctx is None:
        return
    q = request.query
    ctx.field_manager = q.get("fieldManager") or None
    if ctx.field_manager is not None and len(ctx.field_manager) > 128:
        raise errors.Invalid("PatchOptions" if request.method == "PATCH" else "CreateOptions", "", [errors.field_error(
            "fieldManager", "FieldValueTooLong", "Too long: may not be more than 128 bytes")])
    ctx.force = truthy(q.get("force"))
    value = q.get("fieldValidation")
    if value:
        if value not in request_context.FIELD_VALIDATION_VALUES:
            raise errors.BadRequest(
                f'fieldValidation: Unsupported value: "{value}": supported values: "Ignore", "Strict", "Warn"')
        ctx.field_validation = value


def _openapi(request: web.Request, store: Store, segs: list[str]) -> web.StreamResponse:
    """``/openapi/v2`` (JSON only) and ``/openapi/v3[/{gv}]``."""
    accept = request.headers.get("Accept", "")
    if segs == ["v2"]:
        if accept and not any(m in accept for m in ("application/json", "*/*")):
            # kubectl asks for the protobuf encoding only; 406 is what a server without it sends.
            raise errors.NotAcceptable(
                "only the following media types are accepted: application/json")
        return _json_response(openapi.v2(store.registry))
    if segs and segs[0] == "v3":
        if len(segs) == 1:
            return _json_response(openapi.v3_index(store.registry))
        doc = openapi.v3_document(store.registry, "/".join(segs[1:]))
        if doc is None:
            raise errors.resource_not_found()
        return _json_response(doc)
    raise errors.resource_not_found()


async def _route(request: web.Request, store: Store) -> web.StreamResponse:
    segs = [s for s in request.path.split("/") if s]
    method = request.method
    if not segs:
        return _json_response({"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz", "/openapi/v2",
                                         "/openapi/v3", "/emulator/v1"]})
    head = segs[0]
    if head == "version" and len(segs) == 1:
        return _json_response(EMULATOR_VERSION)
    if head in ("healthz", "livez", "readyz"):
        return web.Response(text="ok")
    if head == "emulator":
        return await _emulator_endpoint(request, store, segs[1:])
    if head == "openapi":
        return _openapi(request, store, segs[1:])
    if head == "api":
        if len(segs) == 1:
            return _json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]})
        if segs[1] != "v1":
            raise errors.resource_not_found()
        group, version, rest = "", "v1", segs[2:]
    elif head == "apis":
        if len(segs) == 1:
            return _json_response(store.registry.api_group_list())
        if len(segs) == 2:
            doc = store.registry.api_group(segs[1])
            if doc is None:
                raise errors.resource_not_found()
            return _json_response(doc)
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        raise errors.resource_not_found()
    if not rest:
        if method != "GET":
            raise errors.MethodNotAllowed("the server does not allow this method on the requested resource")
        doc = store.registry.resource_list(group, version)
        if doc is None:
            raise errors.resource_not_found()
        return _json_response(doc)
    return await _resource(request, store, group, version, rest)


async def _resource(request: web.Request, store: Store, group: str, version: str, rest: list[str]) -> web.StreamResponse:
    query = request.query
    watch = truthy(query.get("watch"))
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
        if not rest:
            raise errors.resource_not_found()
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise errors.resource_not_found()
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    rt = store.registry.get(group, plural)
    if rt is None or version not in rt.versions:
        raise errors.resource_not_found()
    if (namespace is not None and not rt.namespaced) or (rt.namespaced and namespace is None and name is not None):
        raise errors.resource_not_found()
    if sub is not None and sub not in rt.subresources:
        raise errors.resource_not_found()
    method = request.method
    dry_run = bool(query.get("dryRun"))
    if method in ("POST", "PUT", "PATCH"):
        _write_options(request)
    if sub is None:
        verb = {("GET", True): "watch" if watch else "list", ("GET", False): "watch" if watch else "get",
                ("POST", True): "create", ("PUT", False): "update", ("PATCH", False): "patch",
                ("DELETE", True): "deletecollection", ("DELETE", False): "delete"}.get((method, name is None))
        if verb is None or verb not in rt.verbs:
            raise errors.MethodNotAllowed(
                f"the server does not allow this method on the requested resource ({method} {rt.display()})")

    if name is None:  # collection
        if rt.key == ("", "bindings") and method == "POST":
            body = await _body(request)
            store.bind(namespace or "", ((body or {}).get("metadata") or {}).get("name", ""), body)
            return _json_response(_success(), 201)
        if method == "GET":
            match = _matcher(query)
            if watch:
                return await _watch(request, store, rt, namespace, match, version)
            listed = _list(store, rt, namespace, match, version, query)
            if tables.wants_table(request.headers.get("Accept")):
                return _json_response(_table(store, rt, version, listed["items"], listed["metadata"], query))
            return _json_response(listed)
        if method == "POST":
            if rt.namespaced and namespace is None:
                raise errors.resource_not_found()
            body = await _body(request)
            return _json_response(store.create(rt, namespace, body, version=version, dry_run=dry_run), 201)
        if method == "DELETE":
            options = await _delete_options(request)
            items = store.delete_collection(rt, namespace, _matcher(query), options)
            return _json_response({"kind": rt.list_kind, "apiVersion": rt.api_version(version),
                                   "metadata": {"resourceVersion": str(store.rv)}, "items": items})
        raise errors.MethodNotAllowed(f"{method} is not supported on the {rt.display()} collection")

    if sub == "log":
        if method != "GET":
            raise errors.MethodNotAllowed("only GET is supported on pods/log")
        return await _pod_log(request, store, namespace or "", name)
    if sub == "binding":
        if method != "POST":
            raise errors.MethodNotAllowed("only POST is supported on pods/binding")
        store.bind(namespace or "", name, await _body(request))
        return _json_response(_success(), 201)
    if sub == "eviction":
        if method != "POST":
            raise errors.MethodNotAllowed("only POST is supported on pods/eviction")
        body = await _body(request) or {}
        store.delete(rt, namespace, name, body.get("deleteOptions") or {})
        return _json_response(_success(), 201)

    if method == "GET":
        if watch:
            match = _matcher({"fieldSelector": f"metadata.name={name}"})
            return await _watch(request, store, rt, namespace, match, version)
        obj = store.get(rt, namespace, name, version)
        if sub is None and tables.wants_table(request.headers.get("Accept")):
            return _json_response(_table(store, rt, version, [obj], {"resourceVersion": str(store.rv)}, query))
        return _json_response(obj)
    if method == "PUT":
        body = await _body(request)
        return _json_response(store.update(rt, namespace, name, body, subresource=sub, version=version,
                                           dry_run=dry_run))
    if method == "PATCH":
        ctype = request.content_type
        if ctype not in patching.PATCH_TYPES:
            raise errors.UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(patching.PATCH_TYPES)}")
        body = await _body(request, yaml_ok=ctype == patching.APPLY_PATCH)
        existed = (namespace or "", name) in store.objects.get(rt.key, {})
        out = store.patch(rt, namespace, name, ctype, body, subresource=sub, version=version, dry_run=dry_run)
        return _json_response(out, 200 if existed else 201)
    if method == "DELETE" and sub is None:
        options = await _delete_options(request)
        obj = store.delete(rt, namespace, name, options, version=version, dry_run=dry_run)
        return _json_response(obj, 200)
    raise errors.MethodNotAllowed(f"{method} is not supported on {rt.display()}{'/' + sub if sub else ''}")


def _table(store: Store, rt: ResourceType, version: str, items: list[dict[str, Any]], meta: dict[str, Any],
           query: Any) -> dict[str, Any]:
    crd = None
    if rt.custom:
        crd = store.objects.get(("apiextensions.k8s.io", "customresourcedefinitions"), {}).get(
            ("", f"{rt.plural}.{rt.group}"))
    return tables.table(rt, items, crd=crd, version=version, list_meta=meta, include_object=query.get("includeObject"))


def _success() -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def _body(request: web.Request, *, yaml_ok: bool = False) -> Any:
    raw = await request.read()
    if request.content_type == protobuf.MEDIA_TYPE:
        # decoded with the Kubernetes descriptors the client binary carries (protobuf.py), else 415
        return await asyncio.get_running_loop().run_in_executor(None, protobuf.decode, raw) \
            if not protobuf.loaded() else protobuf.decode(raw)
    if not raw.strip():
        return None
    try:
        if yaml_ok or request.content_type == "application/yaml":
            return yaml.safe_load(raw)
        return fieldvalidation.loads_checking_duplicates(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise errors.BadRequest(f"the request body is not valid {'YAML' if yaml_ok else 'JSON'}: {exc}") from exc


async def _delete_options(request: web.Request) -> dict[str, Any]:
    body = await _body(request) or {}
    if not isinstance(body, dict):
        raise errors.BadRequest("DeleteOptions must be a JSON object")
    q = request.query
    if "gracePeriodSeconds" in q:
        try:
            body["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        except ValueError as exc:
            raise errors.BadRequest("gracePeriodSeconds must be an integer") from exc
    if "propagationPolicy" in q:
        body["propagationPolicy"] = q["propagationPolicy"]
    if "orphanDependents" in q:
        body["orphanDependents"] = truthy(q["orphanDependents"])
    policy = body.get("propagationPolicy")
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise errors.BadRequest(
            f'propagationPolicy: Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"')
    return body


def _matcher(query: Any) -> Any:
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    return lambda obj: labels(obj) and fields(obj)


def _list(store: Store, rt: ResourceType, namespace: str | None, match: Any, version: str, query: Any) -> dict[str, Any]:
    items = store.list(rt, namespace, match)
    meta: dict[str, Any] = {"resourceVersion": str(store.rv)}
    start = query.get("continue")
    if start:
        try:
            token = json.loads(base64.urlsafe_b64decode(start.encode()))
            after = tuple(token["after"])
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.BadRequest("continue token is invalid") from exc
        items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
    limit = query.get("limit")
    if limit and int(limit) > 0 and len(items) > int(limit):
        items = items[: int(limit)]
        last = items[-1]["metadata"]
        token = {"after": [last.get("namespace", ""), last["name"]]}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
        meta["remainingItemCount"] = len(store.list(rt, namespace, match)) - len(items)
    return {
        "kind": rt.list_kind,
        "apiVersion": rt.api_version(version),
        "metadata": meta,
        "items": [store.render(rt, o, version) for o in items],
    }


#: Most watch events sent in one write (a bound on one write's size).
WATCH_BATCH = 500


def _watch_line(store: Store, rt: ResourceType, version: str, item: tuple[str, Any], as_table: bool,
                query: Any) -> bytes:
    """One watch event as the line the stream carries."""
    etype, obj = item
    if etype == "INITIAL_END":  # the end of sendInitialEvents: a bookmark so marked
        bookmark = {"kind": rt.kind, "apiVersion": rt.api_version(version),
                    "metadata": {"resourceVersion": str(store.rv),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}
        return (json.dumps({"type": "BOOKMARK", "object": bookmark}) + "\n").encode()
    if as_table:  # each event's object is a one-row Table, as the real server sends them
        rendered = store.render(rt, obj, version)
        rendered = _table(store, rt, version, [rendered], {"resourceVersion": rendered["metadata"].get(
            "resourceVersion", "")}, query)
    else:  # serialised at once, on the loop: a shallow copy is enough (render's deep copy is not)
        rendered = {**obj, "apiVersion": rt.api_version(version), "kind": rt.kind}
    return (json.dumps({"type": etype, "object": rendered}) + "\n").encode()


async def _watch(request: web.Request, store: Store, rt: ResourceType, namespace: str | None, match: Any,
                 version: str) -> web.StreamResponse:
    query = request.query
    rv = query.get("resourceVersion")
    bookmarks = truthy(query.get("allowWatchBookmarks"))
    timeout = None
    if query.get("timeoutSeconds"):
        try:
            timeout = float(query["timeoutSeconds"])
        except ValueError as exc:
            raise errors.BadRequest("timeoutSeconds must be a number") from exc
    watcher = Watcher(rt.key, namespace, match)
    as_table = tables.wants_table(request.headers.get("Accept"))
    if as_table:
        tables.check_include_object(query.get("includeObject"))
    gone = False
    # Everything up to store.watchers.add() runs without awaiting: no write can slip between
    # the initial state (or the replayed history) and the live events.
    if rv in (None, "", "0"):
        for obj in store.list(rt, namespace, match):
            watcher.queue.put_nowait(("ADDED", obj))
        if truthy(query.get("sendInitialEvents")):
            if not bookmarks:
                raise errors.Invalid("ListOptions", "", [errors.field_error(
                    "allowWatchBookmarks", "FieldValueForbidden",
                    "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true")])
            watcher.queue.put_nowait(("INITIAL_END", None))
    else:
        try:
            since = int(rv)
        except ValueError as exc:
            raise errors.BadRequest(f"invalid resource version {rv!r}") from exc
        if since < store.compacted_rv:
            gone = True
        else:
            for ev in store.history:
                if ev.rv > since:
                    watcher.offer(ev)
    if not gone:
        store.watchers.add(watcher)
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    try:
        await resp.prepare(request)
        if gone:
            status = errors.Gone(f"too old resource version: {rv} ({store.compacted_rv})").status()
            await resp.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())
            return resp
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        interval = request.app[OPTIONS_KEY]["bookmark_interval"] if bookmarks else None
        while True:
            waits = [w for w in (interval, deadline - loop.time() if deadline else None) if w is not None]
            wait = max(0.0, min(waits)) if waits else None
            if deadline is not None and loop.time() >= deadline:
                break  # timeoutSeconds is up, events queued or not
            try:
                # an event already queued is taken without a wait_for task (one loop turn each)
                item = watcher.queue.get_nowait() if not watcher.queue.empty() else \
                    await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    break
                bookmark = {"kind": rt.kind, "apiVersion": rt.api_version(version),
                            "metadata": {"resourceVersion": str(store.rv)}}
                await resp.write((json.dumps({"type": "BOOKMARK", "object": bookmark}) + "\n").encode())
                continue
            # Every event queued by now goes out in one write: a watcher that fell behind while
            # the loop served requests catches up in one turn instead of one turn per event (the
            # stream is still one JSON object per line, in order).
            lines: list[bytes] = []
            while item is not None:
                lines.append(_watch_line(store, rt, version, item, as_table, query))
                if watcher.queue.empty() or len(lines) >= WATCH_BATCH:
                    break
                item = watcher.queue.get_nowait()
            if lines:
                await resp.write(b"".join(lines))
            if item is None:
                break
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.watchers.discard(watcher)
    try:
        await resp.write_eof()
    except (ConnectionResetError, RuntimeError):
        pass
    return resp


async def _pod_log(request: web.Request, store: Store, namespace: str, name: str) -> web.StreamResponse:
    query = request.query
    container = query.get("container")
    text = store.pod_log(namespace, name, container)
    tail = query.get("tailLines")

    def cut(t: str) -> str:
        if tail is None:
            return t
        lines = t.splitlines(keepends=True)
        n = int(tail)
        return "".join(lines[-n:]) if n > 0 else ""

    if not truthy(query.get("follow")):
        return web.Response(text=cut(text), content_type="text/plain")
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    loop = asyncio.get_running_loop()
    sent = 0
    first = True
    rt = store.registry.get(*POD_KEY)
    assert rt is not None
    try:
        while True:
            try:
                pod = store.lookup(rt, namespace, name)
                current = store.pod_log(namespace, name, container)
            except errors.ApiError:
                break
            chunk = current[sent:]
            if first:
                chunk, first = cut(current), False
            if chunk:
                await resp.write(chunk.encode())
            sent = len(current)
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
                break
            fut: asyncio.Future[None] = loop.create_future()
            store.log_waiters.setdefault((namespace, name), []).append(fut)
            try:
                await asyncio.wait_for(fut, 1.0)  # also re-checks the pod's phase each second
            except TimeoutError:
                pass
        await resp.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return resp


async def _emulator_endpoint(request: web.Request, store: Store, segs: list[str]) -> web.StreamResponse:
    """Emulator-only endpoints (not part of the Kubernetes API): pod logs and compaction.

    ``POST /emulator/v1/namespaces/{ns}/pods/{name}/log[?container=c]`` appends the body
    (text) to the container's log; ``PUT`` replaces it. ``POST /emulator/v1/compact`` forgets
    the watch history (watches from older resourceVersions then get 410 Gone).
    """
    if segs == ["v1", "compact"] and request.method == "POST":
        store.compact()
        return _json_response({"compactedResourceVersion": str(store.compacted_rv)})
    if len(segs) == 6 and segs[:2] == ["v1", "namespaces"] and segs[3] == "pods" and segs[5] == "log":
        if request.method not in ("POST", "PUT"):
            raise errors.MethodNotAllowed("use POST to append to a pod log, PUT to replace it")
        text = (await request.read()).decode()
        store.write_log(segs[2], segs[4], text, container=request.query.get("container"),
                        append=request.method == "POST")
        return _json_response({"status": "Success"})
    raise errors.resource_not_found()
