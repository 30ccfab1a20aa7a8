"""Settings read from the environment without pydantic-settings or pydantic, for the node daemons.

A node daemon must stay under 60 MB resident (it runs beside the tenants' VMs) and grpc alone takes ~37 MB.
pydantic-settings costs a node daemon about 1.3 MB (device plugin) to 2.8 MB (fabric
service), pydantic's models and validators about 7.5 MB more (pydantic-core alone is
5 MB), all to read a few dozen strings at start-up. :class:`EnvSettings` does that
itself, for the field types the daemons use, and leaves everything else to pydantic:

- **Declared as pydantic models are**: typed fields with :func:`Field` (default or
  ``default_factory``, ``description``, ``gt``/``ge``/``lt``/``le``,
  ``json_schema_extra``), :func:`field_validator` (``before`` or ``after``) and
  :func:`model_validator` (``after``), with the same signatures as pydantic's. The
  class exposes what the rest of gpucaas reads of a model: ``model_fields`` (objects
  with a pydantic ``FieldInfo``'s attributes), ``model_config``, ``model_fields_set``,
  ``model_dump()``.
- **Read as pydantic-settings reads them** with the same config: for each field, the
  variable ``<env_prefix><FIELD NAME>`` (names matched case-insensitively), its text
  given to the field's validation as is; keyword arguments win over the environment,
  the environment over defaults; defaults are validated.
- **Validated in-house only where that is plainly pydantic's answer**: a value of the
  field's own type, or canonical text (``9402``, ``0.5``, ``true``/``no``..., a
  non-empty path, one of a Literal's strings), inside its bounds, that the validators
  accept. Anything else (a bad value, a validator's error, but also text pydantic reads
  its own way, such as ``" +12 "`` or ``1e-3``) is handed, with the same inputs, to
  the equivalent pydantic model, built on first use (:meth:`EnvSettings.pydantic_model`):
  its result or its ``ValidationError`` is the answer, so every error message is
  pydantic's own and pydantic is loaded only by a process that has a bad or unusual
  value to report.

Only what the node daemons use is supported: fields of type str, int, float, bool,
Path or a Literal of strings (each optionally ``None``), no alias. Anything else is
refused when the class is defined, so a difference cannot go unnoticed
(``tests/core/test_env_settings.py`` compares the values, fields set and errors with
pydantic-settings' on the same declarations, and the daemons' own classes with their
pydantic equivalents).
"""

from __future__ import annotations

import inspect
import math
import os
import re
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, TypedDict

_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "PydanticUndefined"})()

#: the value types a field may have (``None`` allowed beside one of them)
_SIMPLE = (str, int, float, bool, Path)
#: pydantic's lax ``bool`` from text (case-insensitive)
_BOOLS = {
    "1": True,
    "on": True,
    "t": True,
    "true": True,
    "y": True,
    "yes": True,
    "0": False,
    "off": False,
    "f": False,
    "false": False,
    "n": False,
    "no": False,
}
#: canonical number text, converted in-house (also by the plain option parser of settings_cli)
INT_TEXT = re.compile(r"-?[0-9]{1,18}")
FLOAT_TEXT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")
_PATH_TYPE = type(Path())


class EnvSettingsConfigDict(TypedDict, total=False):
    """The model config :class:`EnvSettings` honours (names as pydantic-settings has them)."""

    env_prefix: str
    extra: Literal["ignore", "forbid"]


class FieldInfo:
    """One field, with the attributes of pydantic's ``FieldInfo`` that gpucaas reads."""

    __slots__ = ("annotation", "default", "default_factory", "description", "json_schema_extra", "gt", "ge", "lt", "le")
    alias = None
    validation_alias = None

    def __init__(
        self,
        default: Any = _MISSING,
        *,
        default_factory: Callable[[], Any] | None = None,
        description: str | None = None,
        gt: float | None = None,
        ge: float | None = None,
        lt: float | None = None,
        le: float | None = None,
        json_schema_extra: dict[str, Any] | None = None,
    ) -> None:
        if default is not _MISSING and default_factory is not None:
            raise TypeError("cannot specify both default and default_factory")
        self.annotation: Any = None
        self.default, self.default_factory = default, default_factory
        self.description, self.json_schema_extra = description, json_schema_extra
        self.gt, self.ge, self.lt, self.le = gt, ge, lt, le

    def is_required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    def get_default(self, *, call_default_factory: bool = False) -> Any:
        if self.default_factory is not None:
            return self.default_factory() if call_default_factory else None
        return None if self.default is _MISSING else self.default

    def pydantic_kwargs(self) -> dict[str, Any]:
        """The same field as ``pydantic.Field(**kwargs)``."""
        kwargs: dict[str, Any] = {
            k: getattr(self, k)
            for k in ("default_factory", "description", "gt", "ge", "lt", "le", "json_schema_extra")
            if getattr(self, k) is not None
        }
        if self.default is not _MISSING:
            kwargs["default"] = self.default
        return kwargs

    def __repr__(self) -> str:
        return f"FieldInfo(annotation={self.annotation!r}, required={self.is_required()})"


