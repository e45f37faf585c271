"""The instrumented harness and its batched losses, against TensorFlow itself."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from gradcheck import compare
from gradcheck.finite_differences import Perturbations
from gradcheck.first_pass import first_pass
from gradcheck.harness import Harness
from gradcheck.inputs import Argument, CallPlan, TensorSpec, tensor_argument
from gradcheck.loss import Draw
from gradcheck.targets import FunctionTarget
from tests.helpers import directional_derivative

tf = pytest.importorskip("tensorflow")


def _plan(**shapes: tuple[int, ...]) -> CallPlan:
    return CallPlan(
        arguments=tuple(
            Argument(name=n, role="input", spec=TensorSpec(shape=s, dtype="float64")) for n, s in shapes.items()
        )
    )


def _started(target: Any, plan: CallPlan, values: dict[str, Any], upstreams: list[np.ndarray] | None = None) -> Harness:
    """A harness built from its first forward pass at ``values``; with ``upstreams``, native autodiff at that
    draw computed from the pass's own tape."""
    made = None if upstreams is None else (lambda _specs: upstreams)
    return Harness(target, plan, first_pass(target, plan, values, upstreams=made, native=upstreams is not None))


def test_harness_records_what_the_backward_returned() -> None:
    @tf.custom_gradient
    def f(x, w):
        def grad(dy):
            return dy * w, tf.reduce_sum(dy * x)

        return x * w, grad

    values = {"x": np.arange(3.0), "w": np.ones(3)}
    harness = _started(FunctionTarget(f.__wrapped__), _plan(x=(3,), w=(3,)), values)
    for execution in ("eager", "function"):
        outcome = harness.custom(Draw(values, [np.ones(3)]), execution)
        assert outcome.ok
        assert outcome.record.calls == 1
        assert [(g.kind, g.shape, g.dtype) for g in outcome.record.returned] == [
            ("tensor", (3,), "float64"),
            ("tensor", (), "float64"),
        ]
    native = harness.native(Draw(values, [np.ones(3)]))
    assert np.allclose(native.grads["w"], np.arange(3.0))


def test_harness_traces_tf_function_once() -> None:
    traces = []

    @tf.custom_gradient
    def f(x):
        traces.append(1)

        def grad(dy):
            return 2.0 * dy

        return 2.0 * x, grad

    harness = _started(FunctionTarget(f.__wrapped__), _plan(x=(4,)), {"x": np.zeros(4)})
    traces.clear()
    for seed in range(3):
        values = {"x": np.random.default_rng(seed).standard_normal(4)}
        assert harness.custom(Draw(values, [np.ones(4)]), "function").ok
    assert len(traces) == 1


def test_projection_of_custom_gradient_matches_finite_differences() -> None:
    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return dy * tf.cos(x)

        return tf.sin(x), grad

    x = np.linspace(-1, 1, 5)
    upstream = [np.arange(1.0, 6.0)]
    harness = _started(FunctionTarget(f.__wrapped__), _plan(x=(5,)), {"x": x})
    custom = harness.custom(Draw({"x": x}, upstream), "eager").grads["x"]
    direction = np.random.default_rng(0).standard_normal(5)
    estimate = directional_derivative(harness.losses(Draw({"x": x}, upstream)), "x", direction, 6e-6, "float64")
    verdict = compare.compare_projection(
        custom, direction, estimate.value, estimate.error, compare.tolerance("float64", "numeric")
    )
    assert verdict.ok and verdict.conclusive


def test_batched_losses_leave_no_reference_cycles() -> None:
    """A cycle through a batch of perturbed inputs keeps it alive until the cyclic collector runs:
    gigabytes of stale batches in full mode before this was fixed."""
    import gc

    @tf.custom_gradient
    def f(A, W):
        def grad(dy):
            return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)

        return tf.matmul(A, W), grad

    rng = np.random.default_rng(0)
    values = {"A": rng.standard_normal((8, 8)), "W": rng.standard_normal((8, 8))}
    harness = _started(FunctionTarget(f.__wrapped__), _plan(A=(8, 8), W=(8, 8)), values)
    losses = harness.losses(Draw(values, [rng.standard_normal((8, 8))]))
    stack = Perturbations.sparse((8, 8), np.arange(4), np.arange(4), np.full(4, 1e-3), 4)
    losses("A", stack)  # chooses and caches the batching strategy
    assert harness.batching["A"][0] == "stack"
    gc.collect()
    gc.disable()
    try:
        losses("A", stack)
        assert gc.collect() == 0
    finally:
        gc.enable()


