"""The settings table: one row per setting drives the command line, the config, ``gradcheck.check`` and
the reproduce command. ``projections`` (issue 9, point 3) is the row added to show it: these tests
check that the flag, the config key and the keyword each take it and refuse a bad value.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

import gradcheck
from gradcheck import settings as table
from gradcheck.config import Config, merged_settings
from gradcheck.config_files import parse_config
from gradcheck.errors import ConfigError, UsageError
from tests.helpers import MIXED, by_name, invoke, load_copy, write


def _reproduce(project: Path, *args: str) -> str:
    write(project, "ops.py", MIXED)
    result = invoke("run", "ops.py", "--format", "json", *args)
    assert result.exit_code == 1, result.output
    return by_name(json.loads(result.stdout))["bad"]["reproduce"]


def test_every_row_with_a_flag_is_a_run_option_and_every_keyword_row_a_check_keyword() -> None:
    help_text = invoke("run", "--help").stdout
    for setting in table.TABLE:
        if setting.long_flag is not None:
            assert setting.long_flag in help_text, setting.name
    keywords = set(inspect.signature(gradcheck.check).parameters)
    assert {s.name for s in table.KEYWORD_SETTINGS} <= keywords
    assert {s.name for s in table.TABLE if not s.keyword}.isdisjoint(keywords)


def test_settings_has_a_field_per_function_row_with_its_default() -> None:
    fields = dataclasses.fields(table.Settings)
    assert [field.name for field in fields] == [s.name for s in table.FUNCTION_SETTINGS]
    assert [field.default for field in fields] == [s.default for s in table.FUNCTION_SETTINGS]
    defaults = table.Settings()
    assert not any(hasattr(defaults, s.name) for s in table.RUN_SETTINGS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.mode = "full"  # type: ignore[misc]


def test_projections_from_the_config_top_level_and_a_function_table() -> None:
    config = parse_config({"projections": 5, "functions": {"f": {"projections": 2}}}, None)
    assert merged_settings(config, None, {}).projections == 5
    assert merged_settings(config, config.functions["f"], {}).projections == 2
    assert merged_settings(config, config.functions["f"], {"projections": 7}).projections == 7
    assert merged_settings(Config(), None, {}).projections == 3


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "3"])
def test_a_bad_projections_in_the_config_names_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^config: projections: .* must be a positive integer$"):
        parse_config({"projections": value}, None)


def test_the_projections_flag_is_taken_and_appears_in_the_reproduce_command(project: Path) -> None:
    assert "--projections 5" in _reproduce(project, "--projections", "5")
    # The default, or a value from the config (found again by the reproduce command), is not repeated.
    assert "--projections" not in _reproduce(project, "--projections", "3")
    write(project, "gradcheck.toml", "projections = 4\n")
    assert "--projections" not in _reproduce(project)


def test_the_projections_keyword_is_taken_and_checked(tmp_path: Path) -> None:
    ops = load_copy(write(tmp_path, "kw_ops.py", MIXED))
    result = gradcheck.check(ops.good, {"x": (3,)}, projections=2)
    assert result.status == "passed"
    with pytest.raises(UsageError, match=r"^gradcheck.check\(\): projections: 0 must be a positive integer$"):
        gradcheck.check(ops.good, {"x": (3,)}, projections=0)
    with pytest.raises(TypeError, match=r"'projection'.*did you mean 'projections'"):
        gradcheck.check(ops.good, {"x": (3,)}, projection=2)


def test_check_and_discovery_make_the_same_subject(tmp_path: Path) -> None:
    from gradcheck.subjects import find_subjects, subject_of

    path = write(tmp_path, "same_ops.py", MIXED)
    module = load_copy(path)
    found = {subject.name: subject for subject in find_subjects(module, path)}
    given = subject_of(module.bad)
    assert given is not None
    for field in ("id", "name", "kind", "line", "forward", "decorators"):
        assert getattr(given, field) == getattr(found["bad"], field), field
    assert subject_of(42) is None


_COUNTED = """
import numpy as np
import tensorflow as tf

CALLS = []  # the elements of x at each forward call: fast mode stacks every direction into one call

@tf.custom_gradient
def square(x):
    CALLS.append(int(tf.size(x)))
    def grad(dy):
        return dy * 2.0 * x
    return x * x, grad
"""


def test_projections_sets_how_many_directions_fast_mode_tries(project: Path) -> None:
    module = load_copy(write(project, "counted.py", _COUNTED))
    calls = {}
    for projections in (1, 6):
        module.CALLS.clear()
        result = gradcheck.check(module.square, inputs={"x": (4,)}, execution="eager", projections=projections)
        assert result.status == "passed", result
        calls[projections] = sum(module.CALLS)
    assert calls[6] > calls[1]
