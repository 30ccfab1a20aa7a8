"""Protobuf request bodies (``Content-Type: application/vnd.kubernetes.protobuf``).

kubectl 1.32 and later send built-in objects in Kubernetes' protobuf encoding (``create
namespace``, ``create deployment``), and client-go has no fallback to JSON when a server
answers 415 to protobuf (it has one for CBOR only:
``rest.requestClientContentConfigProvider.UnsupportedMediaType``). So the emulator decodes
them: the body is the ``k8s\\x00`` magic followed by a ``runtime.Unknown`` envelope
(``typeMeta``, ``raw``) whose ``raw`` is the object's message
(k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go).

The message schemas are the Kubernetes API's own ``generated.proto`` descriptors, which
every Go client built with the Kubernetes client libraries carries (gogo-protobuf
registers them gzipped in the binary). The emulator reads them at run time from the
kubectl that sent the request's release — the ``kubectl`` on PATH, its ``kubectl.1.NN``
siblings (Cloud SDK layout), or the binaries named in ``GPUCAAS_KUBE_EMULATOR_PROTO_SOURCES``
(``os.pathsep``-separated) — so no schema is written or vendored here. Without such a
binary a protobuf body gets 415, as a server without the codec answers.

Responses stay JSON: clients that send protobuf also accept JSON
(``Accept: application/vnd.kubernetes.protobuf,application/json``).

Decoding to JSON follows the Go types' JSON encoding: ``Time`` as RFC 3339, ``Quantity``
and ``IntOrString`` as their string/int, ``RawExtension``/``FieldsV1``/``JSON`` as the JSON
they carry, ``bytes`` as base64; proto2 fields that are present but empty (gogo writes
non-pointer fields always) are dropped, as ``omitempty`` drops them — which also drops an
explicit ``0``/``false`` of a pointer field (docs/kube-emulator.md, simplifications).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucaas.devtools.kube_emulator import errors

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
_GZIP = re.compile(rb"\x1f\x8b\x08\x00\x00\x00\x00\x00")
_SPECIAL = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": "time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "raw",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": "fieldsv1",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON": "raw",
}


def _sources() -> list[Path]:
    out: list[Path] = []
    env = os.environ.get("GPUCAAS_KUBE_EMULATOR_PROTO_SOURCES")
    if env:
        out += [Path(p) for p in env.split(os.pathsep) if p]
    exe = shutil.which("kubectl")
    if exe:
        real = Path(exe).resolve()
        out.append(real)
        siblings = sorted(real.parent.glob("kubectl.1.*"),
                          key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)], reverse=True)
        out += siblings
    return out


def _descriptors(path: Path) -> dict[str, Any]:
    from google.protobuf import descriptor_pb2

    try:
        data = path.read_bytes()
    except OSError:
        return {}
    files: dict[str, Any] = {}
    for m in _GZIP.finditer(data):
        try:
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[m.start():m.start() + 4_000_000],
                                                                      8_000_000)
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except Exception:  # not a descriptor: any gzip stream in the binary
            continue
        if fd.name.startswith("k8s.io/") and fd.name.endswith("generated.proto"):
            files[fd.name] = fd
    return files


@functools.lru_cache(maxsize=1)
def kubernetes_descriptors() -> Any:
    """A descriptor pool of the Kubernetes API messages, or None when no source has them."""
    from google.protobuf import descriptor_pool

    for source in _sources():
        files = _descriptors(source)
        if "k8s.io/api/core/v1/generated.proto" not in files:
            continue
        pool = descriptor_pool.DescriptorPool()
        added: set[str] = set()

        def add(name: str, files: dict[str, Any] = files, pool: Any = pool, added: set[str] = added) -> None:
            if name in added or name not in files:
                return
            fd = files[name]
            deps = [d for d in fd.dependency if d in files]  # gogo.proto only carries options
            for dep in deps:
                add(dep)
            del fd.dependency[:]
            fd.dependency.extend(deps)
            pool.Add(fd)
            added.add(name)

        for name in list(files):
            add(name)
        return pool
    return None


def loaded() -> bool:
    """Whether the descriptors were looked for already (the first look reads a binary: seconds)."""
    return kubernetes_descriptors.cache_info().currsize > 0


def _message_class(pool: Any, full_name: str) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _type_name(pool: Any, api_version: str, kind: str) -> str | None:
    group, _, version = api_version.rpartition("/")
    first = group.split(".")[0] if group else "core"
    packages = {f"k8s.io.api.{first}.{version}", f"k8s.io.apimachinery.pkg.apis.meta.{version}",
                f"k8s.io.apiextensions_apiserver.pkg.apis.{first}.{version}",
                f"k8s.io.kube_aggregator.pkg.apis.{first}.{version}"}
    for package in sorted(packages):
        try:
            pool.FindMessageTypeByName(f"{package}.{kind}")
        except KeyError:
            continue
        return f"{package}.{kind}"
    return None


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded Kubernetes object (415/400 when it cannot be read)."""
    pool = kubernetes_descriptors()
    if pool is None:
        raise errors.UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/yaml")
    if not body.startswith(MAGIC):
        raise errors.BadRequest("provided object is not a Kubernetes protobuf message (missing the k8s\\x00 prefix)")
    try:
        unknown = _message_class(pool, "k8s.io.apimachinery.pkg.runtime.Unknown")()
        unknown.ParseFromString(body[len(MAGIC):])
        api_version, kind = unknown.typeMeta.apiVersion, unknown.typeMeta.kind
        name = _type_name(pool, api_version, kind)
        if name is None:
            raise errors.UnsupportedMediaType(f"no protobuf message is known for {api_version}, Kind={kind}")
        msg = _message_class(pool, name)()
        msg.ParseFromString(unknown.raw)
    except errors.ApiError:
        raise
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise errors.BadRequest(f"the protobuf body could not be decoded: {exc}") from exc
    out = _convert(msg) or {}
    out["apiVersion"], out["kind"] = api_version, kind
    return out


def _timestamp(seconds: int, nanos: int = 0, micro: bool = False) -> str:
    t = datetime.fromtimestamp(seconds, UTC)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == {} or value == [] or value is False or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)


def _convert(msg: Any) -> Any:
    special = _SPECIAL.get(msg.DESCRIPTOR.full_name)
    if special == "time":
        return _timestamp(msg.seconds) if msg.seconds else None
    if special == "microtime":
        return _timestamp(msg.seconds, msg.nanos, micro=True) if msg.seconds else None
    if special == "quantity":
        return msg.string or None
    if special == "intorstring":
        return msg.strVal if msg.type == 1 else msg.intVal
    if special in ("raw", "fieldsv1"):
        raw = msg.Raw if special == "fieldsv1" else msg.raw
        return json.loads(raw) if raw else None
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            converted: Any = {k: _scalar_or_message(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            converted = [_scalar_or_message(field, v) for v in value]
        else:
            converted = _scalar_or_message(field, value)
        if not _empty(converted) or (special is None and field.message_type is not None and converted == {}
                                     and field.name in ("spec", "status", "emptyDir")):
            out[field.name] = converted  # the generated.proto field names are the JSON names
    return out


def _scalar_or_message(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return _convert(value)
    if field.type == field.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value