def _sin_harness(function):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    values = {"x": rng.standard_normal(6)}
    upstreams = [rng.standard_normal(6)]
    harness = _started(FunctionTarget(function), _plan(x=(6,)), values)
    return harness, values, upstreams


def _directed(rows: int) -> Perturbations:
    rng = np.random.default_rng(6)
    return Perturbations.along_directions(
        rng.standard_normal((1, 6)), np.zeros(rows, dtype=int), np.linspace(-1e-3, 1e-3, rows)
    )


def test_strategy_is_chosen_on_the_first_stack_of_several_rows() -> None:
    def f(x):
        return tf.sin(x), None

    harness, values, upstreams = _sin_harness(f)
    stack = _directed(5)
    totals, scales = harness.losses(Draw(values, upstreams))("x", stack)
    assert harness.batching["x"] == ("stack", "")
    expected = [harness.loss(Draw({"x": values["x"] + stack.row(i)}, upstreams)) for i in range(5)]
    assert np.allclose(totals, [t for t, _ in expected], rtol=1e-13, atol=0)
    assert scales[0] == pytest.approx(expected[0][1], rel=1e-13)


def test_a_function_that_mixes_the_rows_of_a_stack_is_not_stacked() -> None:
    def f(x):  # a cumulative sum over the leading axis: harmless for one x, mixes a stack's rows
        return tf.sin(tf.cumsum(x)), None

    harness, values, upstreams = _sin_harness(f)
    stack = _directed(5)
    totals, _ = harness.losses(Draw(values, upstreams))("x", stack)
    assert harness.batching["x"][0] != "stack"
    expected = [harness.loss(Draw({"x": values["x"] + stack.row(i)}, upstreams))[0] for i in range(5)]
    assert np.allclose(totals, expected, rtol=1e-12, atol=0)


def test_a_frozen_draw_is_converted_to_a_tensor_once() -> None:
    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return 2.0 * dy * x

        return x * x, grad

    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    harness = _started(FunctionTarget(f.__wrapped__), _plan(x=(3,)), {"x": frozen})
    assert harness.as_tensors({"x": frozen})["x"] is harness.as_tensors({"x": frozen})["x"]
    # An array that can still change is converted each time: its contents may not be what they were.
    writable = np.arange(3.0)
    first = harness.as_tensors({"x": writable})["x"]
    writable[0] = 7.0
    assert float(harness.as_tensors({"x": writable})["x"][0]) == 7.0
    assert float(first[0]) == 0.0


def test_native_autodiff_leaves_the_center_of_the_finite_differences_behind() -> None:
    calls = []

    def forward(x):
        calls.append(1)

        def grad(dy):
            return 2.0 * dy * x

        return x * x, grad

    values = {"x": np.arange(3.0)}
    values["x"].flags.writeable = False
    upstreams = [np.ones(3)]
    harness = _started(FunctionTarget(forward), _plan(x=(3,)), values)
    calls.clear()
    harness.native(Draw(values, upstreams))
    assert harness.loss(Draw(values, upstreams)) == (5.0, 5.0)
    assert len(calls) == 1  # the loss reused native autodiff's forward pass
    moved = {"x": np.array([1.0, 1.0, 1.0])}
    moved["x"].flags.writeable = False
    assert harness.loss(Draw(moved, upstreams)) == (3.0, 3.0)
    assert len(calls) == 2


def _counted_square(calls: list[int]):
    def forward(x):
        calls.append(1)

        def grad(dy):
            return 2.0 * dy * x

        return x * x, grad

    return forward


def test_native_autodiff_at_the_first_draw_reuses_the_first_forward_pass() -> None:
    calls: list[int] = []
    values = {"x": np.arange(3.0)}
    values["x"].flags.writeable = False
    upstreams = [np.array([1.0, 2.0, 3.0])]
    harness = _started(FunctionTarget(_counted_square(calls)), _plan(x=(3,)), values, upstreams)
    native = harness.native(Draw(values, upstreams))
    assert len(calls) == 1
    assert np.array_equal(native.grads["x"], 2.0 * np.arange(3.0) * upstreams[0])
    # Native autodiff from the first pass's tape is given out once: again, it runs a forward pass of its own.
    again = harness.native(Draw(values, upstreams))
    assert len(calls) == 2
    assert np.array_equal(again.grads["x"], native.grads["x"])


