"""Every form a custom gradient takes, right and wrong, through ``gradcheck run`` and ``gradcheck.check``.

The fixture module is tests/fixtures/forms/forms_ops.py; each broken form
sits beside a correct one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gradcheck
from tests.helpers import FIXTURES, blamed, by_name, copy_fixture, invoke, load_copy, run_json

# name -> (status, {(check, input, execution)})
VERDICTS: dict[str, tuple[str, set[tuple[str, str | None, str | None]]]] = {
    "sincos": ("passed", set()),
    "sincos_ignores_cos": ("failed", {("native", "x", None), ("numeric", "x", None)}),
    "sum_and_product": ("passed", set()),
    "sum_and_product_wrong_order": (
        "failed",
        {("native", "x", None), ("numeric", "x", None), ("native", "y", None), ("numeric", "y", None)},
    ),
    "add_list": ("passed", set()),
    "add_list_wrong": ("failed", {("native", "xs[1]", None), ("numeric", "xs[1]", None)}),
    "scale_rows": ("failed", {("execution", None, "function")}),
    "row_norms": ("failed", {("execution", None, "function")}),
    "sum_rows": ("failed", {("execution", None, "function")}),
    "take_rows": ("passed", set()),
    "take_rows_grad_for_index": ("failed", {("dtype", "indices", None)}),
    "apply_gain": ("passed", set()),
    "apply_gain_wrong": ("failed", {("native", "gain", None), ("numeric", "gain", None)}),
    "apply_gain_no_variables": ("failed", {("variables", None, None)}),
    "apply_gain_wrong_shape": ("failed", {("variables", "gain", None)}),
    "shifted_square": ("passed", set()),
    "custom_op": ("passed", set()),
    "custom_op_wrong_w": ("failed", {("native", "W", None), ("numeric", "W", None)}),
    "CustomLayer": ("failed", {("variables", None, "eager")}),
    "CustomLayerFixed": ("passed", set()),
    "WrongWeightLayer": ("failed", {("native", "W", None), ("numeric", "W", None)}),
    "softplus_float32": ("passed", set()),
    "matmul_float32_missing_transpose": ("failed", {("native", "A", None), ("numeric", "A", None)}),
    "cube_second_order_ok": ("passed", set()),
    "cube_second_order_wrong": ("failed", {("native", "x", "eager"), ("numeric", "x", "eager")}),
    "signed_square": ("passed", set()),
    "recomputed_block": ("passed", set()),
}


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_fixture("forms", tmp_path_factory.mktemp("forms"))


@pytest.fixture(scope="module")
def report(forms: Path) -> dict[str, dict[str, Any]]:
    return by_name(run_json(str(forms / "forms_ops.py"), "-c", str(forms / "gradcheck.toml")))


def _with_execution(result: dict[str, Any]) -> set[tuple[str, str | None, str | None]]:
    return {(p["check"], p["input"], p["execution"]) for p in result["problems"]}


def test_every_form_is_found(report: dict[str, Any]) -> None:
    assert set(report) == set(VERDICTS)
    assert report["CustomLayer"]["kind"] == "layer"
    assert report["recomputed_block"]["kind"] == "function"


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdicts_through_the_command_line(report: dict[str, Any], name: str) -> None:
    status, problems = VERDICTS[name]
    assert report[name]["status"] == status, report[name]["problems"]
    assert _with_execution(report[name]) == problems


def test_multiple_outputs_hints(report: dict[str, Any]) -> None:
    hints = {p["hint"] for p in report["sincos_ignores_cos"]["problems"]}
    assert any("ignores the upstream gradient of output 1" in (h or "") for h in hints)
    hints = {p["hint"] for p in report["sum_and_product_wrong_order"]["problems"]}
    assert any("outputs product and sum in swapped order" in (h or "") for h in hints)


def test_list_inputs_are_named_by_item(report: dict[str, Any]) -> None:
    assert [i["name"] for i in report["add_list"]["inputs"]] == ["xs[0]", "xs[1]"]


def test_constants_that_graph_mode_converts_are_explained(report: dict[str, Any]) -> None:
    assert "factor=2.5 (becomes a float32 tensor)" in report["scale_rows"]["problems"][0]["hint"]
    assert "axis=1 (becomes an int32 tensor)" in report["row_norms"]["problems"][0]["hint"]
    sum_rows = report["sum_rows"]
    assert "refuses keyword arguments" in sum_rows["problems"][0]["hint"]
    assert any("axis passed by keyword" in note for note in sum_rows["notes"])


def test_integer_inputs_are_never_differentiated(report: dict[str, Any]) -> None:
    take = report["take_rows"]
    assert [(i["name"], i["dtype"], i.get("role")) for i in take["inputs"]] == [
        ("params", "float64", None),
        ("indices", "int32", "integer"),
    ]
    problem = report["take_rows_grad_for_index"]["problems"][0]
    assert "integer (int32) input indices" in problem["message"] and "return None" in problem["hint"]


def test_variables_are_checked_by_name_and_restored(forms: Path, report: dict[str, Any]) -> None:
    gain = next(i for i in report["apply_gain"]["inputs"] if i["name"] == "gain")
    assert gain == {"name": "gain", "shape": [3], "dtype": "float64", "role": "variable"}
    problem = report["apply_gain_no_variables"]["problems"][0]
    assert "reads the variable gain" in problem["message"] and "variables=None" in problem["hint"]
    # A fresh import of the module, checked in this process: its variable keeps its value.
    module = load_copy(forms / "forms_ops.py")
    before = module.gain.numpy().copy()
    for function in (module.apply_gain, module.apply_gain_wrong, module.apply_gain_no_variables):
        gradcheck.check(function, inputs={"x": (4, 3)})
    assert np.array_equal(module.gain.numpy(), before)


def test_variable_gradients_are_audited_and_captured_variables_found(report: dict[str, Any]) -> None:
    problem = report["apply_gain_wrong_shape"]["problems"][0]
    assert problem["message"] == "the gradient of the variable gain has shape (4, 3), the variable (3,)"
    shifted = report["shifted_square"]
    assert ("shift", "variable") in {(i["name"], i.get("role")) for i in shifted["inputs"]}


def test_the_tutorial_layer_is_explained_with_both_ways_out(report: dict[str, Any]) -> None:
    problem = report["CustomLayer"]["problems"][0]
    assert "CustomLayer.call passes the variable W into custom_op" in problem["message"]
    assert "runs inside tf.function" in problem["message"]
    assert "variables=None" in problem["hint"] and "tf.convert_to_tensor(self.W)" in problem["hint"]
    fixed = report["CustomLayerFixed"]
    assert [(i["name"], i.get("role")) for i in fixed["inputs"]] == [("A", None), ("W", "variable")]


def test_float32_code_runs_in_float32(report: dict[str, Any]) -> None:
    for name in ("softplus_float32", "matmul_float32_missing_transpose"):
        assert report[name]["dtype"] == "float32"
        assert any(note.startswith("ran in float32") for note in report[name]["notes"])


def test_second_order_problems_are_marked(report: dict[str, Any]) -> None:
    problems = report["cube_second_order_wrong"]["problems"]
    assert all(p["order"] == 2 for p in problems)
    assert all("second-order gradient of x" in p["message"] for p in problems)
    assert any("0.5 times" in (p["hint"] or "") for p in problems)
    assert any("second order" in note for note in report["cube_second_order_ok"]["notes"])


def test_input_signature_gives_shapes_and_dtype(report: dict[str, Any]) -> None:
    assert report["signed_square"]["inputs"] == [{"name": "x", "shape": [4, 3], "dtype": "float32"}]


def test_dtype_given_on_purpose_is_not_silently_changed(forms: Path) -> None:
    result = run_json(
        str(forms / "forms_ops.py::softplus_float32"), "-c", str(forms / "gradcheck.toml"), "--dtype", "float64"
    )
    problem = result["results"][0]["problems"][0]
    assert result["results"][0]["status"] == "error"
    assert "--dtype float32" in problem["hint"]


def test_low_precision_compares_with_a_float64_reference(forms: Path) -> None:
    for dtype in ("float32", "float16", "bfloat16"):
        document = run_json(
            str(forms / "forms_ops.py::custom_op"), "-c", str(forms / "gradcheck.toml"), "--dtype", dtype
        )
        result = document["results"][0]
        assert result["status"] == "passed", (dtype, result["problems"])
        assert result["dtype"] == dtype
        assert any("evaluated in float64" in note for note in result["notes"])
        wrong = run_json(
            str(forms / "forms_ops.py::custom_op_wrong_w"), "-c", str(forms / "gradcheck.toml"), "--dtype", dtype
        )
        assert blamed(wrong["results"][0]) == {("native", "W"), ("numeric", "W")}


CHECK_INPUTS: dict[str, dict[str, Any]] = {
    "sincos": {"inputs": {"x": (5,)}},
    "sincos_ignores_cos": {"inputs": {"x": (5,)}},
    "sum_and_product_wrong_order": {"inputs": {"x": (4,), "y": (4,)}},
    "add_list_wrong": {"inputs": {"xs": {"items": [[3, 2], [3, 2]]}}},
    "row_norms": {"inputs": {"x": (3, 4)}, "constants": {"axis": 1}},
    "take_rows_grad_for_index": {
        "inputs": {"params": (5, 2), "indices": {"shape": [4], "distribution": "integer", "high": 5}}
    },
    "apply_gain_wrong": {"inputs": {"x": (4, 3)}},
    "apply_gain_no_variables": {"inputs": {"x": (4, 3)}},
    "softplus_float32": {"inputs": {"x": (6,)}},
    "cube_second_order_wrong": {"inputs": {"x": (5,)}, "order": 2},
    "signed_square": {},
    "recomputed_block": {"inputs": {"x": (3, 4)}},
}


@pytest.mark.parametrize("name", sorted(CHECK_INPUTS))
def test_verdicts_through_the_python_api(forms: Path, name: str) -> None:
    module = load_copy(forms / "forms_ops.py")
    result = gradcheck.check(getattr(module, name), **CHECK_INPUTS[name])
    status, problems = VERDICTS[name]
    assert result.status == status, result.problems
    assert {(p.check, p.input, p.execution) for p in result.problems} == problems


def test_layers_through_the_python_api(forms: Path) -> None:
    module = load_copy(forms / "forms_ops.py")
    tutorial = gradcheck.check(module.CustomLayer, init={"out_dim": 3}, inputs={"A": (6, 4)})
    assert tutorial.kind == "layer" and tutorial.status == "failed"
    assert {(p.check, p.execution) for p in tutorial.problems} == {("variables", "eager")}
    assert gradcheck.check(module.CustomLayerFixed, init={"out_dim": 3}, inputs={"A": (6, 4)}).status == "passed"
    wrong = gradcheck.check(module.WrongWeightLayer, init={"out_dim": 3}, inputs={"A": (6, 4)})
    assert {(p.check, p.input) for p in wrong.problems} == {("native", "W"), ("numeric", "W")}
    # An instance is checked as it is, and its weights come back unchanged.
    layer = module.CustomLayerFixed(3, dtype="float64")
    layer.build((6, 4))
    before = layer.W.numpy().copy()
    assert gradcheck.check(layer, inputs={"A": (6, 4)}).status == "passed"
    assert np.array_equal(layer.W.numpy(), before)


def test_order_2_on_the_command_line(forms: Path) -> None:
    config = str(forms / "gradcheck.toml")
    result = invoke("run", str(forms / "forms_ops.py::cube_second_order_wrong"), "-c", config, "--order", "1")
    assert result.exit_code == 0
    result = invoke("run", str(forms / "forms_ops.py::custom_op"), "-c", config, "--order", "2", "--format", "json")
    assert result.exit_code == 0


def test_fixture_directory_is_what_the_test_copies() -> None:
    assert (FIXTURES / "forms" / "forms_ops.py").is_file()


def test_variable_gradient_shape_hint(report: dict[str, Any]) -> None:
    problem = report["apply_gain_wrong_shape"]["problems"][0]
    assert "missing sum over the broadcast axis 0" in problem["hint"]
