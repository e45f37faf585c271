"""The config loader: valid files load, every bad value is a one-line ConfigError naming file and key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gradcheck.config import Config, ImportValue, InputConfig, Settings, merged_settings
from gradcheck.config_files import find_config_file, parse_config, read_config_file
from gradcheck.errors import ConfigError


def _load(tmp_path: Path, text: str, name: str = "gradcheck.toml") -> Config:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return read_config_file(path)


def test_full_example_from_the_design_loads(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
dtype = "float64"
seed = 0
mode = "fast"
execution = "both"

[dims]
N = 32
in_dim = 16

[functions.custom_op]
inputs = { A = ["N", "in_dim"], W = ["in_dim", 8] }

[functions.log1pexp]
inputs = { x = { shape = [64], low = -30.0, high = 30.0 } }

[functions.reduce_rows]
inputs = { x = [4, 5] }
constants = { axis = 1 }

[functions.st_round]
inputs = { x = [16] }
reference = "none"

[layers.CustomLayer]
init = { out_dim = 8 }
inputs = { A = ["N", "in_dim"] }
""",
    )
    assert config.dims == {"N": 32, "in_dim": 16}
    assert config.functions["custom_op"].inputs["A"] == InputConfig(shape=("N", "in_dim"))
    log1pexp = config.functions["log1pexp"].inputs["x"]
    assert (log1pexp.distribution, log1pexp.low, log1pexp.high) == ("uniform", -30.0, 30.0)
    assert config.functions["reduce_rows"].constants == {"axis": 1}
    assert config.functions["st_round"].settings == {"reference": "none"}
    assert config.layers["CustomLayer"].init == {"out_dim": 8}


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("sed = 1", ["sed", "unknown key", "did you mean 'seed'"]),
        ("mode = 'slow'", ["mode", "'slow' is not one of fast, full"]),
        ("dtype = 'float8'", ["dtype", "float8"]),
        ("seed = -1", ["seed", "non-negative integer"]),
        ("atol = 0", ["atol", "positive"]),
        ("[dims]\nN = 0", ["dims.N", "positive integer"]),
        ("[functions.f]\ninputs = { x = [3, -1] }", ["functions.f.inputs.x[1]", "positive integer"]),
        ("[functions.f]\ninputs = { x = [3, 2.5] }", ["functions.f.inputs.x[1]", "positive integer"]),
        ("[dims]\nN = 3\n[functions.f]\ninputs = { x = ['M'] }", ["unknown dim name 'M'", "[dims] defines N"]),
        ("[functions.f]\ninputs = { x = { shape = [3], distribution = 'gauss' } }", ["distribution", "gauss"]),
        ("[functions.f]\ninputs = { x = { shape = [3], low = 2.0, high = 1.0 } }", ["low = 2.0 must be below high"]),
        (
            "[functions.f]\ninputs = { x = { shape = [3], distribution = 'uniform', low = 0.0 } }",
            ["both 'low' and 'high'"],
        ),
        ("[functions.f]\ninputs = { x = { shape = [3, 4], distribution = 'spd' } }", ["square shape"]),
        ("[functions.f]\ninputs = { x = { shap = [3] } }", ["functions.f.inputs.x.shap", "did you mean 'shape'"]),
        ("[functions.f]\ninputs = { x = { low = 1.0 } }", ["missing 'shape'"]),
        ("[functions.f]\ninput = { x = [3] }", ["functions.f.input", "did you mean 'inputs'"]),
        ("[functions.f]\nreference = 'autodiff'", ["functions.f.reference", "autodiff"]),
        ("[functions.f]\ninputs = { x = [3] }\nconstants = { x = 1 }", ["'x' is both an input and a constant"]),
        ("[layers]\nL = 3", ["layers.L", "must be a table"]),
        ("format = 'xml'", ["format", "xml"]),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "gradcheck.toml") + ": ")
    for fragment in fragments:
        assert fragment in message


