"""Call plans and seeded draws (numpy only)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from gradcheck.config import InputConfig, SubjectConfig
from gradcheck.errors import ConfigError
from gradcheck.inputs import TensorSpec, candidate_shapes, plan_call
from gradcheck.sampling import draw_tensor, subject_rng


def _signature(source: str) -> inspect.Signature:
    namespace: dict = {}
    exec(source, namespace)
    return inspect.signature(namespace["f"])


def test_plan_maps_inputs_constants_and_defaults() -> None:
    signature = _signature("def f(x, w, axis, scale=2.0, *, flag=False): pass")
    table = SubjectConfig(
        inputs={"x": InputConfig(shape=("N", 3)), "w": InputConfig(shape=(3,))},
        constants={"axis": 1},
    )
    plan = plan_call(signature, table, {"N": 4}, "float64", "cfg", "functions.f")
    assert [(a.name, a.role) for a in plan.arguments] == [("x", "input"), ("w", "input"), ("axis", "constant")]
    assert plan.arguments[0].spec == TensorSpec(shape=(4, 3), dtype="float64")
    assert plan.unknown == ()


def test_plan_lists_unconfigured_required_arguments() -> None:
    plan = plan_call(_signature("def f(x, y, z=1): pass"), None, {}, "float32", "cfg", "functions.f")
    assert plan.unknown == ("x", "y")
    filled = plan.with_specs({"x": TensorSpec((3, 4), "float32"), "y": TensorSpec((4,), "float32")})
    assert [a.spec.shape for a in filled.arguments] == [(3, 4), (4,)]
    assert all(a.guessed for a in filled.arguments)


def test_skipped_defaults_are_passed_to_keep_positions() -> None:
    table = SubjectConfig(inputs={"b": InputConfig(shape=(2,))})
    plan = plan_call(_signature("def f(x, a=5, b=None): pass"), table, {}, "float64", "cfg", "functions.f")
    assert [(a.name, a.role) for a in plan.arguments] == [("x", "input"), ("a", "constant"), ("b", "input")]
    assert plan.arguments[1].value == 5


def test_plan_rejects_unknown_argument_names() -> None:
    table = SubjectConfig(inputs={"X": InputConfig(shape=(2,))})
    with pytest.raises(
        ConfigError, match=r"cfg: functions.f.inputs.X: the function has no argument 'X' \(did you mean 'x'\?\)"
    ):
        plan_call(_signature("def f(x): pass"), table, {}, "float64", "cfg", "functions.f")


def test_integer_inputs_are_not_differentiated() -> None:
    table = SubjectConfig(inputs={"i": InputConfig(shape=(3,), distribution="integer", high=5)})
    plan = plan_call(_signature("def f(i): pass"), table, {}, "float64", "cfg", "functions.f")
    assert plan.arguments[0].role == "integer" and plan.arguments[0].spec.dtype == "int32"
    assert plan.differentiable == ()


def test_draws_are_reproducible_and_per_function() -> None:
    spec = TensorSpec(shape=(5,), dtype="float64")
    first = draw_tensor(spec, subject_rng(0, "f"))
    assert np.array_equal(first, draw_tensor(spec, subject_rng(0, "f")))
    assert not np.array_equal(first, draw_tensor(spec, subject_rng(1, "f")))
    assert not np.array_equal(first, draw_tensor(spec, subject_rng(0, "g")))
    assert not np.array_equal(first, draw_tensor(spec, subject_rng(0, "f", draw=1)))


@pytest.mark.parametrize("distribution", ["uniform", "positive", "integer"])
def test_bounded_distributions(distribution: str) -> None:
    low, high = (2.0, 3.0) if distribution != "integer" else (2.0, 6.0)
    spec = TensorSpec(
        shape=(200,),
        dtype="int32" if distribution == "integer" else "float64",
        distribution=distribution,
        low=low,
        high=high,
    )
    values = draw_tensor(spec, subject_rng(0, "f"))
    assert values.min() >= low and values.max() < high


def test_spd_draws_are_symmetric_positive_definite() -> None:
    values = draw_tensor(TensorSpec(shape=(2, 5, 5), dtype="float64", distribution="spd"), subject_rng(0, "f"))
    assert np.allclose(values, np.swapaxes(values, -1, -2))
    assert np.all(np.linalg.eigvalsh(values) > 0)


def test_candidate_shapes_start_non_square_and_include_a_matmul_chain() -> None:
    candidates = list(candidate_shapes(("A", "W")))
    assert candidates[0] == {"A": (3, 4), "W": (3, 4)}
    assert {"A": (3, 4), "W": (4, 5)} in candidates
    assert {"A": (), "W": ()} in candidates
    assert len(candidates) == len({tuple(c.items()) for c in candidates})
