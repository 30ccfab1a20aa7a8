"""Command-line options generated from a settings class: one source per setting.

Every service declares its configuration once, as the typed, described fields of its
settings class. :func:`settings_command` turns those fields into typer options
(``--field-name``, the field's type, its description, default and env var shown in
``--help``) and, when the command runs, builds the settings object from the options
actually given. The class (pydantic-settings' ``BaseSettings``) does the rest,
so the precedence is flag > environment variable > default, and the environment is
parsed exactly as the class parses it (JSON for lists and mappings, ``true``/``false``
for booleans). A flag for a list or mapping field takes the same JSON text as its
environment variable.

Fields of type ``SecretStr`` get no flag (a command line is visible in ``ps``); they are
read from their environment variable only.

The same field walk (:func:`options_of`) feeds the generated configuration page
(``gpucaas.config_docs``), so ``--help`` and the docs cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

if TYPE_CHECKING:  # not loaded by a node daemon started with plain options (SettingsCommand)
    import typer

#: number text the plain option parser converts itself, as typer would (anything else: typer)
INT_TEXT = re.compile(r"-?[0-9]{1,18}")
FLOAT_TEXT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")


@dataclass(frozen=True)
class Section:
    """One settings class feeding a command; ``prefix`` prefixes its flag names (``log-``)."""

    cls: type[BaseModel]
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
    info: FieldInfo | None = dataclasses.field(default=None, compare=False, repr=False)


def _unwrap_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def env_names(cls: type[BaseModel], name: str, info: FieldInfo) -> tuple[str, ...]:
    """The environment variable(s) the settings class reads for one field."""
    alias = info.validation_alias
    choices = getattr(alias, "choices", None)
    if choices is not None:  # AliasChoices
        names = tuple(str(c) for c in choices if isinstance(c, str))
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
    if info.is_required():
        return "(required)"
    return default_to_text(info.get_default(call_default_factory=True), is_json)


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


def options_of(*sections: type[BaseModel] | Section) -> list[SettingOption]:
    """Every option the given settings classes produce, in field order."""
    out: list[SettingOption] = []
    for i, sec in enumerate(_sections(sections)):
        for name, info in sec.cls.model_fields.items():
            if name in sec.exclude:
                continue
            tp = _unwrap_optional(info.annotation)
            secret = _is_secret(tp)
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
            out.append(
                SettingOption(
                    section=i,
                    field=name,
                    param=param,
                    flag="--" + param.replace("_", "-"),
                    env=env_names(sec.cls, name, info),
                    type=opt_type,
                    choices=choices,
                    is_bool=is_bool,
                    is_json=is_json,
                    default_text=_default_text(info, is_json),
                    description=(info.description or "").strip(),
                    secret=secret,
                    info=info,
                )
            )
    return out


def _is_secret(tp: Any) -> bool:
    pydantic = sys.modules.get("pydantic")  # a SecretStr field means pydantic is loaded
    return pydantic is not None and tp is pydantic.SecretStr


def _sections(sections: Iterable[type[BaseModel] | Section]) -> list[Section]:
    return [s if isinstance(s, Section) else Section(s) for s in sections]


def _parameter(opt: SettingOption) -> inspect.Parameter:
    env = " / ".join(opt.env)
    help_text = f"{opt.description} \\[env: {env}]"  # escaped: typer's rich help reads [..] as markup
    decls = [f"{opt.flag}/--no-{opt.flag[2:]}"] if opt.is_bool else [opt.flag]
    kwargs: dict[str, Any] = {"help": help_text, "show_default": opt.default_text}
    if opt.info is not None and _unwrap_optional(opt.info.annotation) is Path:
        kwargs["metavar"] = "PATH"
    tp = Literal[opt.choices] if opt.choices else opt.type
    import typer

    annotation = Annotated[tp | None, typer.Option(*decls, **kwargs)]  # type: ignore[valid-type]  # built at run time
    return inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def _fail(command: str, opts: list[SettingOption], section: int, exc: ValidationError) -> typer.Exit:
    import typer

    by_field = {o.field: o for o in opts if o.section == section}
    for err in exc.errors():
        loc = err.get("loc") or ()
        name = str(loc[0]) if loc else ""
        opt = by_field.get(name)
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        where = f"invalid {opt.flag} ({opt.env[0]})" if opt else "invalid settings"
        typer.echo(f"gpucaas {command}: {where}: {msg}", err=True)
    return typer.Exit(2)


def build_settings(cls: type[BaseModel], given: dict[str, Any]) -> BaseModel:
    """The settings object: ``given`` (flags) over the environment over the defaults."""
    kwargs: dict[str, Any] = {}
    for name, value in given.items():
        alias = cls.model_fields[name].validation_alias
        choices = getattr(alias, "choices", None)
        if choices is not None:  # AliasChoices
            alias = next((c for c in choices if isinstance(c, str)), None)
        kwargs[alias if isinstance(alias, str) else name] = value
    return cls(**kwargs)


def settings_command(
    *sections: type[BaseModel] | Section,
    name: str | None = None,
    precheck: Callable[[dict[str, Any]], None] | None = None,
) -> Callable[[Callable[..., Any]], SettingsCommand]:
    """Decorate ``fn(settings_a, settings_b, ..., **own_options)`` into a typer command.

    The first ``len(sections)`` parameters of ``fn`` receive the built settings objects;
    its remaining parameters (typer-annotated, for what is not configuration, such as
    ``--output``) are kept as they are. ``precheck(flags)``, if given, runs before the
    settings are validated, with the flags given (by field name; unset ones absent): for a
    start-up condition that must be reported first and alone (it may ``typer.Exit``).
    """
    return lambda fn: SettingsCommand(fn, _sections(sections), name=name, precheck=precheck)


class SettingsCommand:
    """``fn`` as a typer command whose options are its settings' fields (see :func:`settings_command`).

    Typer reads the command's ``__signature__``, built on first use: typer is imported only
    then. A node daemon started with plain options (``--name value``, ``--name=value``,
    ``--flag``/``--no-flag``, values that convert as typer converts them) skips typer
    altogether (:meth:`run_plain`): typer and click cost a node daemon 1.4 MB resident
    (measured over pydantic-settings; rich more, for the help) it has no use for once started.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        secs: list[Section],
        *,
        name: str | None,
        precheck: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[len(secs) :]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        opts = options_of(*secs)
        generated = [o for o in opts if not o.secret]
        params = [o.param for o in generated]
        clash = ({p.name for p in own} & set(params)) | {p for p in params if params.count(p) > 1}
        if clash:
            raise TypeError(f"{fn.__qualname__}: options {sorted(clash)} are declared twice")
        self._fn, self._own, self._opts, self._precheck = fn, own, opts, precheck
        self._command = name or fn.__name__.replace("_", "-")
        self._signature: inspect.Signature | None = None
        # what typer copies onto its wrapper (functools.update_wrapper): the name, the help, these
        self.__doc__, self.__name__, self.__qualname__ = fn.__doc__, fn.__name__, fn.__qualname__
        self.__module__ = fn.__module__
        self.__annotations__: dict[str, Any] = {}  # typer reads the signature's, not these
        self.settings_sections = tuple(secs)
        self.settings_options = tuple(generated)
        self.build_settings = self._build

    @property
    def __signature__(self) -> inspect.Signature:
        if self._signature is None:
            self._signature = inspect.Signature(self._own + [_parameter(o) for o in self.settings_options])
        return self._signature

    def _build(self, kwargs: dict[str, Any]) -> list[BaseModel]:
        """The settings objects from the options given (popped from ``kwargs``)."""
        built = []
        for i, sec in enumerate(self.settings_sections):
            given: dict[str, Any] = {}
            for o in self.settings_options:
                if o.section != i:
                    continue
                value = kwargs.pop(o.param, None)
                if value is None:
                    continue
                if o.is_json:
                    try:
                        value = json.loads(value)
                    except ValueError as exc:
                        import typer

                        typer.echo(f"gpucaas {self._command}: invalid {o.flag}: not JSON ({exc})", err=True)
                        raise typer.Exit(2) from None
                given[o.field] = value
            try:
                built.append(build_settings(sec.cls, given))
            except ValidationError as exc:
                raise _fail(self._command, self._opts, i, exc) from None
        return built

    def __call__(self, **kwargs: Any) -> Any:
        if self._precheck is not None:
            self._precheck(
                {
                    o.field: kwargs[o.param]
                    for o in self.settings_options
                    if o.param in kwargs and kwargs[o.param] is not None
                }
            )
        built = self._build(kwargs)
        return self._fn(*built, **kwargs)

    def plain_options(self, args: list[str]) -> dict[str, Any] | None:
        """``args`` (after the command name) as typer would pass them, or None when they are not
        plain (``--help``, an unknown or repeated option, a value typer would refuse or convert
        its own way, a shell completion request...): typer must handle those."""
        if self._own or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
            return None
        flags: dict[str, tuple[SettingOption, bool | None]] = {}
        for o in self.settings_options:
            flags[o.flag] = (o, True if o.is_bool else None)
            if o.is_bool:
                flags[f"--no-{o.flag[2:]}"] = (o, False)
        given: dict[str, Any] = {}
        rest = list(args)
        while rest:
            flag, eq, text = rest.pop(0).partition("=")
            entry = flags.get(flag)
            if entry is None or entry[0].param in given:
                return None
            opt, switch = entry
            if switch is not None:
                if eq:
                    return None
                given[opt.param] = switch
                continue
            if not eq:
                if not rest:
                    return None
                text = rest.pop(0)
            value = _plain_value(opt, text)
            if value is None:
                return None
            given[opt.param] = value
        return given

    def run_plain(self, args: list[str]) -> bool:
        """Run with ``args`` without typer when they are plain (False, nothing done, if not)."""
        given = self.plain_options(args)
        if given is None:
            return False
        try:
            self(**given)
        except Exception as exc:
            typer = sys.modules.get("typer")  # loaded by whoever raised typer.Exit
            if typer is not None and isinstance(exc, typer.Exit):
                raise SystemExit(exc.exit_code) from None
            raise
        return True


def _plain_value(opt: SettingOption, text: str) -> Any:
    """The value typer passes for ``text``, where that is plain; else None."""
    if opt.is_json:
        return None
    if opt.choices is not None:
        return text if text in opt.choices else None
    if opt.type is int:
        return int(text) if INT_TEXT.fullmatch(text) else None
    if opt.type is float:
        return float(text) if FLOAT_TEXT.fullmatch(text) else None
    if opt.type is str and not text.startswith("-"):
        return text
    return None
