"""Decorator factories and the ``(*args)`` custom gradients they make (issue 20, item 1).

The fixture module is tests/fixtures/factory/factory_ops.py. The factories
(``func_with_vjp``, ``custom_gradient``, ``scaled_by``) are no targets; the
objects they make are, as ``product`` subjects: their inputs come from the
config in the order given, and with no config they are probed with one
positional input, then two, or skipped with the config line to write. They
are never called with no arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gradcheck
from gradcheck.kinds import kind_named
from gradcheck.subjects import find_subjects
from tests.helpers import (
    blamed,
    by_name,
    copy_fixture,
    fixture_module_alone,
    invoke,
    load_copy,
    reports_by_mode,
    run_json,
)

VALUES = {("native", "x"), ("numeric", "x")}
#: name -> the (check, input) pairs blamed, with the config (its input names) and with none (probed: x, y).
WITH_CONFIG = {
    "log_cosh": set(),
    "log_cosh_wrong": VALUES,
    "squared_distance": set(),
    "squared_distance_wrong": {("native", "b"), ("numeric", "b")},
    "tripled": set(),
    "tripled_wrong": VALUES,
    "summed_three": set(),
}
PROBED = {**WITH_CONFIG, "squared_distance_wrong": {("native", "y"), ("numeric", "y")}, "summed_three": set()}
PROBED_STATUS = {name: "failed" if blame else "passed" for name, blame in PROBED.items()} | {"summed_three": "skipped"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_fixture("factory", tmp_path_factory.mktemp("factory"))


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module alone, in a folder with no config."""
    return fixture_module_alone("factory", tmp_path_factory.mktemp("factory_bare"))


@pytest.fixture(scope="module")
def configured(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    return reports_by_mode(str(folder / "factory_ops.py"), "-c", str(folder / "gradcheck.toml"))


@pytest.fixture(scope="module")
def probed(bare: Path) -> dict[str, dict[str, dict[str, Any]]]:
    return reports_by_mode(str(bare))


def test_the_factories_are_not_targets_what_they_make_is(bare: Path) -> None:
    subjects = {s.name: s for s in find_subjects(load_copy(bare), bare)}
    assert set(subjects) == set(WITH_CONFIG)  # not func_with_vjp, custom_gradient or scaled_by
    # What takes only *args is a product; scaled_by's wrap(x) names its input.
    made = {name for name in subjects if not name.startswith("tripled")}
    assert {name: s.kind for name, s in subjects.items()} == {
        name: kind_named("product" if name in made else "function") for name in subjects
    }
    assert str(subjects["log_cosh"].kind.signature(subjects["log_cosh"])) == "(*args, **kwargs)"


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_with_the_config_its_inputs_fill_args_in_order(configured: dict[str, Any], mode: str) -> None:
    got = {name: blamed(result) for name, result in configured[mode].items()}
    assert got == WITH_CONFIG
    distance = configured[mode]["squared_distance"]
    assert [(i["name"], i["shape"]) for i in distance["inputs"]] == [("a", [4, 3]), ("b", [4, 3])]


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_with_no_config_one_input_then_two_are_probed(probed: dict[str, Any], mode: str) -> None:
    assert {name: blamed(result) for name, result in probed[mode].items()} == PROBED
    assert {name: result["status"] for name, result in probed[mode].items()} == PROBED_STATUS
    assert [i["name"] for i in probed[mode]["log_cosh"]["inputs"]] == ["x"]
    assert [i["name"] for i in probed[mode]["squared_distance"]["inputs"]] == ["x", "y"]
    assert any("no shapes configured: using guessed shapes x=" in note for note in probed[mode]["log_cosh"]["notes"])


def test_a_product_of_three_inputs_is_skipped_with_the_config_line_never_called_with_none(
    probed: dict[str, Any],
) -> None:
    reason = probed["fast"]["summed_three"]["skip_reason"]
    assert "it takes *args, and neither one positional input nor two fitted" in reason
    assert "[functions.summed_three] inputs = { x = [...], y = [...], ... }" in reason
    assert "missing 1 required positional argument: 'z'" in reason  # the two-input try, not a call with none


def test_shape_only_audits_each_product_with_and_without_config(
    configured: dict[str, Any], probed: dict[str, Any]
) -> None:
    assert {name: r["status"] for name, r in configured["shape-only"].items()} == dict.fromkeys(WITH_CONFIG, "passed")
    assert {name: r["status"] for name, r in probed["shape-only"].items()} == {
        **dict.fromkeys(WITH_CONFIG, "passed"),
        "summed_three": "skipped",
    }


@pytest.mark.parametrize("execution", ["eager", "function"])
def test_each_execution_mode_alone(folder: Path, execution: str) -> None:
    config = str(folder / "gradcheck.toml")
    report = by_name(run_json(str(folder / "factory_ops.py"), "-c", config, "--execution", execution))
    assert {name: blamed(result) for name, result in report.items()} == WITH_CONFIG


def test_list_shows_args_and_the_probed_inputs(bare: Path) -> None:
    listed = invoke("list", str(bare)).stdout
    assert "factory_ops.py::log_cosh(*args, **kwargs)  [function]" in listed
    assert "    x: (3, 4) float64 guessed" in listed
    assert "func_with_vjp" not in listed and "scaled_by" not in listed and "::custom_gradient" not in listed


def test_init_writes_the_probed_inputs_and_a_todo_for_the_one_it_cannot_guess(bare: Path, tmp_path: Path) -> None:
    written = tmp_path / "gradcheck.toml"
    invoke("init", str(bare), "-o", str(written))
    text = written.read_text()
    assert "[functions.squared_distance]\ninputs = { x = [3, 4], y = [3, 4] }  # guessed" in text
    summed = text.split("[functions.summed_three]\n", 1)[1]
    assert summed.startswith("# TODO: it takes *args, and neither one positional input nor two fitted")
    assert "every argument has a default" not in text


def test_gradcheck_check_takes_a_product_with_its_inputs_in_order(bare: Path) -> None:
    module = load_copy(bare)
    right = gradcheck.check(module.squared_distance, inputs={"a": (4, 3), "b": (4, 3)})
    wrong = gradcheck.check(module.squared_distance_wrong, inputs={"a": (4, 3), "b": (4, 3)})
    assert (right.status, wrong.status) == ("passed", "failed")
    assert {(p.check, p.input) for p in wrong.problems} == {("native", "b"), ("numeric", "b")}
    probed = gradcheck.check(module.log_cosh)  # no inputs given: probed with one positional input
    assert probed.status == "passed" and [i["name"] for i in probed.to_dict()["inputs"]] == ["x"]
