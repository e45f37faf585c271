"""Forms real custom gradients take outside the textbook, right and wrong, in every mode, with and without a config.

The fixture module is tests/fixtures/wild/wild_ops.py:

- a backward function returning a gradient of the wrong shape (module-level, nested, in a layer, to the
  second order), and TensorFlow's refusal of one inside ``tf.function``;
- eager-only code;
- Keras 3 code written for float32, whose backward function raises on float64 (and, where a Python float
  default becomes a float32 tensor inside ``tf.function``, whose forward pass raises there);
- forward passes computed outside TensorFlow's ops.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf

from gradcheck.checking import audit, executions
from gradcheck.inputs import Argument, CallPlan, TensorSpec
from gradcheck.instrument import Outcome
from gradcheck.kinds import kind_named
from tests.helpers import FIXTURES, copy_fixture, reports_by_mode, run_json

Blame = set[tuple[str, str | None, str | None]]

#: name -> (status, {(check, input, execution)}) in fast and full mode, with the config.
VERDICTS: dict[str, tuple[str, Blame]] = {
    "squared_counts": ("passed", set()),
    "squared_counts_flat": ("failed", {("shape", "x", None)}),
    "em_step": ("passed", set()),
    "em_step_flat": ("failed", {("shape", "counts.t", None)}),
    "EMCounts": ("passed", set()),
    "EMCountsFlat": ("failed", {("shape", "counts.t", None)}),
    "cube": ("passed", set()),
    "cube_flat_second_order": ("failed", {("shape", "x", "eager")}),  # second order runs eagerly
    "rank_weighted": ("passed", set()),
    "rank_weighted_wrong": ("failed", {("native", "x", "eager"), ("numeric", "x", "eager")}),
    "RankScale": ("passed", set()),
    "pow2": ("passed", set()),
    "pow2_wrong": ("failed", {("native", "x", None), ("numeric", "x", None)}),
    "pow2_shifted": ("passed", set()),
    "pow2_shifted_wrong": ("failed", {("native", "x", None), ("numeric", "x", None)}),
    "np_sort": ("passed", set()),
    "np_sort_wrong": ("failed", {("native", "x", None), ("numeric", "x", None)}),
    "py_sine": ("passed", set()),
}

#: With no config, eager-only code also fails its tf.function leg (checked eagerly only in the config), and
#: the second order is not checked.
NO_CONFIG: dict[str, tuple[str, Blame]] = {
    **VERDICTS,
    "cube_flat_second_order": ("passed", set()),
    "rank_weighted": ("failed", {("execution", None, "function")}),
    "RankScale": ("failed", {("execution", None, "function")}),
    "rank_weighted_wrong": (
        "failed",
        {("execution", None, "function"), ("native", "x", "eager"), ("numeric", "x", "eager")},
    ),
}

VALUE_CHECKS = ("native", "numeric")


def _shape_only(verdicts: dict[str, tuple[str, Blame]]) -> dict[str, tuple[str, Blame]]:
    """The verdicts with no values compared (nor the second order)."""
    kept = {
        name: {b for b in blame if b[0] not in VALUE_CHECKS and name != "cube_flat_second_order"}
        for name, (_, blame) in verdicts.items()
    }
    return {name: ("failed" if blame else "passed", blame) for name, blame in kept.items()}


EXPECTED = {
    "config": {"fast": VERDICTS, "full": VERDICTS, "shape-only": _shape_only(VERDICTS)},
    "no config": {"fast": NO_CONFIG, "full": NO_CONFIG, "shape-only": _shape_only(NO_CONFIG)},
}


@pytest.fixture(scope="module")
def wild(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_fixture("wild", tmp_path_factory.mktemp("wild"))


@pytest.fixture(scope="module")
def unconfigured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture module alone, under an empty config: every shape is probed."""
    folder = tmp_path_factory.mktemp("wild-no-config")
    shutil.copy(FIXTURES / "wild" / "wild_ops.py", folder)
    (folder / "gradcheck.toml").write_text("", encoding="utf-8")
    return folder / "wild_ops.py"


@pytest.fixture(scope="module")
def reports(wild: Path, unconfigured: Path) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    return {
        "config": reports_by_mode(str(wild / "wild_ops.py"), "-c", str(wild / "gradcheck.toml")),
        "no config": reports_by_mode(str(unconfigured)),
    }


def _with_execution(result: dict[str, Any]) -> Blame:
    return {(p["check"], p["input"], p["execution"]) for p in result["problems"]}


@pytest.mark.parametrize("config", sorted(EXPECTED))
@pytest.mark.parametrize("mode", ["fast", "full", "shape-only"])
def test_verdicts_in_every_mode(reports: dict[str, Any], config: str, mode: str) -> None:
    found = reports[config][mode]
    assert set(found) == set(VERDICTS)
    for name, (status, blame) in EXPECTED[config][mode].items():
        assert (found[name]["status"], _with_execution(found[name])) == (status, blame), (name, found[name])


@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_a_misshapen_gradient_that_reaches_the_input_is_not_compared(reports: dict[str, Any], config: str) -> None:
    for mode in ("fast", "full"):
        layer = reports[config][mode]["EMCountsFlat"]
        assert "values of x not compared: its gradient arrives with shape (12,)" in " ".join(layer["notes"])
        [problem] = layer["problems"]
        assert (problem["expected"], problem["got"]) == ("(3, 4)", "(12,)")


