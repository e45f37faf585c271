"""What a config holds, each value validated; and the merge: defaults < config < command line.

The records (:class:`Config`, :class:`SubjectConfig`, :class:`InputConfig`
and the ``{ value = ..., variable = true }`` and ``{ import = ... }``
values) and the validation of each value, shared by the config file
(:mod:`gradcheck.config_files`) and ``gradcheck.check``. Everything is
validated on load so that the checker only ever sees well-formed values; a
bad value raises :class:`ConfigError` whose message names the file, the key
and the closest valid name. Which keys are settings, and what each may hold,
is the table of :mod:`gradcheck.settings`.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gradcheck.dtypes import COMPLEX_DTYPES, FLOAT_DTYPES, INTEGER_DTYPES
from gradcheck.errors import ConfigError
from gradcheck.settings import BY_KEY, Choice, InvalidValue

# Re-exported: the checker and discovery take these from here.
from gradcheck.settings import Settings as Settings
from gradcheck.settings import closest as closest

INPUT_DTYPES = (*FLOAT_DTYPES, *INTEGER_DTYPES, *COMPLEX_DTYPES)
DISTRIBUTIONS = ("normal", "uniform", "positive", "spd", "integer")

_INPUT_KEYS = {"shape", "dtype", "distribution", "low", "high", "items"}
_VARIABLE_KEYS = {"value", "variable", "dtype"}
_IMPORT_KEYS = {"import"}
_IMPORT_EXAMPLE = '{ import = "module:attribute" }, e.g. { import = "my_project.bodies:step" } or "bodies.py:step"'
_PROXY_EXAMPLE = 'proxy = "module:function", e.g. proxy = "gradcheck.proxies:hard_tanh" or "proxies.py:my_proxy"'
_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class VariableValue:
    """An ``init`` or ``constants`` value the code needs as a ``tf.Variable``: ``{ value = ..., variable = true }``."""

    value: Any
    """The initial value (a number or nested lists of numbers)."""
    dtype: str | None = None
    """Its dtype; None: float64 for floats (float32 under a float32 run), int32 for integers."""


@dataclass(frozen=True)
class ImportValue:
    """An ``init`` or ``constants`` value that is a Python object: ``{ import = "module:attribute" }``.

    Only its form is checked when the config is read (no import, no
    TensorFlow); the check's request imports it
    (:func:`gradcheck.importing.import_object`).
    """

    module: str
    """A dotted module name, or a path to a ``.py`` file (relative to :attr:`folder`)."""
    attribute: str
    """The attribute of that module; dotted for an attribute of an attribute (``Class.method``)."""
    source: str
    """What gave it, for messages: the config file, or ``gradcheck.check()``."""
    key: str
    """Where it was written: ``functions.for_loop.constants.body_fn``."""
    folder: Path | None = None
    """The config file's folder; None: the current directory (``gradcheck.check``)."""

    @property
    def spec(self) -> str:
        """``module:attribute``, as written."""
        return f"{self.module}:{self.attribute}"


@dataclass(frozen=True)
class InputConfig:
    """How to draw one input: its shape (sizes or dim names) and distribution."""

    shape: tuple[int | str, ...]
    """Sizes, each an int or a name from ``[dims]``."""
    dtype: str | None = None
    """Dtype of this input; None: the run's dtype."""
    distribution: str = "normal"
    """One of :data:`DISTRIBUTIONS`."""
    low: float | None = None
    """Lower bound of a uniform or integer draw."""
    high: float | None = None
    """Upper bound (exclusive) of a uniform or integer draw."""
    distribution_given: bool = False
    """The config chose the draw (``distribution``, ``low`` or ``high``): it is never redrawn for a domain."""
    items: tuple[InputConfig, ...] = ()
    """For a list argument: one input per tensor of the list, in order."""


