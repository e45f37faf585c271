"""How much work a check does: constant in fast mode, batched in full mode, traced once.

No timings here: the times live in benchmarks/bench_compare.py and docs/performance.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import gradcheck
from gradcheck import _tf
from tests.helpers import FIXTURES, by_name, copy_fixture, load_copy, run_json

tf = pytest.importorskip("tensorflow")


@pytest.fixture
def counted() -> Any:
    return load_copy(FIXTURES / "perf" / "counted_ops.py")


def _forward_calls(module: Any, name: str, **settings: Any) -> tuple[int, Any]:
    module.CALLS[name] = 0
    result = gradcheck.check(getattr(module, name), **settings)
    return module.CALLS[name], result


def test_fast_mode_work_does_not_grow_with_size(counted: Any) -> None:
    small, result_small = _forward_calls(counted, "scaled_tanh", inputs={"x": (4, 4)})
    large, result_large = _forward_calls(counted, "scaled_tanh", inputs={"x": (256, 256)})
    assert result_small.status == result_large.status == "passed"
    assert small == large
    assert large < 40


def test_fast_mode_calls_the_forward_pass_five_times_for_one_input(counted: Any) -> None:
    # The first forward pass (whose tape native autodiff reuses, and which is then the finite
    # differences' center), the custom gradient eagerly and traced, and the loss a step either way
    # along one direction. Issue 12 item 1: was 12, then 6.
    calls, result = _forward_calls(counted, "scaled_tanh", inputs={"x": (64, 64)})
    assert result.status == "passed"
    assert calls == 5


def test_fast_mode_forward_calls_do_not_grow_with_the_number_of_inputs(counted: Any) -> None:
    # Where the custom gradient equals native autodiff, one direction through both inputs confirms it.
    calls, result = _forward_calls(counted, "counted_matmul", inputs={"A": (32, 16), "W": (16, 8)})
    assert result.status == "passed"
    assert calls == 5


def test_the_joint_look_does_not_pass_a_gradient_that_copies_wrong_native_autodiff(counted: Any) -> None:
    result = gradcheck.check(counted.half_stopped_square, inputs={"x": (16, 16)})
    assert result.status == "failed"
    assert [(p.check, p.input) for p in result.problems] == [("numeric", "x")]


def test_fast_mode_still_projects_each_input_where_native_autodiff_disagrees(counted: Any) -> None:
    result = gradcheck.check(counted.scaled_tanh_wrong, inputs={"x": (8, 8)})
    assert result.status == "failed"
    numeric = next(p for p in result.problems if p.check == "numeric")
    assert numeric.worst_index is not None  # localised element by element after the projections failed


def test_full_mode_batches_finite_differences(counted: Any) -> None:
    elements = 32 * 32
    calls, result = _forward_calls(counted, "scaled_tanh", inputs={"x": (32, 32)}, mode="full")
    assert result.status == "passed"
    assert calls < 0.05 * 2 * elements


def test_full_mode_still_works_where_it_cannot_batch(counted: Any) -> None:
    elements = 6 * 5
    settings = {"inputs": {"x": (6, 5)}, "mode": "full", "execution": "eager", "reference": "numeric"}
    calls, result = _forward_calls(counted, "column_sums_numpy", **settings)
    assert result.status == "passed", result.problems
    assert calls >= elements
    verbose = gradcheck.check(counted.column_sums_numpy, **settings)
    assert any("one perturbation at a time" in note for note in verbose.notes)


def test_full_mode_localises_a_bug_when_batched(counted: Any) -> None:
    result = gradcheck.check(counted.scaled_tanh_wrong, inputs={"x": (8, 8)}, mode="full")
    numeric = next(p for p in result.problems if p.check == "numeric")
    assert numeric.worst_index is not None and numeric.max_abs_error > 0.1


def test_fast_and_full_mode_agree_on_every_core_fixture(tmp_path: Path) -> None:
    core = copy_fixture("core", tmp_path)
    args = (str(core / "core_ops.py"), "-c", str(core / "gradcheck.toml"))
    fast = by_name(run_json(*args))
    full = by_name(run_json(*args, "--mode", "full"))
    assert set(fast) == set(full)
    for name in fast:
        assert fast[name]["status"] == full[name]["status"], name
        assert {(p["check"], p["input"]) for p in fast[name]["problems"]} == {
            (p["check"], p["input"]) for p in full[name]["problems"]
        }, name


def test_each_function_is_traced_once_per_shape(counted: Any) -> None:
    # Three draws (a redraw is forced by the kink-free function passing at once, so
    # use several checks of one shape instead): the traced function is reused.
    counted.CALLS["scaled_tanh"] = 0
    gradcheck.check(counted.scaled_tanh, inputs={"x": (5,)}, execution="function", reference="none")
    traced_once = counted.CALLS["scaled_tanh"]
    counted.CALLS["scaled_tanh"] = 0
    gradcheck.check(counted.scaled_tanh, inputs={"x": (5,)}, execution="eager", reference="none")
    eager_only = counted.CALLS["scaled_tanh"]
    assert traced_once - eager_only <= 1


def test_no_retracing_warnings_across_many_functions(counted: Any, caplog: pytest.LogCaptureFixture) -> None:
    _tf.set_verbose(True)  # let TensorFlow's own warnings through, as -v does
    try:
        with caplog.at_level(logging.WARNING):
            for size in range(3, 11):
                gradcheck.check(counted.scaled_tanh, inputs={"x": (size,)})
    finally:
        _tf.set_verbose(False)
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]


def test_huge_jacobians_fall_back_to_projections(counted: Any) -> None:
    result = gradcheck.check(counted.scaled_tanh, inputs={"x": (200, 200)}, mode="full")
    assert result.status == "passed"
    assert any("Jacobian" in note and "random projections" in note for note in result.notes)


def test_fixture_folder_exists() -> None:
    assert (FIXTURES / "perf" / "counted_ops.py").is_file()
