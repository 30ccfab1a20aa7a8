"""Command-line options generated from a pydantic-settings class: one source per setting.

Every service declares its configuration once, as the typed, described fields of its
settings class. :func:`settings_command` turns those fields into typer options
(``--field-name``, the field's type, its description, default and env var shown in
``--help``) and, when the command runs, builds the settings object from the options
actually given. pydantic-settings does the rest, so the precedence is
flag > environment variable > default, and the environment is parsed exactly as the
class parses it (JSON for lists and mappings, ``true``/``false`` for booleans). A flag
for a list or mapping field takes the same JSON text as its environment variable.

Fields of type ``SecretStr`` get no flag (a command line is visible in ``ps``); they are
read from their environment variable only.

The same field walk (:func:`options_of`) feeds the generated configuration page
(``gpucaas.programs.config_docs``), so ``--help`` and the docs cannot drift apart.
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import AliasChoices, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings


@dataclass(frozen=True)
class Section:
    """One settings class feeding a command; ``prefix`` prefixes its flag names (``log-``)."""

    cls: type[BaseSettings]
    prefix: str = ""
    exclude: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SettingOption:
    """One settings field as a command-line option."""

    section: int
    field: str
    param: str  # python name of the command parameter
    flag: str  # --flag-name
    env: tuple[str, ...]
    type: Any  # the python type the option parses (str for JSON-valued fields)
    choices: tuple[str, ...] | None
    is_bool: bool
    is_json: bool
    default_text: str
    description: str
    secret: bool = False
    info: FieldInfo | None = field(default=None, compare=False, repr=False)


def _unwrap_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def env_names(cls: type[BaseSettings], name: str, info: FieldInfo) -> tuple[str, ...]:
    """The environment variable(s) pydantic-settings reads for one field."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names = tuple(str(c) for c in alias.choices if isinstance(c, str))
    elif isinstance(alias, str):
        names = (alias,)
    else:
        names = (f"{cls.model_config.get('env_prefix', '')}{name}",)
    if not cls.model_config.get("case_sensitive", False):
        names = tuple(n.upper() for n in names)
    return names


def _default_text(info: FieldInfo, is_json: bool) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "default_text" in extra:
        return str(extra["default_text"])
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        return "(required)"
    return default_to_text(value, is_json)


