"""Settings: defaults < config file < command line. Unknown keys are errors.

The config is ``gradcheck.toml`` (keys at its top level) or the
``[tool.gradcheck]`` table of ``pyproject.toml``, searched from the target
upwards. Everything here is validated on load so that the checker only ever
sees well-formed values; a bad value raises :class:`ConfigError` whose
message names the file, the key and the closest valid name. Which keys are
settings, and what each may hold, is the table of :mod:`gradcheck.settings`.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gradcheck.errors import ConfigError
from gradcheck.settings import (
    BY_KEY,
    DTYPES,
    FUNCTION_SETTINGS,
    RUN_SETTINGS,
    TABLE,
    Choice,
    InvalidValue,
)

# Re-exported: the checker and discovery take these from here.
from gradcheck.settings import Settings as Settings
from gradcheck.settings import closest as closest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

INPUT_DTYPES = (*DTYPES, "int32", "int64", "complex64", "complex128")
DISTRIBUTIONS = ("normal", "uniform", "positive", "spd", "integer")

CONFIG_FILE = "gradcheck.toml"

#: Keys of the settings table that may appear at the config's top level, and in a
#: function's or layer's table.
_SETTING_KEYS = {s.key for s in FUNCTION_SETTINGS}
_SUBJECT_SETTING_KEYS = {s.key for s in TABLE if s.per_function}
_REPORT_KEYS = {s.key for s in RUN_SETTINGS}
_TOP_KEYS = _SETTING_KEYS | _REPORT_KEYS | {"dims", "functions", "layers", "classes"}
_SUBJECT_KEYS = _SUBJECT_SETTING_KEYS | {"inputs", "constants", "init"}
_INPUT_KEYS = {"shape", "dtype", "distribution", "low", "high", "items"}
_CLASS_KEYS = {"init"}
_VARIABLE_KEYS = {"value", "variable", "dtype"}
_IMPORT_KEYS = {"import"}
_IMPORT_EXAMPLE = '{ import = "module:attribute" }, e.g. { import = "my_project.bodies:step" } or "bodies.py:step"'
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


def _fail(label: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{label}: {key}: {message}")


def _check_keys(label: str, prefix: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            where = f"{prefix}.{key}" if prefix else key
            raise _fail(
                label,
                where,
                f"unknown key{closest(key, allowed)}; valid keys: {', '.join(sorted(allowed))}",
            )


def _choice(label: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    try:
        return Choice(choices).parse(value)
    except InvalidValue as error:
        raise _fail(label, key, str(error)) from None


def validate_setting(label: str, key: str, value: Any) -> Any:
    """Check one value of a row of the settings table, from a config file or ``gradcheck.check``.

    ``key`` may be dotted (``functions.f.eps``): the last part names the setting.
    """
    setting = BY_KEY[key.rsplit(".", 1)[-1]]
    try:
        return setting.parse(value)
    except InvalidValue as error:
        raise _fail(label, key, str(error)) from None


def _size(label: str, key: str, value: Any, dims: Mapping[str, int]) -> int | str:
    if isinstance(value, str):
        if value not in dims:
            known = f"; [dims] defines {', '.join(sorted(dims))}" if dims else "; [dims] is empty"
            raise _fail(label, key, f"unknown dim name '{value}'{closest(value, dims)}{known}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(label, key, f"size {value!r} must be a positive integer or a name from [dims]")
    return value


def parse_input(label: str, key: str, raw: Any, dims: Mapping[str, int]) -> InputConfig:
    """One input: a list of sizes, or a table with ``shape`` and draw options."""
    if isinstance(raw, list):
        return InputConfig(shape=tuple(_size(label, f"{key}[{i}]", v, dims) for i, v in enumerate(raw)))
    if not isinstance(raw, dict):
        raise _fail(label, key, f"{raw!r} must be a list of sizes or a table with 'shape'")
    _check_keys(label, key, raw, _INPUT_KEYS)
    if "items" in raw:
        others = set(raw) - {"items"}
        if others:
            raise _fail(label, f"{key}.{sorted(others)[0]}", "a list input takes only 'items'; set options per item")
        if not isinstance(raw["items"], list) or not raw["items"]:
            raise _fail(label, f"{key}.items", "must be a non-empty list of inputs, e.g. items = [[3, 4], [4]]")
        return InputConfig(
            shape=(),
            items=tuple(parse_input(label, f"{key}.items[{i}]", item, dims) for i, item in enumerate(raw["items"])),
        )
    if "shape" not in raw:
        raise _fail(label, key, "missing 'shape', e.g. shape = [4, 5]")
    if not isinstance(raw["shape"], list):
        raise _fail(label, f"{key}.shape", f"{raw['shape']!r} must be a list of sizes")
    shape = tuple(_size(label, f"{key}.shape[{i}]", v, dims) for i, v in enumerate(raw["shape"]))
    dtype = raw.get("dtype")
    if dtype is not None:
        dtype = _choice(label, f"{key}.dtype", dtype, INPUT_DTYPES)
    low, high = raw.get("low"), raw.get("high")
    for bound_key, bound in (("low", low), ("high", high)):
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound)
        ):
            raise _fail(label, f"{key}.{bound_key}", f"{bound!r} must be a finite number")
    default_distribution = "uniform" if (low is not None or high is not None) else "normal"
    if dtype in ("int32", "int64"):
        default_distribution = "integer"
    distribution = _choice(label, f"{key}.distribution", raw.get("distribution", default_distribution), DISTRIBUTIONS)
    if distribution == "uniform" and (low is None or high is None):
        raise _fail(label, key, "a uniform draw needs both 'low' and 'high'")
    if low is not None and high is not None and low >= high:
        raise _fail(label, key, f"low = {low} must be below high = {high}")
    if distribution == "positive" and low is not None and low <= 0:
        raise _fail(label, f"{key}.low", f"{low} must be above 0 for a positive draw")
    if distribution == "spd" and (len(shape) < 2 or shape[-1] != shape[-2]):
        raise _fail(label, f"{key}.shape", "an spd input needs a square shape [..., n, n]")
    if distribution == "integer" and dtype not in (None, "int32", "int64"):
        raise _fail(label, f"{key}.dtype", f"an integer draw cannot have dtype {dtype}")
    return InputConfig(
        shape=shape,
        dtype=dtype,
        distribution=distribution,
        low=float(low) if low is not None else None,
        high=float(high) if high is not None else None,
        distribution_given="distribution" in raw or low is not None or high is not None,
    )


def _parse_subject(
    label: str, key: str, raw: Any, dims: Mapping[str, int], allowed: set[str], folder: Path | None
) -> SubjectConfig:
    if not isinstance(raw, dict):
        raise _fail(label, key, f"{raw!r} must be a table")
    _check_keys(label, key, raw, allowed)
    inputs_raw = raw.get("inputs", {})
    if not isinstance(inputs_raw, dict):
        raise _fail(label, f"{key}.inputs", "must be a table of name = shape")
    inputs = {name: parse_input(label, f"{key}.inputs.{name}", value, dims) for name, value in inputs_raw.items()}
    constants = raw.get("constants", {})
    if not isinstance(constants, dict):
        raise _fail(label, f"{key}.constants", "must be a table of name = value")
    both = set(inputs) & set(constants)
    if both:
        raise _fail(label, key, f"'{sorted(both)[0]}' is both an input and a constant")
    init = parse_values(label, f"{key}.init", raw.get("init", {}), "a table of keyword arguments", folder)
    constants = parse_values(label, f"{key}.constants", constants, "a table of name = value", folder)
    settings = {
        name: validate_setting(label, f"{key}.{name}", value)
        for name, value in raw.items()
        if name in _SUBJECT_SETTING_KEYS
    }
    return SubjectConfig(inputs=inputs, constants=dict(constants), init=dict(init), settings=settings)


def parse_values(
    label: str, key: str, raw: Any, what: str = "a table of name = value", folder: Path | None = None
) -> dict[str, Any]:
    """``init`` or ``constants``: values as they are; ``{ value = ..., variable = true }`` a :class:`VariableValue`,
    ``{ import = "module:attribute" }`` an :class:`ImportValue` (a path in it is read from ``folder``)."""
    if not isinstance(raw, dict):
        raise _fail(label, key, f"must be {what}")
    return {name: _parse_value(label, f"{key}.{name}", value, folder) for name, value in raw.items()}


def _parse_value(label: str, key: str, raw: Any, folder: Path | None) -> Any:
    if isinstance(raw, dict) and _is_import(raw):
        return _parse_import(label, key, raw, folder)
    # A table is a plain dict argument unless it says `variable`: dict arguments keep working.
    # A misspelt `variable` next to `value` is still reported, not passed on as a dict.
    if not isinstance(raw, dict) or not ("variable" in raw or ("value" in raw and _near_variable(raw))):
        return raw
    _check_keys(label, key, raw, _VARIABLE_KEYS)
    if not isinstance(raw["variable"], bool):
        raise _fail(label, f"{key}.variable", f"{raw['variable']!r} must be true or false")
    if "value" not in raw:
        raise _fail(label, key, "missing 'value', e.g. { value = [-1.0, 0.0, 1.0], variable = true }")
    value = raw["value"]
    if not _numeric(value):
        raise _fail(label, f"{key}.value", f"{value!r} must be a number or a list of numbers")
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
    _check_keys(label, key, raw, _IMPORT_KEYS)
    spec = raw["import"]
    if not isinstance(spec, str):
        raise _fail(label, f"{key}.import", f"{spec!r} must be a string: {_IMPORT_EXAMPLE}")
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
        raise _fail(label, f"{key}.import", f"{spec!r} {problem}; write {_IMPORT_EXAMPLE}")
    return ImportValue(module=module, attribute=attribute, source=label, key=key, folder=folder)


def _near_variable(raw: dict[str, Any]) -> bool:
    return any(difflib.get_close_matches(key, ["variable"], n=1, cutoff=0.75) for key in raw)


def _numeric(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(_numeric(item) for item in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse_classes(label: str, raw: Any, folder: Path | None) -> dict[str, dict[str, Any]]:
    """``[classes.NAME]`` tables: only ``init``, shared by every method of the class."""
    if not isinstance(raw, dict):
        raise _fail(label, "classes", "must be a table of [classes.NAME] tables")
    classes = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise _fail(label, f"classes.{name}", f"{table!r} must be a table with 'init'")
        for key in table:
            if key not in _CLASS_KEYS:
                raise _fail(
                    label,
                    f"classes.{name}.{key}",
                    f'unknown key: a class table holds only init; {key} goes in [functions."{name}.METHOD"]',
                )
        classes[name] = parse_values(
            label, f"classes.{name}.init", table.get("init", {}), "a table of keyword arguments", folder
        )
    return classes


def _flatten_functions(label: str, table: Any, prefix: str) -> dict[str, Any]:
    """Accept ``[functions.Class.method]`` as well as ``[functions."Class.method"]``."""
    if not isinstance(table, dict):
        raise _fail(label, prefix, "must be a table of [" + prefix + ".NAME] tables")
    flat: dict[str, Any] = {}
    for name, value in table.items():
        # A class's methods nest one level deeper; a misspelt key ('input')
        # must still be reported as one, not taken for a method name.
        is_namespace = (
            isinstance(value, dict)
            and value
            and all(isinstance(v, dict) for v in value.values())
            and not any(difflib.get_close_matches(k, sorted(_SUBJECT_KEYS), n=1, cutoff=0.75) for k in value)
        )
        if is_namespace:
            for inner, inner_value in value.items():
                flat[f"{name}.{inner}"] = inner_value
        else:
            flat[name] = value
    return flat


def parse_config(document: Mapping[str, Any], path: Path | None, extra_dims: Mapping[str, int] | None = None) -> Config:
    """Validate a config document (the parsed TOML table)."""
    label = str(path) if path is not None else "config"
    folder = path.parent if path is not None else None
    _check_keys(label, "", document, _TOP_KEYS)
    dims_raw = document.get("dims", {})
    if not isinstance(dims_raw, dict):
        raise _fail(label, "dims", "must be a table of name = size")
    dims: dict[str, int] = {}
    for name, value in dims_raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(label, f"dims.{name}", f"{value!r} must be a positive integer")
        dims[name] = value
    dims.update(extra_dims or {})
    settings = {key: validate_setting(label, key, value) for key, value in document.items() if key in _SETTING_KEYS}
    report = {key: validate_setting(label, key, value) for key, value in document.items() if key in _REPORT_KEYS}
    functions = {
        name: _parse_subject(label, f"functions.{name}", raw, dims, _SUBJECT_KEYS, folder)
        for name, raw in _flatten_functions(label, document.get("functions", {}), "functions").items()
    }
    layers_raw = document.get("layers", {})
    if not isinstance(layers_raw, dict):
        raise _fail(label, "layers", "must be a table of [layers.NAME] tables")
    layers = {
        name: _parse_subject(label, f"layers.{name}", raw, dims, _SUBJECT_KEYS, folder)
        for name, raw in layers_raw.items()
    }
    return Config(
        path=path,
        settings=settings,
        report=report,
        dims=dims,
        functions=functions,
        layers=layers,
        classes=_parse_classes(label, document.get("classes", {}), folder),
    )


def read_config_file(path: Path, extra_dims: Mapping[str, int] | None = None) -> Config:
    """Load and validate ``gradcheck.toml`` or the ``[tool.gradcheck]`` of ``pyproject.toml``."""
    document = _read_toml(path)
    if path.name == "pyproject.toml":
        document = _gradcheck_table(path, document) or {}
    return parse_config(document, path, extra_dims)


def _read_toml(path: Path) -> dict[str, Any]:
    """A TOML file parsed, or a one-line :class:`ConfigError` naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read config file: {error}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {' '.join(str(error).split())}") from None


