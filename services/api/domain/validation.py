"""Pure input rules: OCI image references, tenancy names, environment variable names.

Each ``check_*`` returns the value or raises ``ValueError`` with a message that says
what is allowed; the request models call them, and ``describe_validation_errors``
turns pydantic's error list into one line naming each field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# The grammar of github.com/distribution/reference (reference.go / regexp.go).
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_HOST = rf"(?:{_DOMAIN_NAME}|{_IPV6})"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_REFERENCE = re.compile(rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$")
NAME_TOTAL_LENGTH_MAX = 255

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TENANCY_NAME_MAX = 56  # tenant-<name> must stay a valid namespace (63)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

IMAGE_RULE = (
    "an OCI image reference [registry[:port]/]path[:tag][@digest], lowercase path "
    "components, e.g. nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"
)
TENANCY_RULE = (
    f"a DNS label: 1-{TENANCY_NAME_MAX} lowercase letters, digits or '-', starting and ending with a letter or digit"
)
ENV_RULE = "letters, digits and '_', not starting with a digit"


def check_image(value: str) -> str:
    """An OCI/distribution image reference, e.g. ``nvcr.io/nvidia/cuda:12.5.0-base``."""
    for prefix in ("docker://", "oci://"):
        if value.startswith(prefix):
            value = value[len(prefix) :]
    match = _REFERENCE.match(value)
    first, sep, _rest = value.partition("/")
    if match is not None and sep and not ("." in first or ":" in first or first == "localhost"):
        # Like docker's normalisation: a first component without '.' or ':' is a
        # path component of docker.io, so it must be lowercase.
        if not re.fullmatch(_PATH_COMPONENT, first):
            match = None
    if match is None:
        raise ValueError(f"{value!r} is not a valid image reference; allowed: {IMAGE_RULE}")
    if len(match.group("name")) > NAME_TOTAL_LENGTH_MAX:
        raise ValueError(f"image repository name longer than {NAME_TOTAL_LENGTH_MAX} characters")
    return value


def check_tenancy_name(value: str) -> str:
    """A tenancy name: a DNS label short enough that ``tenant-<name>`` is a namespace."""
    if len(value) > TENANCY_NAME_MAX or not DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a valid tenancy name; allowed: {TENANCY_RULE}")
    return value


# Variables that steer the dynamic loader, the NVIDIA container runtime/driver stack,
# CUDA's device selection or Kubernetes' in-cluster discovery: a tenant setting them
# could change what the runtime injects or where the workload thinks the API is.
RESERVED_ENV_PREFIXES = ("LD_", "NVIDIA_", "CUDA_VISIBLE_", "KUBERNETES_")
RESERVED_ENV_RULE = "names starting with " + ", ".join(p + "*" for p in RESERVED_ENV_PREFIXES) + " are reserved"


def check_env_names(env: Mapping[str, str]) -> Mapping[str, str]:
    bad = [name for name in env if not ENV_NAME.match(name)]
    if bad:
        raise ValueError(f"invalid environment variable name(s) {bad!r}; allowed: {ENV_RULE}")
    reserved = sorted(name for name in env if name.upper().startswith(RESERVED_ENV_PREFIXES))
    if reserved:
        raise ValueError(f"reserved environment variable name(s) {reserved!r}; {RESERVED_ENV_RULE}")
    return env


# C0 control characters and DEL; tab, newline and carriage return are allowed in
# free text (scripts in args, multi-line env values) but never NUL.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
CONTROL_RULE = "control characters (NUL, ESC, DEL, ...) are not allowed"


def find_control(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (key or value) in ``value`` holding a control
    character other than tab/newline/CR in a value (keys allow none), else None."""
    if isinstance(value, str):
        return path or "body" if _CONTROL.search(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _ANY_CONTROL.search(key):
                return (path or "body") + f" (key {key!r})"
            found = find_control(item, where)
            if found is not None:
                return found
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = find_control(item, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
    return None


def has_control(value: str) -> bool:
    """Any C0 control character or DEL (for paths, query strings, identifiers)."""
    return _ANY_CONTROL.search(value) is not None


# GPU counts that match an HGX H100 Fabric Manager partition (8, 4, 2, 1 GPUs).
NVLINK_SIZES = (1, 2, 4, 8)


def nvlink_refusal(gpus: int) -> str:
    sizes = ", ".join(map(str, NVLINK_SIZES))
    return (
        f"gpus: {gpus} GPUs cannot be joined by NVLink (NVLink partitions have {sizes} GPUs); "
        f'ask for {sizes} GPUs, or send "nvlink": false to run {gpus} GPUs without NVLink'
    )


# What is allowed, appended to pydantic's own message for these fields.
FIELD_RULES = {
    "gpus": "allowed: an integer from 1 to 8",
    "timeout_seconds": "allowed: an integer number of seconds from 1 to 2592000 (30 days)",
    "gpu_quota": "allowed: an integer from 0 to 100000",
    "pod_quota": "allowed: an integer from 1 to 100000",
    "guaranteed_gpus": "allowed: an integer from 0 to 100000, at most gpu_quota",
    "weight": "allowed: a number from 0.001 to 1000",
    "limit": "allowed: an integer from 1 to 500",
    "offset": "allowed: an integer from 0 to 1000000000",
}


def _location(loc: Iterable[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    # pydantic puts the validator kind in the location for some errors; drop it.
    parts = [p for p in parts if p not in ("function-after", "function-before", "function-wrap")]
    return ".".join(parts) or "body"


def describe_validation_errors(errors: Iterable[Mapping[str, Any]], allowed: Iterable[str] = ()) -> str:
    """One human line per pydantic error: ``<field>: <what is wrong / what is allowed>``."""
    lines = []
    for err in errors:
        field = _location(err.get("loc", ()))
        kind = err.get("type", "")
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if kind == "extra_forbidden":
            msg = "unknown field"
            ctx_allowed = list(allowed)
            if ctx_allowed:
                msg += f"; allowed fields: {', '.join(ctx_allowed)}"
        elif kind == "json_invalid":
            field = "body"
            msg = f"malformed JSON ({err.get('ctx', {}).get('error', 'parse error')})"
        elif kind == "missing":
            msg = "field required"
        rule = FIELD_RULES.get(field.rsplit(".", 1)[-1])
        if rule and kind != "missing":
            msg = f"{msg} ({rule})"
        lines.append(f"{field}: {msg}")
    return "; ".join(lines) or "invalid request"
