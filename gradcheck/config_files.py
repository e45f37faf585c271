"""The config file: found from the target upwards, read, and validated as a whole.

The config is ``gradcheck.toml`` (keys at its top level) or the
``[tool.gradcheck]`` table of ``pyproject.toml``, searched from the target
upwards to the project's root. A document's top-level keys and its tables
(``[dims]``, ``[functions.NAME]``, ``[layers.NAME]``, ``[classes.NAME]``) are
checked here; each value is validated by :mod:`gradcheck.config`.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradcheck.config import (
    Config,
    SubjectConfig,
    check_keys,
    invalid,
    parse_input,
    parse_proxy,
    parse_values,
    validate_setting,
)
from gradcheck.errors import ConfigError
from gradcheck.settings import FUNCTION_SETTINGS, RUN_SETTINGS, TABLE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


CONFIG_FILE = "gradcheck.toml"


#: Keys of the settings table that may appear at the config's top level, and in a
#: function's or layer's table.
_SETTING_KEYS = {s.key for s in FUNCTION_SETTINGS}


_SUBJECT_SETTING_KEYS = {s.key for s in TABLE if s.per_function}


_REPORT_KEYS = {s.key for s in RUN_SETTINGS}


_TOP_KEYS = _SETTING_KEYS | _REPORT_KEYS | {"dims", "functions", "layers", "classes"}


_SUBJECT_KEYS = _SUBJECT_SETTING_KEYS | {"inputs", "constants", "init", "proxy"}


_CLASS_KEYS = {"init"}


def _parse_subject(
    label: str, key: str, raw: Any, dims: Mapping[str, int], allowed: set[str], folder: Path | None
) -> SubjectConfig:
    if not isinstance(raw, dict):
        raise invalid(label, key, f"{raw!r} must be a table")
    check_keys(label, key, raw, allowed)
    inputs_raw = raw.get("inputs", {})
    if not isinstance(inputs_raw, dict):
        raise invalid(label, f"{key}.inputs", "must be a table of name = shape")
    inputs = {name: parse_input(label, f"{key}.inputs.{name}", value, dims) for name, value in inputs_raw.items()}
    constants = raw.get("constants", {})
    if not isinstance(constants, dict):
        raise invalid(label, f"{key}.constants", "must be a table of name = value")
    both = set(inputs) & set(constants)
    if both:
        raise invalid(label, key, f"'{sorted(both)[0]}' is both an input and a constant")
    init = parse_values(label, f"{key}.init", raw.get("init", {}), "a table of keyword arguments", folder)
    constants = parse_values(label, f"{key}.constants", constants, "a table of name = value", folder)
    settings = {
        name: validate_setting(label, f"{key}.{name}", value)
        for name, value in raw.items()
        if name in _SUBJECT_SETTING_KEYS
    }
    proxy = parse_proxy(label, f"{key}.proxy", raw["proxy"], folder) if "proxy" in raw else None
    return SubjectConfig(inputs=inputs, constants=dict(constants), init=dict(init), settings=settings, proxy=proxy)


def _parse_classes(label: str, raw: Any, folder: Path | None) -> dict[str, dict[str, Any]]:
    """``[classes.NAME]`` tables: only ``init``, shared by every method of the class."""
    if not isinstance(raw, dict):
        raise invalid(label, "classes", "must be a table of [classes.NAME] tables")
    classes = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise invalid(label, f"classes.{name}", f"{table!r} must be a table with 'init'")
        for key in table:
            if key not in _CLASS_KEYS:
                raise invalid(
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
        raise invalid(label, prefix, "must be a table of [" + prefix + ".NAME] tables")
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
    check_keys(label, "", document, _TOP_KEYS)
    dims_raw = document.get("dims", {})
    if not isinstance(dims_raw, dict):
        raise invalid(label, "dims", "must be a table of name = size")
    dims: dict[str, int] = {}
    for name, value in dims_raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid(label, f"dims.{name}", f"{value!r} must be a positive integer")
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
        raise invalid(label, "layers", "must be a table of [layers.NAME] tables")
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


def config_file_for(location: Path, config_path: Path | None) -> Path | None:
    """The config file that applies to a target: ``-c``, else the nearest one above it."""
    if config_path is not None:
        return config_path
    return find_config_file(location if location.exists() else Path.cwd())