def Field(default: Any = _MISSING, **kwargs: Any) -> Any:  # noqa: N802 - pydantic's name
    """A field's default and description, as ``pydantic.Field`` takes them (a subset)."""
    return FieldInfo(default, **kwargs)


class _Validator:
    """A :func:`field_validator` or :func:`model_validator` as declared (kept on the class)."""

    def __init__(self, func: Any, fields: tuple[str, ...], mode: str) -> None:
        self.func, self.fields, self.mode = func, fields, mode

    def call(self, owner: type, value: Any) -> Any:
        func = self.func.__func__ if isinstance(self.func, (classmethod, staticmethod)) else self.func
        return func(value) if isinstance(self.func, staticmethod) else func(owner, value)


def field_validator(*fields: str, mode: Literal["before", "after"] = "after") -> Callable[[Any], Any]:
    """``pydantic.field_validator`` for ``before``/``after`` validators taking ``(cls, value)``."""
    if mode not in ("before", "after") or not fields:
        raise TypeError(f"field_validator: fields and mode 'before' or 'after' (not {mode!r})")
    return lambda func: _Validator(func, fields, mode)


def model_validator(*, mode: Literal["after"]) -> Callable[[Any], Any]:
    """``pydantic.model_validator(mode="after")``: ``(self) -> self`` once every field is set."""
    if mode != "after":
        raise TypeError(f"model_validator: only mode='after' here (not {mode!r})")
    return lambda func: _Validator(func, (), "model")


