"""Verdicts that are easy to get wrong (issue 10, items 4 and 5).

Complex outputs under TensorFlow's conjugate convention; surrogate gradients
given the ``reference = "none"`` hint rather than a swap, sign or factor
hint; native autodiff of an approximate forward pass; float32 layers fed
float64 in full mode; Python float constants under ``tf.function``; the
``execution`` column and the redraw note. Each bug in
tests/fixtures/verdicts/verdicts_ops.py sits beside a correct twin.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gradcheck
from gradcheck.checking import diagnose, draw_loop
from tests.helpers import FIXTURES, REPO, blamed, copy_fixture, load_copy, reports_by_mode, run_json, write

PASSES = {"phase_ok", "complex_square", "exp_series", "Float32Dense", "matmul_ok"}

# function -> (status, {(check, input)}) under value checks (fast and full mode)
VALUE_VERDICTS: dict[str, tuple[str, set[tuple[str, str | None]]]] = {
    "phase_unconjugated": ("failed", {("native", "x"), ("numeric", "x")}),
    "complex_square_unconjugated": (
        "failed",
        {("native", "z.real"), ("numeric", "z.real"), ("native", "z.imag"), ("numeric", "z.imag")},
    ),
    "quantize_straight_through": (
        "failed",
        {("native", "inputs"), ("numeric", "inputs"), ("native", "offset"), ("numeric", "offset")},
    ),
    "scale_gradient": ("failed", {("native", "x"), ("numeric", "x")}),
    "reverse_gradient": ("failed", {("native", "x"), ("numeric", "x")}),
    "clipped_tanh": ("failed", {("native", "x"), ("numeric", "x")}),
    "double_forgotten_factor": ("failed", {("native", "x"), ("numeric", "x")}),
    "exp_series_wrong": ("failed", {("native", "x"), ("numeric", "x")}),
    "scaled_by": ("failed", {("execution", None)}),
    "power_order_left_out": ("failed", {("native", "v"), ("numeric", "v")}),
    "scale_gradient_by": ("failed", {("native", "t"), ("numeric", "t")}),
    "approx_sign": ("failed", {("native", "x"), ("numeric", "x")}),
    "scalar_square_surrogate": ("failed", {("native", "x"), ("numeric", "x")}),
    "Float32DenseWrong": ("failed", {("native", "W"), ("numeric", "W")}),
    "matmul_half_w": ("failed", {("native", "W"), ("numeric", "W")}),
}

#: Bugs in values are invisible to the shape audit; the execution failure is not.
SHAPE_ONLY_FAILS = {"scaled_by"}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict[str, Any]]]:
    folder = copy_fixture("verdicts", tmp_path_factory.mktemp("verdicts"))
    module, config = str(folder / "verdicts_ops.py"), str(folder / "gradcheck.toml")
    return reports_by_mode(module, "-c", config)


@pytest.fixture(scope="module")
def ops() -> Any:
    spec = importlib.util.spec_from_file_location("verdicts_ops", FIXTURES / "verdicts" / "verdicts_ops.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _hints(result: dict[str, Any], name: str | None = None) -> list[str]:
    return [p["hint"] or "" for p in result["problems"] if name is None or p["input"] == name]


def test_every_function_is_found(reports: dict[str, Any]) -> None:
    assert set(reports["fast"]) == PASSES | set(VALUE_VERDICTS)


@pytest.mark.parametrize("mode", ["fast", "full", "shape-only"])
@pytest.mark.parametrize("name", sorted(PASSES))
def test_correct_twin_passes(reports: dict[str, Any], mode: str, name: str) -> None:
    result = reports[mode][name]
    assert result["status"] == "passed", result["problems"]


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("name", sorted(VALUE_VERDICTS))
def test_bug_is_blamed_on_the_right_check_and_input(reports: dict[str, Any], mode: str, name: str) -> None:
    status, expected = VALUE_VERDICTS[name]
    result = reports[mode][name]
    assert result["status"] == status
    assert blamed(result) == expected
    assert all("passed on redraw" not in note for note in result.get("notes", []))


@pytest.mark.parametrize("name", sorted(VALUE_VERDICTS))
def test_shape_only_sees_only_what_it_can(reports: dict[str, Any], name: str) -> None:
    result = reports["shape-only"][name]
    if name in SHAPE_ONLY_FAILS:
        assert blamed(result) == VALUE_VERDICTS[name][1]
    else:
        assert result["status"] == "passed", result["problems"]


# -- complex outputs ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_complex_output_is_checked_and_the_convention_stated(reports: dict[str, Any], mode: str) -> None:
    for name in ("phase_ok", "phase_unconjugated"):
        result = reports[mode][name]
        assert result["status"] != "skipped"
        assert any("complex output" in note and "dL/dRe y + i dL/dIm y" in note for note in result["notes"])


@pytest.mark.parametrize("name", ["phase_unconjugated", "complex_square_unconjugated"])
def test_missing_conjugate_is_named(reports: dict[str, Any], name: str) -> None:
    hints = _hints(reports["fast"][name])
    assert hints and all("tf.math.conj" in hint for hint in hints)


def test_complex_input_is_checked_as_its_parts(reports: dict[str, Any]) -> None:
    result = reports["full"]["complex_square"]
    assert result["inputs"] == [
        {"name": "z.real", "shape": [2, 3], "dtype": "float64"},
        {"name": "z.imag", "shape": [2, 3], "dtype": "float64"},
    ]


def test_complex_input_through_check(ops: Any) -> None:
    inputs = {"z": {"shape": [4], "dtype": "complex64"}}
    assert gradcheck.check(ops.complex_square, inputs=inputs).status == "passed"
    wrong = gradcheck.check(ops.complex_square_unconjugated, inputs=inputs)
    assert {p.input for p in wrong.problems} == {"z.real", "z.imag"}
    assert wrong.dtype == "float32"


def test_only_outputs_without_float_or_complex_parts_are_skipped(ops: Any) -> None:
    result = gradcheck.check(ops.phase_unconjugated, inputs={"x": (2, 3)})
    assert result.status == "failed"
    assert {(p.check, p.input) for p in result.problems} == VALUE_VERDICTS["phase_unconjugated"][1]


# -- surrogates --------------------------------------------------------------------


def test_straight_through_is_not_read_as_a_swap(reports: dict[str, Any]) -> None:
    result = reports["fast"]["quantize_straight_through"]
    assert all("swapped" not in hint for hint in _hints(result))
    assert all('reference = "none"' in hint for hint in _hints(result, "inputs"))


@pytest.mark.parametrize(
    ("name", "fragment", "misleading"),
    [
        ("scale_gradient", "scaled by 0.5, while the forward pass is the identity", "constant factor"),
        ("reverse_gradient", "sign reversed, while the forward pass is the identity", "wrong sign"),
        ("clipped_tanh", "clipped pass-through", "constant factor"),
    ],
)
def test_surrogate_gets_the_reference_none_hint(
    reports: dict[str, Any], name: str, fragment: str, misleading: str
) -> None:
    for mode in ("fast", "full"):
        hints = _hints(reports[mode][name])
        assert hints and all(fragment in hint and 'reference = "none"' in hint for hint in hints)
        assert all(misleading not in hint for hint in hints)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("scale_gradient_by", "while the forward pass is the identity"),
        ("approx_sign", "the reference gradient is zero but this one is not"),
    ],
)
def test_surrogate_no_pass_through_gets_the_reference_none_hint(
    reports: dict[str, Any], name: str, fragment: str
) -> None:
    for mode in ("fast", "full"):
        hints = _hints(reports[mode][name])
        assert hints and all(fragment in hint and 'reference = "none"' in hint for hint in hints)


def test_no_factor_hint_for_one_number(reports: dict[str, Any]) -> None:
    for mode in ("fast", "full"):
        hints = _hints(reports[mode]["scalar_square_surrogate"])
        assert hints and all("constant factor" not in hint for hint in hints)


def test_factor_hint_kept_where_the_forward_pass_scales(reports: dict[str, Any]) -> None:
    hints = _hints(reports["fast"]["double_forgotten_factor"])
    assert hints and all("0.5 times the expected one" in hint for hint in hints)


def test_gradient_left_out_gets_the_declare_it_hint(reports: dict[str, Any]) -> None:
    for mode in ("fast", "full"):
        hints = _hints(reports[mode]["power_order_left_out"])
        assert hints and all("returned None for v" in hint and "constants = { v = ... }" in hint for hint in hints)
        assert all("missing term" not in hint for hint in hints)


def test_surrogate_passes_with_reference_none(ops: Any) -> None:
    for function in (ops.scale_gradient, ops.reverse_gradient, ops.clipped_tanh):
        assert gradcheck.check(function, inputs={"x": (3, 4)}, reference="none").status == "passed"


def test_pass_through_patterns() -> None:
    upstream = np.arange(1.0, 7.0).reshape(2, 3)
    assert diagnose.pass_through(upstream, upstream) == "unchanged"
    assert diagnose.pass_through(-upstream, upstream) == "with its sign reversed"
    assert diagnose.pass_through(0.25 * upstream, upstream) == "scaled by 0.25"
    assert diagnose.pass_through(upstream * [[1, 0, 1], [0, 1, 1]], upstream).startswith("where a mask")
    assert diagnose.pass_through(upstream**2, upstream) is None
    assert diagnose.pass_through(np.zeros((2, 3)), upstream) is None
    # y = 3x: a pass-through may be a forgotten factor, so no surrogate reading
    assert diagnose.surrogate_hint(upstream, 3 * upstream, upstream) is None
    assert diagnose.surrogate_hint(upstream, np.zeros((2, 3)), upstream) is not None


# -- execution column, redraw note ------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_problem_seen_in_every_execution_names_none(reports: dict[str, Any], mode: str) -> None:
    for name in VALUE_VERDICTS:
        for problem in reports[mode][name]["problems"]:
            if problem["check"] in ("native", "numeric", "finite"):
                assert problem["execution"] is None, (name, problem)


def test_redraw_note_says_passed_only_in_a_passing_result() -> None:
    conclusion = draw_loop.Conclusion({}, [], ["a run note"], [], redrawn=("x",))
    passing = draw_loop.redraw_notes(conclusion, failed=False)
    failing = draw_loop.redraw_notes(conclusion, failed=True)
    assert passing[0] == "a run note" and passing[-1].endswith("passed on redraw")
    assert "passed on redraw" not in failing[-1] and "x agreed on the fresh draw" in failing[-1]
    assert draw_loop.redraw_notes(draw_loop.Conclusion({}, [], ["a run note"], []), failed=True) == ["a run note"]


# -- second order: the same draws and decision as first order (issue 19, item 11) ------

SECOND_ORDER = """
import tensorflow as tf