#: TOML's names for the values a key can hold, for messages.
_TOML_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"), (list, "an array"))


def _toml_type(value: Any) -> str:
    return next((name for kind, name in _TOML_TYPES if isinstance(value, kind)), "a date or time")


def _gradcheck_table(path: Path, document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``[tool.gradcheck]`` table of a parsed ``pyproject.toml``; None where it has none.

    A ``tool`` or ``tool.gradcheck`` that is not a table is an error, not "no
    config": that file may well be meant to configure gradcheck.
    """
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(
            f"{path}: tool must be a table ([tool.gradcheck] holds gradcheck's keys), not {_toml_type(tool)}; "
            "write [tool] tables instead, or remove the key"
        )
    table = tool.get("gradcheck")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(
            f"{path}: [tool.gradcheck] must be a table of gradcheck's keys, not {_toml_type(table)}; "
            "write them under a [tool.gradcheck] header, e.g. seed = 0"
        )
    return table


PROJECT_ROOT_MARKERS = (".git", "pyproject.toml", "setup.cfg")
"""Entries that mark a project's root folder, where the config search stops (as pytest and ruff)."""


def find_config_file(start: Path) -> Path | None:
    """The nearest ``gradcheck.toml``, or ``pyproject.toml`` with ``[tool.gradcheck]``.

    The search stops at the project root, the first folder holding ``.git``,
    ``pyproject.toml`` or ``setup.cfg`` (as pytest and ruff do), so a config file in
    a shared folder above the project, such as ``/tmp``, never applies.
    """
    directory = start if start.is_dir() else start.parent
    directory = directory.resolve()
    for folder in (directory, *directory.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and _has_tool_table(pyproject):
            return pyproject
        if any((folder / marker).exists() for marker in PROJECT_ROOT_MARKERS):
            return None
    return None


def _has_tool_table(pyproject: Path) -> bool:
    # A pyproject.toml that cannot be read may hold the user's [tool.gradcheck]: running without
    # it would check with the wrong settings, silently. pytest stops there too.
    return _gradcheck_table(pyproject, _read_toml(pyproject)) is not None


def merged_settings(config: Config, subject: SubjectConfig | None, overrides: Mapping[str, Any]) -> Settings:
    """Defaults < the config's top level < the function's table < the command line."""
    values: dict[str, Any] = dict(config.settings)
    if subject is not None:
        values.update(subject.settings)
    values.update(overrides)
    return replace(Settings(), **values)