@pytest.mark.parametrize("case", ["not kept", "other values", "writable"])
def test_the_first_forward_pass_is_not_reused_where_it_may_not_fit(case: str) -> None:
    calls: list[int] = []
    values = {"x": np.arange(3.0)}
    values["x"].flags.writeable = case == "writable"
    upstreams = [np.ones(3)]
    harness = _started(
        FunctionTarget(_counted_square(calls)), _plan(x=(3,)), values, None if case == "not kept" else upstreams
    )
    later = {"x": np.arange(3.0) + 1.0} if case == "other values" else values
    later["x"].flags.writeable = case == "writable"
    native = harness.native(Draw(later, upstreams))
    assert len(calls) == 2
    assert np.array_equal(native.grads["x"], 2.0 * later["x"])


def test_a_forward_pass_that_reads_variables_is_not_reused() -> None:
    """A forward pass may change the variables it reads; native autodiff runs at their values after it."""
    counter = tf.Variable(1.0, dtype=tf.float64)
    calls: list[int] = []

    def forward(x):
        calls.append(1)
        counter.assign_add(1.0)

        def grad(dy, variables=None):
            return dy * counter, [tf.reduce_sum(dy * x)]

        return x * counter, grad

    values = {"x": np.ones(2)}
    values["x"].flags.writeable = False
    upstreams = [np.ones(2)]
    harness = _started(FunctionTarget(forward), _plan(x=(2,)), values, upstreams)
    values.update(harness.variables.values())
    native = harness.native(Draw(values, upstreams))
    assert len(calls) == 2
    assert np.array_equal(native.grads["x"], np.full(2, 3.0))  # the value the second pass read


def test_the_kept_tape_differentiates_through_complex_arguments_built_from_their_parts() -> None:
    plan = CallPlan(arguments=(tensor_argument("z", TensorSpec(shape=(2,), dtype="complex128"), keyword=False),))
    rng = np.random.default_rng(0)
    values = {a.name: rng.standard_normal(2) for a in plan.differentiable}
    for array in values.values():
        array.flags.writeable = False
    upstreams = [rng.standard_normal(2) for _ in range(2)]
    harness = _started(
        FunctionTarget(lambda z: (z * z, lambda dy: dy * 2.0 * tf.math.conj(z))), plan, values, upstreams
    )
    kept = harness.native(Draw(values, upstreams))
    fresh = harness.native(Draw(values, upstreams))
    assert kept.grads.keys() == fresh.grads.keys() and len(kept.grads) == 2
    for name in kept.grads:
        assert np.allclose(kept.grads[name], fresh.grads[name]) and np.any(kept.grads[name] != 0)


def test_native_autodiff_from_the_first_pass_frees_its_tape_and_is_given_once_at_the_same_draw() -> None:
    calls: list[int] = []
    intermediates: list[weakref.ref] = []

    def forward(x):
        calls.append(1)
        inner = tf.exp(x)
        intermediates.append(weakref.ref(inner))

        def grad(dy):
            return dy * inner

        return tf.math.log(inner + 1.0), grad

    values = {"x": np.arange(3.0)}
    upstreams = [np.ones(3)]
    for array in (values["x"], upstreams[0]):
        array.flags.writeable = False
    harness = _started(FunctionTarget(forward), _plan(x=(3,)), values, upstreams)
    gc.collect()
    assert len(calls) == 1 and intermediates[0]() is None  # the tape and its intermediates are gone
    native = harness.native(Draw(values, upstreams))
    assert len(calls) == 1
    assert np.allclose(native.grads["x"], np.exp(np.arange(3.0)) / (np.exp(np.arange(3.0)) + 1.0))
    other = [np.ones(3)]  # equal, but another array: computed afresh
    assert np.array_equal(harness.native(Draw(values, other)).grads["x"], native.grads["x"])
    assert len(calls) == 2