def default_to_text(value: Any, is_json: bool = False) -> str:
    """How a default value is shown (``--help``, the docs table)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if is_json or isinstance(value, (list, tuple, dict)):
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    if value == "":
        return '""'
    return str(value)


def options_of(*sections: type[BaseSettings] | Section) -> list[SettingOption]:
    """Every option the given settings classes produce, in field order."""
    out: list[SettingOption] = []
    for i, sec in enumerate(_sections(sections)):
        for name, info in sec.cls.model_fields.items():
            if name in sec.exclude:
                continue
            tp = _unwrap_optional(info.annotation)
            secret = tp is SecretStr
            choices: tuple[str, ...] | None = None
            is_bool = tp is bool
            is_json = False
            if typing.get_origin(tp) is Literal:
                choices = tuple(str(a) for a in typing.get_args(tp))
                opt_type: Any = str
            elif isinstance(tp, type) and issubclass(tp, enum.Enum):
                choices = tuple(str(m.value) for m in tp)
                opt_type = str
            elif tp in (bool, int, float, str):
                opt_type = tp
            elif tp is Path:  # given to the class as text: pydantic makes the Path ("" stays "", not ".")
                opt_type = str
            elif secret:
                opt_type = str
            else:  # lists, tuples, mappings: the same JSON text as the env var
                opt_type, is_json = str, True
            param = f"{sec.prefix.replace('-', '_')}{name}"
            out.append(SettingOption(
                section=i, field=name, param=param, flag="--" + param.replace("_", "-"),
                env=env_names(sec.cls, name, info), type=opt_type, choices=choices, is_bool=is_bool,
                is_json=is_json, default_text=_default_text(info, is_json),
                description=(info.description or "").strip(), secret=secret, info=info))
    return out


def _sections(sections: Iterable[type[BaseSettings] | Section]) -> list[Section]:
    return [s if isinstance(s, Section) else Section(s) for s in sections]


def _parameter(opt: SettingOption) -> inspect.Parameter:
    env = " / ".join(opt.env)
    help_text = f"{opt.description} \\[env: {env}]"  # escaped: typer's rich help reads [..] as markup
    decls = [f"{opt.flag}/--no-{opt.flag[2:]}"] if opt.is_bool else [opt.flag]
    kwargs: dict[str, Any] = {"help": help_text, "show_default": opt.default_text}
    if opt.info is not None and _unwrap_optional(opt.info.annotation) is Path:
        kwargs["metavar"] = "PATH"
    tp = Literal[opt.choices] if opt.choices else opt.type  # type: ignore[valid-type]
    annotation = Annotated[tp | None, typer.Option(*decls, **kwargs)]
    return inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def _fail(command: str, opts: list[SettingOption], section: int, exc: ValidationError) -> typer.Exit:
    by_field = {o.field: o for o in opts if o.section == section}
    for err in exc.errors():
        loc = err.get("loc") or ()
        name = str(loc[0]) if loc else ""
        opt = by_field.get(name)
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        where = f"invalid {opt.flag} ({opt.env[0]})" if opt else "invalid settings"
        typer.echo(f"gpucaas {command}: {where}: {msg}", err=True)
    return typer.Exit(2)


def build_settings(cls: type[BaseSettings], given: dict[str, Any]) -> BaseSettings:
    """The settings object: ``given`` (flags) over the environment over the defaults."""
    kwargs: dict[str, Any] = {}
    for name, value in given.items():
        alias = cls.model_fields[name].validation_alias
        if isinstance(alias, AliasChoices):
            alias = next((c for c in alias.choices if isinstance(c, str)), None)
        kwargs[alias if isinstance(alias, str) else name] = value
    return cls(**kwargs)


def settings_command(*sections: type[BaseSettings] | Section,
                     name: str | None = None,
                     precheck: Callable[[dict[str, Any]], None] | None = None,
                     ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate ``fn(settings_a, settings_b, ..., **own_options)`` into a typer command.

    The first ``len(sections)`` parameters of ``fn`` receive the built settings objects;
    its remaining parameters (typer-annotated, for what is not configuration, such as
    ``--output``) are kept as they are. ``precheck(flags)``, if given, runs before the
    settings are validated, with the flags given (by field name; unset ones absent): for a
    start-up condition that must be reported first and alone (it may ``typer.Exit``).
    """
    secs = _sections(sections)
    opts = options_of(*secs)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[len(secs):]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        taken = {p.name for p in own}
        generated = [o for o in opts if not o.secret]
        params = [o.param for o in generated]
        clash = (taken & set(params)) | {p for p in params if params.count(p) > 1}
        if clash:
            raise TypeError(f"{fn.__qualname__}: options {sorted(clash)} are declared twice")
        command = name or fn.__name__.replace("_", "-")

        def build(kwargs: dict[str, Any]) -> list[BaseSettings]:
            """The settings objects from the options given (popped from ``kwargs``)."""
            built = []
            for i, sec in enumerate(secs):
                given: dict[str, Any] = {}
                for o in generated:
                    if o.section != i:
                        continue
                    value = kwargs.pop(o.param, None)
                    if value is None:
                        continue
                    if o.is_json:
                        try:
                            value = json.loads(value)
                        except ValueError as exc:
                            typer.echo(f"gpucaas {command}: invalid {o.flag}: not JSON ({exc})", err=True)
                            raise typer.Exit(2) from None
                    given[o.field] = value
                try:
                    built.append(build_settings(sec.cls, given))
                except ValidationError as exc:
                    raise _fail(command, opts, i, exc) from None
            return built

        def command_fn(**kwargs: Any) -> Any:
            if precheck is not None:
                precheck({o.field: kwargs[o.param] for o in generated
                          if o.param in kwargs and kwargs[o.param] is not None})
            built = build(kwargs)
            return fn(*built, **kwargs)

        command_fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            own + [_parameter(o) for o in generated])
        command_fn.__doc__ = fn.__doc__
        command_fn.__name__ = fn.__name__
        command_fn.__qualname__ = fn.__qualname__
        command_fn.__module__ = fn.__module__
        command_fn.settings_sections = tuple(secs)  # type: ignore[attr-defined]
        command_fn.settings_options = tuple(generated)  # type: ignore[attr-defined]
        command_fn.build_settings = build  # type: ignore[attr-defined]
        return command_fn

    return wrap
