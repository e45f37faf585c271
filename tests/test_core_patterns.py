"""Every bug pattern of the core, in a real module, blamed on the right check and input.

Each broken function in tests/fixtures/core/core_ops.py sits beside a correct
twin; the table below is the verdict each must get, in every mode that can
see it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import blamed, copy_fixture, reports_by_mode

PASSES = {
    "matmul_ok",
    "matmul_square_ok",
    "bias_add_ok",
    "square_ok",
    "log1pexp_stable",
    "straight_through_audited",
    "gather_rows",
    "logdet_spd",
    "cube_large",
    "reduce_rows",
}

# function -> (status, {(check, input)}) under value checks (fast and full mode)
VALUE_VERDICTS: dict[str, tuple[str, set[tuple[str, str | None]]]] = {
    "matmul_missing_transpose": ("failed", {("native", "A"), ("numeric", "A")}),
    "matmul_swapped": ("failed", {("shape", "A"), ("shape", "W")}),
    "matmul_one_missing": ("failed", {("count", None)}),
    "bias_add_unsummed": ("failed", {("shape", "b")}),
    "scalar_gradient": ("failed", {("shape", "x")}),
    "square_wrong_sign": ("failed", {("native", "x"), ("numeric", "x")}),
    "square_no_upstream": ("failed", {("native", "x"), ("numeric", "x")}),
    "square_twice": ("failed", {("native", "x"), ("numeric", "x")}),
    "float32_gradient": ("failed", {("dtype", "x")}),
    "nan_gradient": ("failed", {("finite", "x")}),
    "straight_through": ("failed", {("native", "x"), ("numeric", "x")}),
    "logdet_wrong": ("failed", {("native", "S"), ("numeric", "S")}),
    "backward_raises": ("error", {("exception", None)}),
    "keyword_only": ("failed", {("count", "x"), ("execution", None)}),
}

# Bugs in values are invisible to the shape audit; the rest it must still see.
SHAPE_ONLY_PASSES = {
    "matmul_missing_transpose",
    "square_wrong_sign",
    "square_no_upstream",
    "square_twice",
    "nan_gradient",
    "straight_through",
    "logdet_wrong",
}


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = copy_fixture("core", tmp_path_factory.mktemp("core"))
    return folder


@pytest.fixture(scope="module")
def reports(core: Path) -> dict[str, dict[str, dict[str, Any]]]:
    module, config = str(core / "core_ops.py"), str(core / "gradcheck.toml")
    return reports_by_mode(module, "-c", config)


def test_every_function_is_found_in_definition_order(reports: dict[str, Any]) -> None:
    names = list(reports["fast"])
    assert set(names) == PASSES | set(VALUE_VERDICTS)
    assert names[0] == "matmul_ok" and names[-1] == "keyword_only"


@pytest.mark.parametrize("mode", ["fast", "full", "shape-only"])
@pytest.mark.parametrize("name", sorted(PASSES))
def test_correct_twin_passes(reports: dict[str, Any], mode: str, name: str) -> None:
    result = reports[mode][name]
    assert result["status"] == "passed", result["problems"]
    assert result["problems"] == []


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("name", sorted(VALUE_VERDICTS))
def test_bug_is_blamed_on_the_right_check_and_input(reports: dict[str, Any], mode: str, name: str) -> None:
    status, expected = VALUE_VERDICTS[name]
    result = reports[mode][name]
    assert result["status"] == status
    assert blamed(result) == expected


@pytest.mark.parametrize("name", sorted(VALUE_VERDICTS))
def test_shape_only_audit(reports: dict[str, Any], name: str) -> None:
    result = reports["shape-only"][name]
    if name in SHAPE_ONLY_PASSES:
        assert result["status"] == "passed", result["problems"]
    else:
        status, expected = VALUE_VERDICTS[name]
        assert result["status"] == status
        assert blamed(result) == expected


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("matmul_missing_transpose", "missing or extra transpose of W"),
        ("matmul_swapped", "swapped"),
        ("bias_add_unsummed", "missing sum over the broadcast axis 0"),
        ("scalar_gradient", "scalar gradient broadcasts silently"),
        ("square_wrong_sign", "wrong sign"),
        ("square_no_upstream", "ignores the upstream gradient"),
        ("square_twice", "constant factor: the gradient is 2 times"),
        ("straight_through", 'reference = "none"'),
        ("matmul_one_missing", "one gradient per positional input"),
    ],
)
def test_hint_names_the_likely_bug(reports: dict[str, Any], name: str, fragment: str) -> None:
    hints = [problem.get("hint") or "" for problem in reports["fast"][name]["problems"]]
    assert any(fragment in hint for hint in hints), hints


def test_value_problems_localise_the_worst_element(reports: dict[str, Any]) -> None:
    for mode in ("fast", "full"):
        problem = next(p for p in reports[mode]["square_wrong_sign"]["problems"] if p["check"] == "numeric")
        assert problem["max_rel_error"] == pytest.approx(2.0, rel=1e-6)
        assert len(problem["worst_index"]) == 1
        assert problem["max_abs_error"] > 0


def test_native_nan_does_not_fail_a_stable_custom_gradient(reports: dict[str, Any]) -> None:
    result = reports["fast"]["log1pexp_stable"]
    assert result["status"] == "passed"
    assert any("native autodiff gives NaN/Inf" in note for note in result["notes"])


def test_exception_names_the_users_frame(reports: dict[str, Any]) -> None:
    message = reports["fast"]["backward_raises"]["problems"][0]["message"]
    assert "core_ops.py:" in message and "in grad" in message
    assert "RuntimeError: backward exploded" in message
    assert "gradcheck/" not in message


def test_keyword_tensor_is_reported(reports: dict[str, Any]) -> None:
    problems = reports["fast"]["keyword_only"]["problems"]
    count = next(p for p in problems if p["check"] == "count")
    assert count["input"] == "x"
    assert "passed by keyword" in count["message"] and "#65839" in count["message"]
    execution = next(p for p in problems if p["check"] == "execution")
    assert execution["execution"] == "function"
    assert "keyword" in execution["hint"]


def test_reference_none_is_noted(reports: dict[str, Any]) -> None:
    assert any("values not compared" in note for note in reports["fast"]["straight_through_audited"]["notes"])


def test_failures_carry_the_reproducing_command(reports: dict[str, Any]) -> None:
    result = reports["full"]["square_wrong_sign"]
    command = result["reproduce"]
    assert command.startswith("gradcheck run ")
    assert "core_ops.py::square_wrong_sign --seed 0 --mode full -c " in command
    assert "reproduce" not in reports["full"]["square_ok"]