@tf.custom_gradient
def ragged_slope(x):
    \"\"\"x**2; its gradient is 2x to 3e-6 relative, but jumps within every finite-difference step.\"\"\"

    def grad(dy):
        return dy * 2.0 * x * (1.0 + 3e-6 * tf.sign(tf.sin(1e8 * x)))

    return x * x, grad


@tf.custom_gradient
def square(x):
    def grad(dy):
        return dy * 2.0 * x

    return x * x, grad


@tf.custom_gradient
def cube_stopped(x):
    \"\"\"The gradient 3x**2 is right; its own gradient is 3x, not 6x (stop_gradient cuts half).\"\"\"

    def grad(dy):
        return dy * 3.0 * x * tf.stop_gradient(x)

    return x * x * x, grad
"""

AGREES = "second order: the gradient of the custom gradient agrees with the references"


@pytest.fixture(scope="module")
def second_order_ops(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_copy(write(tmp_path_factory.mktemp("second_order"), "second_order_ops.py", SECOND_ORDER))


def test_second_order_inconclusive_at_every_draw_does_not_agree(second_order_ops: Any) -> None:
    result = gradcheck.check(second_order_ops.ragged_slope, {"x": (5,)}, reference="numeric", order=2)
    assert AGREES not in result.notes
    assert result.status == "failed"
    (problem,) = result.problems
    assert (problem.check, problem.input, problem.order) == ("numeric", "x", 2)
    assert "unreliable for the second-order gradient of x at every draw" in problem.message


def test_second_order_with_numeric_reference_passes_a_right_gradient(second_order_ops: Any) -> None:
    for mode in ("fast", "full"):
        result = gradcheck.check(second_order_ops.square, {"x": (5,)}, reference="numeric", order=2, mode=mode)
        assert result.status == "passed", (mode, result.problems)
        assert AGREES in result.notes


def test_second_order_with_numeric_reference_fails_a_cut_gradient_of_the_gradient(second_order_ops: Any) -> None:
    for mode in ("fast", "full"):
        result = gradcheck.check(second_order_ops.cube_stopped, {"x": (5,)}, reference="numeric", order=2, mode=mode)
        assert result.status == "failed", mode
        assert {(p.check, p.input, p.order) for p in result.problems} == {("numeric", "x", 2)}
        assert AGREES not in result.notes


# -- native autodiff of an approximate forward pass ------------------------------------


def test_series_forward_pass_native_difference_is_a_note(reports: dict[str, Any]) -> None:
    result = reports["full"]["exp_series"]
    assert result["status"] == "passed"
    assert any("below what finite differences resolve" in note for note in result["notes"])


def test_series_forward_pass_full_mode_through_check(ops: Any) -> None:
    inputs = {"x": {"shape": [4, 6], "low": 0.5, "high": 1.5}}
    assert gradcheck.check(ops.exp_series, inputs=inputs, mode="full").status == "passed"
    wrong = gradcheck.check(ops.exp_series_wrong, inputs=inputs, mode="full")
    assert {(p.check, p.input) for p in wrong.problems} == VALUE_VERDICTS["exp_series_wrong"][1]


# -- float32 layers in full mode --------------------------------------------------------


def test_float32_layer_fed_float64_is_judged_in_float32(reports: dict[str, Any]) -> None:
    for mode in ("fast", "full"):
        result = reports[mode]["Float32Dense"]
        assert result["status"] == "passed", result["problems"]
        assert any("returns float32 for float64 inputs" in note for note in result["notes"])


def test_seed_example_layer_passes_in_full_mode() -> None:
    report = run_json(str(REPO / "examples" / "matmul" / "ops.py") + "::CustomLayer", "--mode", "full")
    assert report["results"][0]["status"] == "passed", report["results"][0]["problems"]


# -- Python float constants under tf.function -------------------------------------------


def test_float_constant_hint_gives_the_config_fix(reports: dict[str, Any]) -> None:
    (problem,) = reports["fast"]["scaled_by"]["problems"]
    assert problem["execution"] == "function"
    assert 'dtype = "float32"' in problem["hint"] and "scale = { shape = [] }" in problem["hint"]
    assert "closure" not in problem["hint"]


def test_float_constant_check_passes_in_float32(ops: Any) -> None:
    result = gradcheck.check(ops.scaled_by, inputs={"x": (3, 4)}, constants={"scale": 0.5}, dtype="float32")
    assert result.status == "passed", result.problems


def test_the_guide_states_the_complex_convention() -> None:
    text = (Path(REPO) / "docs" / "verdicts.md").read_text(encoding="utf-8")
    assert "dL/dRe y + i dL/dIm y" in text