@dataclass(frozen=True)
class SubjectConfig:
    """The ``[functions.NAME]`` or ``[layers.NAME]`` table of one function or layer."""

    inputs: dict[str, InputConfig] = field(default_factory=dict)
    """Shapes and distributions of the differentiated arguments, in order."""
    constants: dict[str, Any] = field(default_factory=dict)
    """Arguments passed as they are, never differentiated."""
    init: dict[str, Any] = field(default_factory=dict)
    """Constructor keyword arguments (layers, classes of methods)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Overrides of :class:`Settings` for this one function."""
    proxy: Any = None
    """``proxy = "module:function"``: the function whose derivative the backward function stands for, as an
    :class:`ImportValue` (a config file) or the callable itself (``gradcheck.check``); None: no surrogate."""


@dataclass(frozen=True)
class Config:
    """A loaded, validated config file (or the empty default)."""

    path: Path | None = None
    """Where it was read from; None when no file was found."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Top-level settings given in the file."""
    report: dict[str, Any] = field(default_factory=dict)
    """Run-level keys given in the file: ``format``, ``output``, ``fail_on``, ``maxfail`` and ``max_memory``."""
    dims: dict[str, int] = field(default_factory=dict)
    """Named sizes."""
    functions: dict[str, SubjectConfig] = field(default_factory=dict)
    """Per-function tables, keyed by name in the module."""
    layers: dict[str, SubjectConfig] = field(default_factory=dict)
    """Per-layer tables, keyed by class name."""
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``[classes.NAME] init``: constructor arguments shared by every method of the class, keyed by class name."""

    @property
    def label(self) -> str:
        """How messages name this config."""
        return str(self.path) if self.path is not None else "command line"

    def subject(self, kind: str, name: str) -> SubjectConfig | None:
        """The table for a function or layer, if the config has one.

        A method (``Class.method``) takes its constructor arguments from
        ``[classes.Class] init``, under its own table's ``init``.
        """
        table = (self.layers if kind == "layer" else self.functions).get(name)
        owner = name.split(".", 1)[0] if kind == "function" and "." in name else None
        shared = self.classes.get(owner) if owner is not None else None
        if not shared:
            return table
        table = table or SubjectConfig()
        return replace(table, init={**shared, **table.init})


def invalid(label: str, key: str, message: str) -> ConfigError:
    """The one-line error naming the config (or ``gradcheck.check()``), the key and what is wrong."""
    return ConfigError(f"{label}: {key}: {message}")


def check_keys(label: str, prefix: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    """Every key of ``table`` (written under ``prefix``) is one of ``allowed``, else the closest is named."""
    for key in table:
        if key not in allowed:
            where = f"{prefix}.{key}" if prefix else key
            raise invalid(
                label,
                where,
                f"unknown key{closest(key, allowed)}; valid keys: {', '.join(sorted(allowed))}",
            )


def _choice(label: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    try:
        return Choice(choices).parse(value)
    except InvalidValue as error:
        raise invalid(label, key, str(error)) from None


def validate_setting(label: str, key: str, value: Any) -> Any:
    """Check one value of a row of the settings table, from a config file or ``gradcheck.check``.

    ``key`` may be dotted (``functions.f.eps``): the last part names the setting.
    """
    setting = BY_KEY[key.rsplit(".", 1)[-1]]
    try:
        return setting.parse(value)
    except InvalidValue as error:
        raise invalid(label, key, str(error)) from None


def _size(label: str, key: str, value: Any, dims: Mapping[str, int]) -> int | str:
    if isinstance(value, str):
        if value not in dims:
            known = f"; [dims] defines {', '.join(sorted(dims))}" if dims else "; [dims] is empty"
            raise invalid(label, key, f"unknown dim name '{value}'{closest(value, dims)}{known}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(label, key, f"size {value!r} must be a positive integer or a name from [dims]")
    return value


def parse_input(label: str, key: str, raw: Any, dims: Mapping[str, int]) -> InputConfig:
    """One input: a list of sizes, or a table with ``shape`` and draw options."""
    if isinstance(raw, list):
        return InputConfig(shape=tuple(_size(label, f"{key}[{i}]", v, dims) for i, v in enumerate(raw)))
    if not isinstance(raw, dict):
        raise invalid(label, key, f"{raw!r} must be a list of sizes or a table with 'shape'")
    check_keys(label, key, raw, _INPUT_KEYS)
    if "items" in raw:
        others = set(raw) - {"items"}
        if others:
            raise invalid(label, f"{key}.{sorted(others)[0]}", "a list input takes only 'items'; set options per item")
        if not isinstance(raw["items"], list) or not raw["items"]:
            raise invalid(label, f"{key}.items", "must be a non-empty list of inputs, e.g. items = [[3, 4], [4]]")
        return InputConfig(
            shape=(),
            items=tuple(parse_input(label, f"{key}.items[{i}]", item, dims) for i, item in enumerate(raw["items"])),
        )
    if "shape" not in raw:
        raise invalid(label, key, "missing 'shape', e.g. shape = [4, 5]")
    if not isinstance(raw["shape"], list):
        raise invalid(label, f"{key}.shape", f"{raw['shape']!r} must be a list of sizes")
    shape = tuple(_size(label, f"{key}.shape[{i}]", v, dims) for i, v in enumerate(raw["shape"]))
    dtype = raw.get("dtype")
    if dtype is not None:
        dtype = _choice(label, f"{key}.dtype", dtype, INPUT_DTYPES)
    low, high = raw.get("low"), raw.get("high")
    for bound_key, bound in (("low", low), ("high", high)):
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound)
        ):
            raise invalid(label, f"{key}.{bound_key}", f"{bound!r} must be a finite number")
    default_distribution = "uniform" if (low is not None or high is not None) else "normal"
    if dtype in INTEGER_DTYPES:
        default_distribution = "integer"
    distribution = _choice(label, f"{key}.distribution", raw.get("distribution", default_distribution), DISTRIBUTIONS)
    if distribution == "uniform" and (low is None or high is None):
        raise invalid(label, key, "a uniform draw needs both 'low' and 'high'")
    if low is not None and high is not None and low >= high:
        raise invalid(label, key, f"low = {low} must be below high = {high}")
    if distribution == "positive" and low is not None and low <= 0:
        raise invalid(label, f"{key}.low", f"{low} must be above 0 for a positive draw")
    if distribution == "spd" and (len(shape) < 2 or shape[-1] != shape[-2]):
        raise invalid(label, f"{key}.shape", "an spd input needs a square shape [..., n, n]")
    if distribution == "integer" and dtype not in (None, *INTEGER_DTYPES):
        raise invalid(label, f"{key}.dtype", f"an integer draw cannot have dtype {dtype}")
    return InputConfig(
        shape=shape,
        dtype=dtype,
        distribution=distribution,
        low=float(low) if low is not None else None,
        high=float(high) if high is not None else None,
        distribution_given="distribution" in raw or low is not None or high is not None,
    )


def parse_values(
    label: str, key: str, raw: Any, what: str = "a table of name = value", folder: Path | None = None
) -> dict[str, Any]:
    """``init`` or ``constants``: values as they are; ``{ value = ..., variable = true }`` a :class:`VariableValue`,
    ``{ import = "module:attribute" }`` an :class:`ImportValue` (a path in it is read from ``folder``)."""
    if not isinstance(raw, dict):
        raise invalid(label, key, f"must be {what}")
    return {name: _parse_value(label, f"{key}.{name}", value, folder) for name, value in raw.items()}


def _parse_value(label: str, key: str, raw: Any, folder: Path | None) -> Any:
    if isinstance(raw, dict) and _is_import(raw):
        return _parse_import(label, key, raw, folder)
    # A table is a plain dict argument unless it says `variable`: dict arguments keep working.
    # A misspelt `variable` next to `value` is still reported, not passed on as a dict.
    if not isinstance(raw, dict) or not ("variable" in raw or ("value" in raw and _near_variable(raw))):
        return raw
    check_keys(label, key, raw, _VARIABLE_KEYS)
    if not isinstance(raw["variable"], bool):
        raise invalid(label, f"{key}.variable", f"{raw['variable']!r} must be true or false")
    if "value" not in raw:
        raise invalid(label, key, "missing 'value', e.g. { value = [-1.0, 0.0, 1.0], variable = true }")
    value = raw["value"]
    if not _numeric(value):
        raise invalid(label, f"{key}.value", f"{value!r} must be a number or a list of numbers")
    dtype = raw.get("dtype")
    if dtype is not None:
        dtype = _choice(label, f"{key}.dtype", dtype, INPUT_DTYPES)
    return VariableValue(value=value, dtype=dtype) if raw["variable"] else value


def _is_import(raw: dict[str, Any]) -> bool:
    """``{ import = ... }``, or a one-key table that misspells it with a ``module:attribute`` string."""
    if "import" in raw:
        return True
    if len(raw) != 1:
        return False
    ((key, value),) = raw.items()
    # Close enough for "imprt" or "Imports", not for a dict argument's "port = 'host:80'".
    return (
        isinstance(value, str)
        and ":" in value
        and bool(difflib.get_close_matches(key.lower(), ["import"], cutoff=0.85))
    )


def _parse_import(label: str, key: str, raw: dict[str, Any], folder: Path | None) -> ImportValue:
    """The form of ``{ import = "module:attribute" }``; what it names is imported later, for the check."""
    check_keys(label, key, raw, _IMPORT_KEYS)
    spec = raw["import"]
    if not isinstance(spec, str):
        raise invalid(label, f"{key}.import", f"{spec!r} must be a string: {_IMPORT_EXAMPLE}")
    return _import_spec(label, key, spec, folder, (f"{key}.import", _IMPORT_EXAMPLE))


def parse_proxy(label: str, key: str, raw: Any, folder: Path | None) -> ImportValue:
    """The form of ``proxy = "module:function"`` (the ``module:attribute`` form of an import value)."""
    if not isinstance(raw, str):
        raise invalid(label, key, f"{raw!r} must be a string: {_PROXY_EXAMPLE}")
    return _import_spec(label, key, raw, folder, (key, _PROXY_EXAMPLE))


def _import_spec(label: str, key: str, spec: str, folder: Path | None, written: tuple[str, str]) -> ImportValue:
    """``module:attribute`` checked for form; ``written`` is the key of the string itself and an example."""
    where, example = written
    module, colon, attribute = spec.rpartition(":")  # rpartition: a Windows path has a colon of its own
    problem = None
    if not colon:
        problem = "has no ':' between the module and the attribute"
    elif not module:
        problem = "has no module before the ':'"
    elif not attribute:
        problem = "has no attribute after the ':'"
    elif not module.endswith(".py") and not _DOTTED_NAME.match(module):
        problem = f"'{module}' is neither a dotted module name nor a path to a .py file"
    elif not _DOTTED_NAME.match(attribute):
        problem = f"'{attribute}': the attribute must be a name, or dotted names (Class.attribute)"
    if problem is not None:
        raise invalid(label, where, f"{spec!r} {problem}; write {example}")
    return ImportValue(module=module, attribute=attribute, source=label, key=key, folder=folder)


def _near_variable(raw: dict[str, Any]) -> bool:
    return any(difflib.get_close_matches(key, ["variable"], n=1, cutoff=0.75) for key in raw)


def _numeric(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(_numeric(item) for item in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def merged_settings(config: Config, subject: SubjectConfig | None, overrides: Mapping[str, Any]) -> Settings:
    """Defaults < the config's top level < the function's table < the command line."""
    values: dict[str, Any] = dict(config.settings)
    if subject is not None:
        values.update(subject.settings)
    values.update(overrides)
    return replace(Settings(), **values)
