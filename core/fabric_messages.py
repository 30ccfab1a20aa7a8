"""The fabric service's messages: every request and response body of its node-local API.

One definition for the three parties: the server (``services/fabric``) builds its
answers as these types and validates the request bodies with them, the client
(:mod:`core.fabric_client`, used by the device plugin, the DRA driver, ``caasctl``,
``gpucaas doctor`` and the sandbox) validates every answer with them. A body that
does not match is refused with the field named (``gpus.0.pci_bus_id: Input should be
a valid string``): by the server as a 400, by the client as
:class:`core.fabric_client.FabricMalformed`.

The bodies are ``TypedDict`` s validated by pydantic (:func:`parse`): at runtime a
message is the plain ``dict`` the JSON wire carries, so the wire format and the
callers' ``body["field"]`` reads stay as they were, while mypy checks each field where
a body is built or read. Validation is strict (JSON types only: ``"3"`` is not an
integer, ``true`` not a number); keys a message does not declare are ignored, so an
older client reads a newer server's answers.

Memory: pydantic is loaded by the node daemons anyway (their settings are
pydantic-settings classes); the validators of these messages are built on first use
and cost little: every one of them built adds 0.1 MB resident to the fabric service
(measured over its imports, pydantic's included), against about 7 MB for pydantic itself.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

MAX_HOLDER = 512
MAX_GPUS = 64

_STRICT = ConfigDict(strict=True)

Holder = Annotated[str, Field(min_length=1, max_length=MAX_HOLDER)]
#: a pod as ``"namespace/name"``
Pod = str | None


# --- requests --------------------------------------------------------------------------
@with_config(_STRICT)
class ActivationRequest(TypedDict):
    """``POST /v1/activations``: activate the partition(s) of ``gpus`` (PCI addresses) for ``holder``."""

    holder: Holder
    gpus: Annotated[list[str], Field(min_length=1, max_length=MAX_GPUS)]
    pod: NotRequired[Pod]


@with_config(_STRICT)
class LiveHolder(TypedDict):
    """One live holder of ``POST /v1/activations/sync``, with its pod when known."""

    holder: Holder
    pod: NotRequired[Pod]


@with_config(_STRICT)
class SyncRequest(TypedDict):
    """``POST /v1/activations/sync``: the live holders; ``grace_seconds`` absent or null: the service's."""

    live: list[LiveHolder]
    grace_seconds: NotRequired[Annotated[float, Field(ge=0)] | None]


# --- answers ---------------------------------------------------------------------------
@with_config(_STRICT)
class ActivationResult(TypedDict):
    """``POST /v1/activations``."""

    holder: str
    gpus: list[str]
    partition_ids: list[int]
    nvlink: bool


@with_config(_STRICT)
class ReleaseResult(TypedDict):
    """``DELETE /v1/activations/{holder}``: ``pending`` when Fabric Manager could not deactivate yet."""

    holder: str
    released: bool
    partition_ids: list[int]
    pending: bool


@with_config(_STRICT)
class SyncResult(TypedDict):
    """``POST /v1/activations/sync``: holders released, pending release, and kept."""

    released: list[str]
    pending: list[str]
    kept: list[str]


@with_config(_STRICT)
class ActivationRecord(TypedDict):
    """One record of ``GET /v1/activations`` (times are ISO 8601 with their offset)."""

    holder: str
    gpus: list[str]
    partition_ids: list[int]
    pod: str | None
    since: str
    releasing: bool
    lost: str | None
    lost_at: str | None


@with_config(_STRICT)
class Activations(TypedDict):
    """``GET /v1/activations``."""

    activations: list[ActivationRecord]


@with_config(_STRICT)
class PartitionGpu(TypedDict):
    physical_id: int
    pci_bus_id: str


@with_config(_STRICT)
class Partition(TypedDict):
    """One partition of Fabric Manager's table, with the holder of its activation."""

    id: int
    gpus: list[PartitionGpu]
    nvlinks: int
    active: bool
    supported: bool
    holder: str | None


@with_config(_STRICT)
class Partitions(TypedDict):
    """``GET /v1/partitions``."""

    partitions: list[Partition]


@with_config(_STRICT)
class TopologyGpu(TypedDict):
    """A GPU by physical (module) id: its PCI address, where it came from, and its health."""

    physical_id: int
    pci_bus_id: str | None
    healthy: bool
    reason: str | None
    pci_source: str


@with_config(_STRICT)
class Topology(TypedDict):
    """``GET /v1/topology``; ``layout`` is the host's platform layout (``PlatformLayout.view``)."""

    source: str
    gpus: list[TopologyGpu]
    layout: dict[str, Any] | None
    layout_problems: list[str]


@with_config(_STRICT)
class FabricManagerHealth(TypedDict):
    reachable: bool
    backend: str
    message: str
    replays: int


@with_config(_STRICT)
class ServiceVMState(TypedDict):
    """The service VM: ``state`` is ``unmanaged`` where the service runs none."""

    state: str
    restarts: int
    domain: NotRequired[str]
    crash_streak: NotRequired[int]
    message: NotRequired[str]


@with_config(_STRICT)
class Health(TypedDict):
    """``GET /v1/health``."""

    fabric_manager: FabricManagerHealth
    service_vm: ServiceVMState
    failed_gpus: list[str]


@with_config(_STRICT)
class AdminActivation(TypedDict):
    """``POST /v1/partitions/{id}/activate``: ``evicted`` lists the holders a forced activation released."""

    id: int
    active: bool
    holder: str
    evicted: list[str]


@with_config(_STRICT)
class AdminDeactivation(TypedDict):
    """``POST /v1/partitions/{id}/deactivate``."""

    id: int
    active: bool
    released_holder: str | None


@with_config(_STRICT)
class ErrorBody(TypedDict):
    """Every error answer: 400 (bad input, naming the field), 404, 405, 409 (conflict,
    naming the holder), 413, 422 (unsupported partition), 500, 503 (Fabric Manager or
    its VM unavailable)."""

    code: str
    detail: str


# --- validation ------------------------------------------------------------------------
M = TypeVar("M")


_adapters: dict[object, TypeAdapter[Any]] = {}


def _adapter(message: Any) -> TypeAdapter[Any]:
    """The message's validator, built on first use (building one costs time and memory)."""
    adapter = _adapters.get(message)
    if adapter is None:
        adapter = _adapters[message] = TypeAdapter(message)
    return adapter


class MessageError(ValueError):
    """A body that is not the message it should be; ``str()`` names each wrong field."""


def describe(exc: ValidationError, root: str = "body") -> str:
    """``field.path: message`` for each error, ``; ``-separated (``root`` for the body itself)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or root}: {err['msg']}" for err in exc.errors(include_url=False)
    )


def parse(message: type[M], body: object) -> M:
    """``body`` (decoded JSON) as ``message``, or :class:`MessageError` naming the fields that are wrong."""
    try:
        return _adapter(message).validate_python(body)
    except ValidationError as exc:
        raise MessageError(describe(exc)) from None