def _simple(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _simple(args[0])
    if origin is Literal:
        return all(type(a) is str for a in typing.get_args(annotation))
    return annotation in _SIMPLE


class _Defer(Exception):
    """Not plainly valid: pydantic decides."""


def _convert(annotation: Any, value: Any) -> Any:
    """``value`` as pydantic's lax mode makes it for ``annotation``, where that is plain; else _Defer."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        origin = typing.get_origin(annotation)
    kind = type(value)
    if origin is Literal:
        if kind is str and value in typing.get_args(annotation):
            return value
    elif annotation is str:
        if kind is str:
            return value
    elif annotation is bool:
        if kind is bool:
            return value
        if kind is str and value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
    elif annotation is int:
        if kind is int or (kind is str and INT_TEXT.fullmatch(value)):
            return int(value)
    elif annotation is float:
        if kind is float and math.isfinite(value):
            return value
        if kind is int or (kind is str and FLOAT_TEXT.fullmatch(value)):
            return float(value)
    elif annotation is Path:
        if kind is _PATH_TYPE:
            return value
        if kind is str and value:
            return Path(value)
    raise _Defer


def _in_bounds(info: FieldInfo, value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, Path)):
        return True
    return (
        (info.gt is None or value > info.gt)
        and (info.ge is None or value >= info.ge)
        and (info.lt is None or value < info.lt)
        and (info.le is None or value <= info.le)
    )


class EnvSettings:
    """A settings class whose missing fields come from ``<env_prefix><NAME>`` variables."""

    model_config: ClassVar[EnvSettingsConfigDict] = EnvSettingsConfigDict(env_prefix="", extra="forbid")
    model_fields: ClassVar[dict[str, FieldInfo]] = {}
    _field_validators: ClassVar[dict[str, list[_Validator]]] = {}
    if typing.TYPE_CHECKING:  # per instance, set in __init__ and model_construct (not a field)
        _fields_set: set[str]
    _model_validators: ClassVar[list[_Validator]] = []
    _validators: ClassVar[dict[str, _Validator]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config: dict[str, Any] = {}
        validators: dict[str, _Validator] = {}
        for klass in reversed(cls.__mro__):
            config.update(vars(klass).get("model_config", {}))
            validators.update({k: v for k, v in vars(klass).items() if isinstance(v, _Validator)})
        unknown = set(config) - {"env_prefix", "extra"}
        if unknown or config.get("extra") not in ("ignore", "forbid"):
            raise TypeError(f"{cls.__qualname__}: model_config takes env_prefix and extra ('ignore' or 'forbid')")
        cls.model_config = typing.cast(EnvSettingsConfigDict, config)
        fields: dict[str, FieldInfo] = {}
        for name, annotation in typing.get_type_hints(cls).items():
            if typing.get_origin(annotation) is ClassVar or annotation is ClassVar:
                continue
            if name.startswith("_"):
                raise TypeError(f"{cls.__qualname__}.{name}: EnvSettings fields are public")
            if not _simple(annotation):
                raise TypeError(
                    f"{cls.__qualname__}.{name}: EnvSettings fields are str, int, float, bool, "
                    f"Path or a Literal of strings (optionally None), not {annotation!r}"
                )
            declared = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), _MISSING)
            if not isinstance(declared, FieldInfo):
                if type(declared).__module__.startswith("pydantic"):
                    raise TypeError(
                        f"{cls.__qualname__}.{name}: use core.env_settings.Field "
                        "(EnvSettings fields take no alias nor pydantic-only options)"
                    )
                declared = FieldInfo(declared)
            info = FieldInfo(**{k: getattr(declared, k) for k in FieldInfo.__slots__ if k != "annotation"})
            info.annotation = annotation
            fields[name] = info
        cls.model_fields = fields
        by_field: dict[str, list[_Validator]] = {name: [] for name in fields}
        for attr, v in validators.items():
            missing = [f for f in v.fields if f not in fields]
            if missing:
                raise TypeError(f"{cls.__qualname__}.{attr}: validates unknown fields {missing}")
            func = v.func.__func__ if isinstance(v.func, (classmethod, staticmethod)) else v.func
            wanted = 1 if isinstance(v.func, staticmethod) or v.mode == "model" else 2
            if len(inspect.signature(func).parameters) != wanted:
                raise TypeError(
                    f"{cls.__qualname__}.{attr}: EnvSettings validators take "
                    f"{'(self)' if v.mode == 'model' else '(cls, value)'}, no ValidationInfo"
                )
            for f in v.fields:
                by_field[f].append(v)
        cls._validators = validators
        cls._field_validators = by_field
        cls._model_validators = [v for v in validators.values() if v.mode == "model"]

    def __init__(self, **values: Any) -> None:
        data = {**self.env_values(), **values}
        try:
            self._validate(data)
        except Exception:  # noqa: BLE001 - not plainly valid: pydantic's answer, value or error
            model = self.pydantic_model()(**data)
            object.__setattr__(self, "__dict__", {name: getattr(model, name) for name in self.model_fields})
            object.__setattr__(self, "_fields_set", set(model.model_fields_set))

    def _validate(self, data: dict[str, Any]) -> None:
        cls = type(self)
        if cls.model_config.get("extra") == "forbid" and set(data) - set(cls.model_fields):
            raise _Defer
        values: dict[str, Any] = {}
        for name, info in cls.model_fields.items():
            value = data[name] if name in data else info.get_default(call_default_factory=True)
            validators = cls._field_validators[name]
            for v in reversed([v for v in validators if v.mode == "before"]):
                value = v.call(cls, value)
            value = _convert(info.annotation, value)
            if not _in_bounds(info, value):
                raise _Defer
            for v in validators:
                if v.mode == "after":
                    value = v.call(cls, value)
            values[name] = value
        object.__setattr__(self, "__dict__", values)
        object.__setattr__(self, "_fields_set", {name for name in data if name in cls.model_fields})
        for v in cls._model_validators:
            if v.func(self) is not self:
                raise _Defer

    @classmethod
    def env_values(cls) -> dict[str, str]:
        """The fields set in the environment, by field name (the text, unvalidated)."""
        prefix = str(cls.model_config.get("env_prefix", "")).lower()
        environ = {k.lower(): v for k, v in os.environ.items()}
        return {
            name: environ[f"{prefix}{name}".lower()]
            for name in cls.model_fields
            if f"{prefix}{name}".lower() in environ
        }

    @classmethod
    def pydantic_model(cls, base: type | None = None) -> type[Any]:
        """The same declaration as a pydantic model (``base``: ``pydantic.BaseModel`` or a subclass,
        such as pydantic-settings' ``BaseSettings``, which then reads the environment itself)."""
        cached = cls.__dict__.get("_pydantic_models", {})
        if base in cached:
            return typing.cast(type[Any], cached[base])
        import pydantic

        namespace: dict[str, Any] = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "__annotations__": {name: info.annotation for name, info in cls.model_fields.items()},
            "model_config": {"extra": cls.model_config.get("extra", "forbid"), "validate_default": True},
        }
        if base is not None:  # pydantic-settings: the environment too
            namespace["model_config"]["env_prefix"] = cls.model_config.get("env_prefix", "")
        for name, info in cls.model_fields.items():
            namespace[name] = pydantic.Field(**info.pydantic_kwargs())
        for attr, v in cls._validators.items():
            if v.mode == "model":
                namespace[attr] = pydantic.model_validator(mode="after")(v.func)
            else:
                namespace[attr] = pydantic.field_validator(*v.fields, mode=v.mode)(v.func)  # type: ignore[call-overload]
        model = types.new_class(cls.__name__, (base or pydantic.BaseModel,), exec_body=lambda ns: ns.update(namespace))
        cls._pydantic_models = {**cached, base: model}  # type: ignore[attr-defined]
        return model

    # --- what the rest of gpucaas reads of a pydantic model ------------------------------------------

    @property
    def model_fields_set(self) -> set[str]:
        return self._fields_set

    def model_dump(self) -> dict[str, Any]:
        return {name: self.__dict__[name] for name in self.model_fields}

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.model_fields:
            raise ValueError(f'"{type(self).__name__}" object has no field "{name}"')
        self.__dict__[name] = value
        self._fields_set.add(name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.model_dump().items())})"


def is_validation_error(exc: BaseException) -> bool:
    """Whether ``exc`` is pydantic's ``ValidationError`` (never true while pydantic is not loaded)."""
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(exc, core.ValidationError)