def test_import_values_in_constants_and_init_are_read_without_importing(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
[functions.for_loop]
constants = { body_fn = { import = "my_project.bodies:Steps.sine" }, n = 3 }

[layers.Looped]
init = { body = { import = "helpers/bodies.py:step" } }

[classes.Runner]
init = { body = { import = "bodies:step" } }
""",
    )
    body_fn = config.functions["for_loop"].constants["body_fn"]
    assert body_fn == ImportValue(
        module="my_project.bodies",
        attribute="Steps.sine",
        source=str(tmp_path / "gradcheck.toml"),
        key="functions.for_loop.constants.body_fn",
        folder=tmp_path,
    )
    assert config.functions["for_loop"].constants["n"] == 3
    assert config.layers["Looped"].init["body"].module == "helpers/bodies.py"
    assert config.classes["Runner"]["body"].key == "classes.Runner.init.body"
    # Only the form is read: none of these modules exists, and nothing was imported.
    assert "my_project" not in sys.modules and "bodies" not in sys.modules


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("{ import = 3 }", ["constants.body_fn.import", "3 must be a string", 'import = "module:attribute"']),
        ('{ import = "bodies.step" }', ["constants.body_fn.import", "'bodies.step'", "no ':'"]),
        ('{ import = "bodies:step", variable = true }', ["constants.body_fn.variable", "unknown key"]),
        ('{ import = ":step" }', ["constants.body_fn.import", "no module before the ':'"]),
        ('{ import = "bodies:" }', ["constants.body_fn.import", "no attribute after the ':'"]),
        ('{ import = "my-bodies:step" }', ["'my-bodies'", "neither a dotted module name nor a path to a .py file"]),
        ('{ import = "bodies:step()" }', ["'step()'", "attribute must be a name"]),
        ('{ imprt = "bodies:step" }', ["constants.body_fn.imprt", "did you mean 'import'"]),
        ('{ Imports = "bodies:step" }', ["constants.body_fn.Imports", "did you mean 'import'"]),
    ],
)
def test_bad_import_values_name_file_and_key(tmp_path: Path, value: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f"[functions.for_loop]\nconstants = {{ body_fn = {value} }}\n")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'gradcheck.toml'}: functions.for_loop.constants.body_fn"), message
    for fragment in fragments:
        assert fragment in message, message


def test_a_dict_constant_that_is_no_import_stays_a_dict(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[functions.f]\nconstants = { options = { mode = "a:b", important = 1 }, server = { port = "host:80" } }\n',
    )
    assert config.functions["f"].constants["options"] == {"mode": "a:b", "important": 1}
    assert config.functions["f"].constants["server"] == {"port": "host:80"}


def test_invalid_toml_shows_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"invalid TOML: .*line 2"):
        _load(tmp_path, "seed = 1\nmode = \n")


def test_pyproject_tool_table(tmp_path: Path) -> None:
    config = _load(tmp_path, "[project]\nname = 'x'\n[tool.gradcheck]\nseed = 3\n", name="pyproject.toml")
    assert config.settings == {"seed": 3}
    with pytest.raises(ConfigError, match=r"pyproject.toml: sede: unknown key"):
        _load(tmp_path, "[tool.gradcheck]\nsede = 3\n", name="pyproject.toml")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tool = 3", "tool must be a table ([tool.gradcheck] holds gradcheck's keys), not an integer"),
        ('tool = "gradcheck"', "tool must be a table ([tool.gradcheck] holds gradcheck's keys), not a string"),
        ("tool = [1, 2]", "tool must be a table ([tool.gradcheck] holds gradcheck's keys), not an array"),
        ("[tool]\ngradcheck = 5", "[tool.gradcheck] must be a table of gradcheck's keys, not an integer"),
        ("[tool]\ngradcheck = 'fast'", "[tool.gradcheck] must be a table of gradcheck's keys, not a string"),
        ("[tool\nname = 1\n", "invalid TOML"),
    ],
)
def test_a_bad_pyproject_is_one_line_naming_it_when_searched_and_when_read(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    for attempt in (lambda: find_config_file(tmp_path / "ops.py"), lambda: read_config_file(path.resolve())):
        with pytest.raises(ConfigError) as caught:
            attempt()
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(f"{path.resolve()}: "), message
        assert fragment in message, message


def test_a_pyproject_with_other_tools_only_ends_the_search_without_a_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n", encoding="utf-8")
    assert find_config_file(tmp_path / "ops.py") is None
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\n[tool.gradcheck]\nseed = 2\n", encoding="utf-8")
    assert read_config_file(find_config_file(tmp_path / "ops.py")).settings == {"seed": 2}  # type: ignore[arg-type]


def test_method_tables_may_be_nested_or_quoted(tmp_path: Path) -> None:
    config = _load(
        tmp_path, "[functions.Ops.scale]\ninputs = { x = [3] }\n[functions.'Ops.shift']\ninputs = { x = [2] }\n"
    )
    assert set(config.functions) == {"Ops.scale", "Ops.shift"}


def test_search_goes_upwards_and_prefers_gradcheck_toml(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[tool.gradcheck]\nseed = 1\n")
    assert find_config_file(nested) == (tmp_path / "pyproject.toml").resolve()
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'no-tool-table'\n")
    # A pyproject.toml marks the project root (issue 11, item 9): the search stops there, at a/.
    assert find_config_file(nested) is None
    (tmp_path / "a" / "gradcheck.toml").write_text("")
    assert find_config_file(nested / "ops.py") == (tmp_path / "a" / "gradcheck.toml").resolve()


def test_precedence_defaults_config_function_command_line() -> None:
    config = parse_config(
        {"mode": "full", "seed": 4, "atol": 1e-3, "functions": {"f": {"inputs": {"x": [2]}, "atol": 1e-2}}},
        None,
    )
    table = config.functions["f"]
    assert merged_settings(config, None, {}) == Settings(mode="full", seed=4, atol=1e-3)
    assert merged_settings(config, table, {}).atol == 1e-2
    assert merged_settings(config, table, {"atol": 5e-1, "mode": "fast"}) == Settings(mode="fast", seed=4, atol=5e-1)


def test_command_line_dims_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gradcheck.toml"
    path.write_text("[dims]\nN = 3\n")
    assert read_config_file(path, {"N": 9}).dims == {"N": 9}
