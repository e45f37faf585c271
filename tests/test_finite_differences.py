"""Finite differences on plain numpy losses with known derivatives: no TensorFlow anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradcheck.dtypes import EPSILON
from gradcheck.finite_differences import (
    BATCH_FLOATS,
    Perturbations,
    default_step,
    directional_derivatives,
    element_directions,
    finite_difference_gradient,
    joint_central_differences,
    one_at_a_time,
    richardson,
)
from tests.helpers import directional_derivative

REPO = Path(__file__).resolve().parent.parent


def _loss(function):  # type: ignore[no-untyped-def]
    def loss(values):  # type: ignore[no-untyped-def]
        value = function(values["x"])
        return float(np.sum(value)), float(np.sum(np.abs(value)))

    return loss


def test_step_is_cbrt_of_machine_epsilon() -> None:
    assert default_step("float64") == pytest.approx(6.06e-6, rel=1e-2)
    assert default_step("float32") == pytest.approx(4.9e-3, rel=1e-2)


def test_directional_derivative_of_a_cubic_is_accurate() -> None:
    x = np.array([0.3, -1.2, 2.0])
    direction = np.array([1.0, 0.5, -2.0])
    losses = one_at_a_time(_loss(lambda v: v**3), {"x": x})
    estimate = directional_derivative(losses, "x", direction, 1e-3, "float64")
    assert estimate.value == pytest.approx(float(np.sum(3 * x**2 * direction)), rel=1e-9)
    assert estimate.error < 1e-4


def test_relative_step_handles_large_inputs() -> None:
    """A fixed absolute step drowns in rounding at |x| ~ 1e5; scaling it by |x| does not."""
    x = np.array([3.0e4, 7.0e4, 1.0e5])
    scale = np.maximum(1.0, np.abs(x))
    losses = one_at_a_time(_loss(lambda v: v**3), {"x": x})
    gradient, _, _ = finite_difference_gradient(losses, x, "x", scale, default_step("float64"), "float64", False)
    assert np.allclose(gradient, 3 * x**2, rtol=1e-7)
    fixed, _, _ = finite_difference_gradient(losses, x, "x", np.ones(3), 1e-9, "float64", False)
    assert not np.allclose(fixed, 3 * x**2, rtol=1e-5)


def test_symmetric_inputs_are_perturbed_in_pairs() -> None:
    groups = element_directions((3, 3), symmetric=True)
    assert len(groups) == 6
    assert ((0, 1), (1, 0)) in groups and ((2, 2),) in groups
    # A function of the lower triangle only: the symmetric estimate is the symmetric part.
    x = np.array([[2.0, 0.3, 0.1], [0.3, 3.0, 0.2], [0.1, 0.2, 4.0]])
    weights = np.tril(np.arange(1.0, 10.0).reshape(3, 3))
    losses = one_at_a_time(_loss(lambda v: np.sum(weights * v, keepdims=True)), {"x": x})
    gradient, _, _ = finite_difference_gradient(losses, x, "x", np.ones((3, 3)), 1e-4, "float64", True)
    assert np.allclose(gradient, 0.5 * (weights + weights.T))


def test_the_module_imports_and_computes_with_tensorflow_unimportable(tmp_path: Path) -> None:
    probe = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tensorflow' or name.startswith('tensorflow.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np\n"
        "from gradcheck import finite_differences as fd\n"
        "x = np.array([0.5, 1.5])\n"
        "losses = fd.one_at_a_time(lambda v: (float(np.sum(v['x'] ** 2)), 1.0), {'x': x})\n"
        "gradient, _, _ = fd.finite_difference_gradient(losses, x, 'x', np.ones(2), 1e-3, 'float64', False)\n"
        "print(np.round(gradient, 6).tolist(), 'tensorflow' in sys.modules, 'gradcheck._tf' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1.0, 3.0] False False"


def _sum_of(function):  # type: ignore[no-untyped-def]
    """A loss ``sum(function(x))`` with its rounding scale, over the one input ``x``."""

    def loss(values):  # type: ignore[no-untyped-def]
        value = function(values["x"])
        return float(np.sum(value)), float(np.sum(np.abs(value)))

    return loss


@pytest.mark.parametrize(
    ("function", "derivative"),
    [
        (lambda v: v**4 - 2 * v**2 + v, lambda v: 4 * v**3 - 4 * v + 1),
        (np.exp, np.exp),
        (np.sin, np.cos),
    ],
    ids=["polynomial", "exp", "sin"],
)
def test_whole_gradient_of_known_functions_lies_within_its_bound(function, derivative) -> None:  # type: ignore[no-untyped-def]
    x = np.linspace(-1.3, 1.7, 7)
    scale = np.maximum(1.0, np.abs(x))
    losses = one_at_a_time(_sum_of(function), {"x": x})
    gradient, error, evaluations = finite_difference_gradient(
        losses, x, "x", scale, default_step("float64"), "float64", False
    )
    exact = derivative(x)
    assert np.all(np.abs(gradient - exact) <= error)
    assert np.allclose(gradient, exact, rtol=1e-8, atol=1e-10)
    assert np.all(error < 1e-6)
    assert evaluations == 1 + 4 * x.size


@pytest.mark.parametrize(("function", "derivative"), [(np.exp, np.exp), (np.sin, np.cos)], ids=["exp", "sin"])
def test_directional_derivative_of_known_functions(function, derivative) -> None:  # type: ignore[no-untyped-def]
    x = np.array([0.2, -0.7, 1.1, 2.5])
    direction = np.random.default_rng(3).standard_normal(4)
    losses = one_at_a_time(_sum_of(function), {"x": x})
    estimate = directional_derivative(losses, "x", direction, default_step("float64"), "float64")
    exact = float(np.sum(derivative(x) * direction))
    assert abs(estimate.value - exact) <= estimate.error
    assert estimate.value == pytest.approx(exact, rel=1e-9)
    assert estimate.evaluations == 5


def test_the_bound_tells_a_wrong_gradient_from_the_right_one() -> None:
    """A backward function that returned 2 cos(x) for sin is further off than the bound allows."""
    x = np.array([0.4, -1.0, 2.2])
    direction = np.array([0.3, 1.0, -0.8])
    losses = one_at_a_time(_sum_of(np.sin), {"x": x})
    estimate = directional_derivative(losses, "x", direction, default_step("float64"), "float64")
    right = float(np.sum(np.cos(x) * direction))
    wrong = float(np.sum(np.cos(x) * direction * (1 + 1e-4)))  # off by a relative 1e-4 only
    assert abs(estimate.value - right) <= estimate.error
    assert abs(estimate.value - wrong) > estimate.error


def test_a_kink_between_the_steps_widens_the_bound() -> None:
    """|x| at 0: both central differences see the same ramp, so only the kink detector notices."""
    x = np.array([0.0])
    losses = one_at_a_time(_sum_of(lambda v: np.abs(v) + 3.0 * v), {"x": x})
    estimate = directional_derivative(losses, "x", np.ones(1), 1e-3, "float64")
    assert estimate.value == pytest.approx(3.0)  # the mean of the one-sided slopes 2 and 4
    assert estimate.error >= 1.0  # the slope jumps by 2: no derivative to trust here
    smooth = one_at_a_time(_sum_of(lambda v: v**2 + 3.0 * v), {"x": x})
    assert directional_derivative(smooth, "x", np.ones(1), 1e-3, "float64").error < 1e-9


def test_richardson_cancels_the_second_order_term_and_bounds_the_rest() -> None:
    """For a cubic, Richardson extrapolation of central differences at h and 2h is exact."""
    step = 0.1
    cubic = lambda t: 2.0 * t**3 - t**2 + 5.0 * t + 1.0  # noqa: E731
    points = [np.array([cubic(t)]) for t in (0.0, step, -step, 2 * step, -2 * step)]
    estimate, error = richardson(points[0], np.array([1.0]), *points[1:], step, "float64")
    assert estimate[0] == pytest.approx(5.0, rel=1e-12)
    near = (cubic(step) - cubic(-step)) / (2 * step)
    far = (cubic(2 * step) - cubic(-2 * step)) / (4 * step)
    assert error[0] >= abs(near - far)  # the truncation part: the two step sizes disagree by 6 h^2
    assert abs(near - 5.0) <= error[0]


def test_the_rounding_term_grows_with_the_loss_scale_and_the_dtype() -> None:
    flat = np.array([1.0])
    _, small = richardson(flat, np.array([1.0]), flat, flat, flat, flat, 1e-3, "float64")
    _, large = richardson(flat, np.array([1e6]), flat, flat, flat, flat, 1e-3, "float64")
    _, single = richardson(flat, np.array([1.0]), flat, flat, flat, flat, 1e-3, "float32")
    assert small[0] == pytest.approx(16.0 * EPSILON["float64"] / 1e-3)
    assert large[0] == pytest.approx(1e6 * small[0])
    assert single[0] == pytest.approx(small[0] * EPSILON["float32"] / EPSILON["float64"])


def test_a_loss_that_is_not_finite_gives_no_estimate_and_no_bound() -> None:
    x = np.array([0.0, 1.0])
    losses = one_at_a_time(_sum_of(lambda v: np.log(v)), {"x": x})  # log(0) = -inf
    with np.errstate(divide="ignore", invalid="ignore"):
        gradient, error, _ = finite_difference_gradient(losses, x, "x", np.ones(2), 1e-4, "float64", False)
    assert np.isnan(gradient[0]) and error[0] == np.inf
    assert np.isnan(gradient[1]) and error[1] == np.inf  # the loss sums both elements


def test_accept_skips_the_careful_pass_for_confirmed_elements() -> None:
    x = np.array([0.3, -0.6, 1.2, 0.9])
    losses = one_at_a_time(_sum_of(np.exp), {"x": x})
    step = default_step("float64")
    everything, _, everything_evaluations = finite_difference_gradient(
        losses, x, "x", np.ones(4), step, "float64", False, accept=lambda g, e: np.ones(g.shape, dtype=bool)
    )
    assert everything_evaluations == 1 + 4  # one forward difference per element, nothing refined
    assert np.allclose(everything, np.exp(x), rtol=1e-6)
    refined = np.array([False, True, False, True])
    gradient, error, evaluations = finite_difference_gradient(
        losses, x, "x", np.ones(4), step, "float64", False, accept=lambda g, e: ~refined
    )
    assert evaluations == 1 + 4 + 4 * 2
    assert np.all(np.abs(gradient - np.exp(x)) <= error)
    assert np.all(error[refined] < error[~refined])  # refined elements carry the tighter, Richardson bound


def test_large_inputs_are_evaluated_in_bounded_stacks() -> None:
    size = 3000
    per_batch = BATCH_FLOATS // (4 * size)
    x = np.linspace(-1.0, 1.0, size)
    seen: list[int] = []
    loop = one_at_a_time(_sum_of(np.sin), {"x": x})

    def losses(name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
        seen.append(perturbations.count)
        return loop(name, perturbations)

    gradient, _, evaluations = finite_difference_gradient(losses, x, "x", np.ones(size), 1e-3, "float64", False)
    assert seen[0] == 1  # the center
    assert max(seen[1:]) == 4 * per_batch and sum(seen[1:]) == 4 * size
    assert evaluations == 1 + 4 * size
    assert np.allclose(gradient, np.cos(x), rtol=1e-7)


def test_sparse_and_dense_perturbations_agree() -> None:
    base = np.arange(6.0).reshape(2, 3)
    rows = np.array([0, 1, 1, 2])
    elements = np.array([5, 0, 4, 2])
    amounts = np.array([0.5, -1.0, 2.0, 0.25])
    sparse = Perturbations.sparse((2, 3), rows, elements, amounts, 3)
    dense = Perturbations.from_dense(np.stack([sparse.row(i) for i in range(3)]))
    assert not sparse.dense and dense.dense
    assert np.array_equal(sparse.apply(base), dense.apply(base))
    assert np.array_equal(sparse.apply(base, 1, 3), dense.apply(base, 1, 3))
    moved_rows, moved_elements, moved_amounts = sparse.moves(1, 3)
    assert moved_rows.tolist() == [0, 0, 1] and moved_elements.tolist() == [0, 4, 2]
    assert moved_amounts.tolist() == [-1.0, 2.0, 0.25]
    assert sparse.row(1).reshape(-1).tolist() == [-1.0, 0, 0, 0, 2.0, 0]


def test_one_at_a_time_leaves_the_values_alone() -> None:
    x = np.array([1.0, 2.0])
    values = {"x": x, "k": 3.0}
    losses = one_at_a_time(lambda v: (float(np.sum(v["x"]) * v["k"]), 0.0), values)
    totals, scales = losses("x", Perturbations.from_dense(np.array([[0.0, 0.0], [1.0, 0.0]])))
    assert totals.tolist() == [9.0, 12.0] and scales.tolist() == [0.0, 0.0]
    assert values["x"] is x and x.tolist() == [1.0, 2.0]
    empty = losses("x", Perturbations.from_dense(np.zeros((0, 2))))
    assert empty[0].shape == (0,) and empty[1].shape == (0,)


def test_symmetric_groups_cover_each_pair_once() -> None:
    groups = element_directions((2, 3, 3), symmetric=True)
    assert len(groups) == 2 * 6
    assert ((1, 0, 2), (1, 2, 0)) in groups and ((1, 2, 2),) in groups
    assert len(element_directions((2, 3), symmetric=False)) == 6
    assert element_directions((4,), symmetric=True) == [((i,),) for i in range(4)]


def test_directions_along_perturbations_agree_with_dense_rows() -> None:
    rng = np.random.default_rng(3)
    base = rng.standard_normal((2, 3))
    directions = rng.standard_normal((2, 2, 3))
    which = np.array([0, 0, 1, 1, 0])
    steps = np.array([0.0, 1e-3, -1e-3, 2e-3, -2e-3])
    along = Perturbations.along_directions(directions, which, steps)
    dense = Perturbations.from_dense(np.stack([step * directions[w] for w, step in zip(which, steps)]))
    assert along.directed and not along.dense and along.count == 5
    # Exactly the same floats: base + step * direction, whichever way the stack is built.
    assert np.array_equal(along.apply(base), dense.apply(base))
    assert np.array_equal(along.apply(base, 1, 4), dense.apply(base, 1, 4))
    out = np.empty((2, 2, 3))
    assert along.apply(base, 3, 5, out=out) is out and np.array_equal(out, dense.apply(base, 3, 5))
    assert all(np.array_equal(along.row(i), dense.row(i)) for i in range(5))


def test_directional_derivatives_share_one_stack_and_its_center() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal(5)
    directions = [rng.standard_normal(5) for _ in range(3)]
    loop = one_at_a_time(_loss(np.sin), {"x": x})
    counts: list[int] = []

    def losses(name: str, perturbations: Perturbations) -> tuple[np.ndarray, np.ndarray]:
        counts.append(perturbations.count)
        return loop(name, perturbations)

    together = directional_derivatives(losses, "x", directions, 1e-4, "float64")
    assert counts == [1 + 4 * 3]
    assert [e.evaluations for e in together] == [5, 4, 4]
    # The same estimates and bounds, to the bit, as one stack of five points per direction.
    for direction, estimate in zip(directions, together):
        alone = directional_derivative(loop, "x", direction, 1e-4, "float64")
        assert (estimate.value, estimate.error) == (alone.value, alone.error)
        assert estimate.value == pytest.approx(float(np.dot(np.cos(x), direction)), rel=1e-8)


def _two_input_loss(values):  # type: ignore[no-untyped-def]
    x, w = values["x"], values["w"]
    products = np.sin(x) * w
    return float(np.sum(products)), float(np.sum(np.abs(products)))


def test_joint_central_differences_estimate_the_sum_of_the_projections() -> None:
    rng = np.random.default_rng(3)
    values = {"x": rng.standard_normal((4, 3)), "w": rng.standard_normal((4, 3))}
    gradients = {"x": np.cos(values["x"]) * values["w"], "w": np.sin(values["x"])}
    directions = [{n: rng.standard_normal((4, 3)) for n in values} for _ in range(2)]
    found = joint_central_differences(_two_input_loss, values, directions, default_step("float64"), "float64")
    for direction, estimate, curvature in zip(directions, found.values, found.curvature):
        projected = sum(float(np.sum(gradients[n] * direction[n])) for n in values)
        assert estimate == pytest.approx(projected, rel=1e-8)
        assert curvature < 1e-4  # O(h) on a smooth loss
    assert 0 < found.rounding < 1e-8


def test_joint_central_differences_see_a_wrong_part_of_the_gradient() -> None:
    rng = np.random.default_rng(4)
    values = {"x": rng.standard_normal(5), "w": rng.standard_normal(5)}
    direction = {n: rng.standard_normal(5) for n in values}
    found = joint_central_differences(_two_input_loss, values, [direction], default_step("float64"), "float64")
    wrong_w = 2.0 * np.sin(values["x"])  # the gradient of w off by a factor of two
    projected = float(np.sum(np.cos(values["x"]) * values["w"] * direction["x"]) + np.sum(wrong_w * direction["w"]))
    assert abs(found.values[0] - projected) > 1e-3


def test_joint_central_differences_mark_a_non_finite_loss() -> None:
    def loss(values):  # type: ignore[no-untyped-def]
        with np.errstate(invalid="ignore"):
            value = np.log(values["x"])
        return float(np.sum(value)), float(np.sum(np.abs(value)))

    found = joint_central_differences(
        loss, {"x": np.array([1e-7, 1.0])}, [{"x": np.array([-1.0, 0.0])}], 1e-5, "float64"
    )
    assert np.isnan(found.values[0]) and np.isinf(found.curvature[0])


def test_joint_central_differences_evaluate_the_center_once() -> None:
    points = []

    def loss(values):  # type: ignore[no-untyped-def]
        points.append(values["x"].copy())
        return float(np.sum(values["x"] ** 2)), 1.0

    directions = [{"x": np.ones(3)}, {"x": np.arange(3.0)}]
    joint_central_differences(loss, {"x": np.zeros(3)}, directions, 1e-3, "float64")
    assert len(points) == 1 + 2 * len(directions)
