"""Constructor arguments that must be variables, and one ``[classes.NAME] init`` for every method (issue 10, 5a)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import gradcheck
from gradcheck.config import VariableValue
from gradcheck.config_files import parse_config
from gradcheck.errors import ConfigError
from tests.helpers import FIXTURES, by_name, invoke, load_copy, run_json

CLUSTERING = FIXTURES / "probing" / "clustering.py"
SHARED_INIT = "[classes.Clusterer]\ninit = { clusters_centroids = { value = [-1.0, 0.0, 1.0], variable = true } }\n"


def test_a_class_table_serves_every_method_under_the_methods_own_init() -> None:
    document = {
        "classes": {"Clusterer": {"init": {"clusters_centroids": {"value": [1.0, 2.0], "variable": True}}}},
        "functions": {"Clusterer.sharpen": {"init": {"temperature": 2.0}}},
    }
    config = parse_config(document, None)
    sharpen = config.subject("function", "Clusterer.sharpen")
    assert sharpen is not None
    assert sharpen.init == {"clusters_centroids": VariableValue([1.0, 2.0]), "temperature": 2.0}
    other = config.subject("function", "Clusterer.straight_through")
    assert other is not None and other.init == {"clusters_centroids": VariableValue([1.0, 2.0])}
    assert config.subject("function", "sharpen") is None


def test_a_table_without_variable_is_still_a_plain_dict_argument() -> None:
    config = parse_config({"layers": {"L": {"init": {"options": {"value": 3, "mode": "x"}}}}}, None)
    assert config.layers["L"].init == {"options": {"value": 3, "mode": "x"}}


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        (
            {"classes": {"C": {"inputs": {}}}},
            "config: classes.C.inputs: unknown key: a class table holds only init; "
            'inputs goes in [functions."C.METHOD"]',
        ),
        ({"classes": {"C": 3}}, "config: classes.C: 3 must be a table with 'init'"),
        ({"classes": []}, "config: classes: must be a table of [classes.NAME] tables"),
        (
            {"classes": {"C": {"init": {"c": {"value": [1.0], "variable": "yes"}}}}},
            "config: classes.C.init.c.variable: 'yes' must be true or false",
        ),
        ({"classes": {"C": {"init": {"c": {"variable": True}}}}}, "config: classes.C.init.c: missing 'value'"),
        (
            {"functions": {"f": {"init": {"c": {"value": [1.0], "varaible": True}}}}},
            "config: functions.f.init.c.varaible: unknown key (did you mean 'variable'?)",
        ),
        (
            {"functions": {"f": {"constants": {"c": {"value": "a", "variable": True}}}}},
            "config: functions.f.constants.c.value: 'a' must be a number or a list of numbers",
        ),
    ],
)
def test_bad_class_and_variable_tables_are_one_line_errors(document: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, None)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture
def clustering(project: Path) -> Path:
    shutil.copy(CLUSTERING, project / "clustering.py")
    return project


def test_variable_init_from_a_class_table_checks_every_method(clustering: Path) -> None:
    (clustering / "gradcheck.toml").write_text(
        SHARED_INIT
        + '[functions."Clusterer.straight_through"]\n'
        + "inputs = { clustered_weight = [3, 2], original_weight = [3, 2] }\n"
        + 'reference = "none"\n',
        encoding="utf-8",
    )
    results = by_name(run_json("clustering.py"))
    assert results["Clusterer.straight_through"]["status"] == "passed", results
    assert results["Clusterer.sharpen"]["status"] == "passed", results  # shapes probed, init shared


def test_without_init_the_skip_names_the_argument_and_the_class_table(clustering: Path) -> None:
    result = by_name(run_json("clustering.py"))["Clusterer.sharpen"]
    assert result["status"] == "skipped"
    assert "init = { clusters_centroids = ... }" in result["skip_reason"]
    assert "[classes.Clusterer]" in result["skip_reason"]


def test_a_plain_value_where_a_variable_is_needed_gets_the_variable_hint_only(clustering: Path) -> None:
    (clustering / "gradcheck.toml").write_text(
        "[classes.Clusterer]\ninit = { clusters_centroids = [-1.0, 0.0, 1.0] }\n", encoding="utf-8"
    )
    result = by_name(run_json("clustering.py"))["Clusterer.sharpen"]
    message = result["problems"][0]["message"]
    assert "should be a tf.Variable" in message
    assert "{ value = ..., variable = true }" in message
    assert "give its arguments as init" not in message  # the arguments were given: do not ask again


def test_a_misspelt_class_table_is_a_usage_error(clustering: Path) -> None:
    (clustering / "gradcheck.toml").write_text(SHARED_INIT.replace("Clusterer]", "Clusterr]"), encoding="utf-8")
    result = invoke("run", "clustering.py")
    assert result.exit_code == 2
    assert (
        "classes.Clusterr: no class named 'Clusterr'" in result.output and "did you mean 'Clusterer'" in result.output
    )


def test_the_api_validates_variable_init_values() -> None:
    module = load_copy(CLUSTERING)
    with pytest.raises(ConfigError, match=r"gradcheck.check\(\): init.c.value: 'a' must be a number"):
        gradcheck.check(module.Clusterer.sharpen, init={"c": {"value": "a", "variable": True}})