def test_eager_only_code_is_told_the_config_line(reports: dict[str, Any]) -> None:
    for mode in ("fast", "full", "shape-only"):
        for table, raised in (
            ("functions.rank_weighted", "AssertionError"),
            ("functions.rank_weighted_wrong", "AttributeError"),
            ("layers.RankScale", "AttributeError"),
        ):
            name = table.split(".")[1]
            [problem] = [p for p in reports["no config"][mode][name]["problems"] if p["check"] == "execution"]
            assert raised in problem["message"]
            assert f'add to gradcheck.toml: [{table}] execution = "eager"' in problem["hint"]


def test_a_misshapen_second_order_gradient_is_a_shape_problem_of_order_2(reports: dict[str, Any]) -> None:
    for mode in ("fast", "full"):
        [problem] = reports["config"][mode]["cube_flat_second_order"]["problems"]
        assert problem["order"] == 2 and (problem["expected"], problem["got"]) == ("(3, 4)", "(12,)")


@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_float32_code_whose_backward_raises_on_float64_runs_in_float32(reports: dict[str, Any], config: str) -> None:
    for mode in ("fast", "full", "shape-only"):
        for name in ("pow2", "pow2_wrong"):
            result = reports[config][mode][name]
            assert result["dtype"] == "float32"
            assert any(
                n.startswith("ran in float32: with float64 inputs the backward function raised")
                for n in result["notes"]
            )


@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_float32_code_raising_in_the_backward_eagerly_and_the_forward_in_tf_function_runs_in_float32(
    reports: dict[str, Any], config: str
) -> None:
    for mode in ("fast", "full", "shape-only"):
        for name in ("pow2_shifted", "pow2_shifted_wrong"):
            result = reports[config][mode][name]
            assert result["dtype"] == "float32"
            assert any(
                n.startswith(
                    "ran in float32: with float64 inputs the backward function (and the forward pass in another "
                    "execution mode) raised"
                )
                for n in result["notes"]
            )


def test_float32_code_checked_in_float64_on_purpose_is_an_error_that_names_the_dtype(wild: Path) -> None:
    document = run_json(str(wild / "wild_ops.py::pow2"), "-c", str(wild / "gradcheck.toml"), "--dtype", "float64")
    [result] = document["results"]
    assert result["status"] == "error" and document["exit_code"] == 1
    [problem] = result["problems"]
    assert problem["message"].startswith("backward function raised with float64 inputs")
    assert '--dtype float32 (or dtype = "float32" in [functions.pow2])' in problem["hint"]


@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_a_native_gradient_of_another_shape_is_set_aside(reports: dict[str, Any], config: str) -> None:
    for mode in ("fast", "full"):
        notes = " ".join(reports[config][mode]["py_sine"].get("notes", []))
        assert "native autodiff gives the gradient of x in shape ()" in notes


@pytest.mark.parametrize("config", sorted(EXPECTED))
def test_full_mode_sets_aside_native_autodiff_where_it_has_no_path(reports: dict[str, Any], config: str) -> None:
    notes = " ".join(reports[config]["full"]["np_sort"]["notes"])
    assert "native autodiff of x disagrees with finite differences" in notes
    assert "tf.numpy_function" in notes


# -- what TensorFlow says inside tf.function ----------------------------------------------------


@tf.RegisterGradient("WildFlattenedGradient")
def _flattened(op: Any, dy: Any) -> Any:
    return tf.reshape(dy, [-1])


def _refused_inside_tf_function() -> BaseException:
    """The error TensorFlow raises where a gradient of the wrong shape meets a tf.function's gradient."""

    @tf.function
    def identity(x: Any) -> Any:
        with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "WildFlattenedGradient"}):
            return tf.identity(x) * 2.0

    x = tf.ones((3, 4), tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        try:
            tape.gradient(identity(x), x)
        except ValueError as error:
            return error
    raise AssertionError("TensorFlow accepted the gradient")


def test_tensorflows_refusal_inside_tf_function_is_a_shape_problem_of_that_execution() -> None:
    plan = CallPlan((Argument("x", "input", TensorSpec((3, 4), "float64")),))
    subject = audit.Audited(name="op", kind=kind_named("wrapper"), path=None, plan=plan, wrapper=True)
    refused = audit.audit(subject, Outcome("function", [], error=_refused_inside_tf_function()))
    [problem] = refused.problems
    assert (problem.check, problem.input, problem.expected, problem.got) == ("shape", None, "(3, 4)", "(12,)")
    assert "of the op" in problem.message and "Incompatible shapes" in problem.message
    eager = audit.audit(subject, Outcome("eager", [], grads={"x": tf.zeros(12, tf.float64).numpy()}))
    assert [(p.check, p.input) for p in eager.problems] == [("shape", "x")] and eager.misshapen == {"x": (12,)}
    merged = executions.merge_audits(plan, {"eager": eager.problems, "function": refused.problems}, "[functions.op]")
    assert {(p.check, p.input, p.execution) for p in merged} == {("shape", "x", "eager"), ("shape", None, "function")}
