"""The audit as pure functions: hand-built records in, problems (and what later stages need) out. No TensorFlow."""

from __future__ import annotations

import numpy as np

from gradcheck.checking import audit, executions
from gradcheck.inputs import Argument, CallPlan, TensorSpec
from gradcheck.instrument import BackwardRecord, Outcome, ReturnedGradient
from gradcheck.kinds import kind_named

PLAN = CallPlan(
    (
        Argument("x", "input", TensorSpec((4, 3), "float64")),
        Argument("w", "input", TensorSpec((3,), "float64")),
        Argument("axis", "constant", value=1, has_default=True),
    )
)
SUBJECT = audit.Audited(name="op", kind=kind_named("function"), path=None, plan=PLAN)


def tensor(shape: tuple[int, ...], dtype: str = "float64") -> ReturnedGradient:
    return ReturnedGradient("tensor", shape, dtype, "Tensor")


NONE = ReturnedGradient("none", None, None, "NoneType")


def record(*returned: ReturnedGradient, calls: int = 1) -> BackwardRecord:
    return BackwardRecord(function="op", calls=calls, returned=list(returned), phase="backward-done")


def test_a_right_return_has_no_problems() -> None:
    found = audit.audit(SUBJECT, Outcome("eager", [record(tensor((4, 3)), tensor((3,)), NONE)], grads={}))
    assert found.problems == [] and found.not_tensors == frozenset()


def test_count_asks_for_none_for_the_constant() -> None:
    [problem] = audit.audit_returned(SUBJECT, record(tensor((4, 3)), tensor((3,)))).problems
    assert (problem.check, problem.expected, problem.got) == ("count", "3", "2")
    assert problem.hint == "return None for the constant axis too"


def test_a_missing_sum_over_a_broadcast_axis_is_a_shape_problem_with_its_hint() -> None:
    [problem] = audit.audit_returned(SUBJECT, record(tensor((4, 3)), tensor((4, 3)), NONE)).problems
    assert (problem.check, problem.input, problem.expected, problem.got) == ("shape", "w", "(3,)", "(4, 3)")
    assert "broadcast axis 0" in (problem.hint or "")


def test_dtype_and_a_gradient_for_the_constant() -> None:
    found = audit.audit_returned(SUBJECT, record(tensor((4, 3), "float32"), tensor((3,)), tensor(())))
    assert [(p.check, p.input) for p in found.problems] == [("dtype", "x"), ("count", "axis")]


def test_a_gradient_that_is_no_tensor_is_returned_for_value_checks_to_skip() -> None:
    other = ReturnedGradient("other", None, None, "str")
    found = audit.audit_returned(SUBJECT, record(other, tensor((3,)), NONE))
    assert found.not_tensors == frozenset({"x"})
    assert [(p.check, p.input) for p in found.problems] == [("dtype", "x")]


def test_a_backward_function_never_called_means_native_autodiff_ran() -> None:
    [problem] = audit.grad_fn_called(PLAN, [record(calls=0)])
    assert problem.got == "backward not called" and problem.expected == "3 gradients"
    assert audit.grad_fn_called(PLAN, [record()]) == []
    wrapper = audit.Audited(name="op", kind=kind_named("wrapper"), path=None, plan=PLAN, wrapper=True)
    assert audit.audit(wrapper, Outcome("eager", [], grads={})).problems == []


def test_keyword_tensors_are_problems() -> None:
    plan = CallPlan((Argument("x", "input", TensorSpec((3,), "float64"), keyword=True),))
    [problem] = audit.keyword_problems(plan)
    assert (problem.check, problem.input, problem.got) == ("count", "x", "keyword argument")


def test_merge_keeps_common_problems_once_and_tags_the_others() -> None:
    [common] = audit.audit_returned(SUBJECT, record(tensor((4, 3)), tensor((3,)))).problems
    [shape] = audit.audit_returned(SUBJECT, record(tensor((4, 3)), tensor((4, 3)), NONE)).problems
    merged = executions.merge_audits(PLAN, {"eager": [common, shape], "function": [common]}, "[functions.op]")
    assert [(p.check, p.execution) for p in merged] == [("count", None), ("shape", "eager")]


def test_a_raise_in_one_mode_only_is_an_execution_problem_with_its_cause() -> None:
    plan = CallPlan((Argument("x", "input", TensorSpec((3,), "float64")), Argument("n", "constant", value=2)))
    from gradcheck.results import Problem

    raised = Problem("exception", None, "backward function raised: TypeError: bad")
    [problem] = executions.merge_audits(plan, {"eager": [], "function": [raised]}, "[functions.op]")
    assert problem.check == "execution" and problem.execution == "function"
    assert "n=2 (becomes an int32 tensor)" in (problem.hint or "")


def test_variable_gradients_of_each_others_shape_are_named() -> None:
    class Variable:
        def __init__(self, name: str, shape: tuple[int, ...]) -> None:
            self.name = name
            self.shape = type("Shape", (), {"as_list": lambda _: list(shape)})()
            self.dtype = type("DType", (), {"name": "float64"})()

    a, b = Variable("a", (2, 3)), Variable("b", (3,))
    rec = BackwardRecord(variables=[a, b], variable_returned=[tensor((3,)), tensor((2, 3))])
    problems = audit.audit_variables(lambda v: v.name, rec)
    assert [(p.check, p.input) for p in problems] == [("variables", "a"), ("variables", "b")]
    assert "shape of b" in (problems[0].hint or "")
    rec = BackwardRecord(variables=[a, b], variable_returned=[tensor((2, 3))])
    [problem] = audit.audit_variables(lambda v: v.name, rec)
    assert (problem.expected, problem.got) == ("2", "1")


def test_a_misshapen_gradient_at_the_input_is_skipped_and_a_problem_where_nothing_explains_it() -> None:
    grads: dict[str, np.ndarray | None] = {"x": np.zeros(12), "w": np.zeros(3)}
    wrapper = audit.Audited(name="op", kind=kind_named("wrapper"), path=None, plan=PLAN, wrapper=True)
    found = audit.audit(wrapper, Outcome("eager", [], grads=grads))
    assert [(p.check, p.input, p.expected, p.got) for p in found.problems] == [("shape", "x", "(4, 3)", "(12,)")]
    assert found.misshapen == {"x": (12,)}
    explained = audit.audit_gradient_shapes(wrapper, grads, explained=True)
    assert explained.problems == [] and explained.misshapen == {"x": (12,)}
    right = audit.audit(wrapper, Outcome("eager", [], grads={"x": np.zeros((4, 3)), "w": None}))
    assert right.problems == [] and right.misshapen == {}


def test_tensorflows_refusal_of_a_gradients_shape_is_a_shape_problem() -> None:
    refusal = ValueError(
        "Incompatible shapes between op input and calculated input gradient. Forward operation: "
        "model/scale.v2/Identity. Input index: 0. Original input shape: (4, 3). Calculated input gradient shape: (12,)"
    )
    [problem] = audit.audit(SUBJECT, Outcome("function", [], error=refusal)).problems
    assert (problem.check, problem.expected, problem.got) == ("shape", "(4, 3)", "(12,)")
    assert "input 0 of the op model/scale.v2/Identity" in problem.message
    # Where the backward function's record shows the shape, its audit is the problem.
    recorded = audit.audit(SUBJECT, Outcome("function", [record(tensor((12,)), tensor((3,)), NONE)], error=refusal))
    assert [(p.check, p.input) for p in recorded.problems] == [("shape", "x")]


def test_eager_only_code_is_recognised_and_told_the_config_line() -> None:
    from gradcheck.checking.exceptions import exception_problem, needs_eager

    def asserts_eager() -> None:
        assert tf_executing_eagerly()

    def tf_executing_eagerly() -> bool:
        return False

    try:
        asserts_eager()
    except AssertionError as error:
        assert needs_eager(error)
    assert needs_eager(AttributeError("'SymbolicTensor' object has no attribute 'numpy'"))
    assert not needs_eager(AttributeError("'Tensor' object has no attribute 'nump'"))
    raised = exception_problem(
        "forward pass raised", AttributeError("'SymbolicTensor' object has no attribute 'numpy'"), None
    )
    assert raised.reason == "eager-only"
    [problem] = executions.merge_audits(PLAN, {"eager": [], "function": [raised]}, "gradcheck.toml: [functions.op]")
    assert problem.check == "execution"
    assert (problem.hint or "").endswith('add to gradcheck.toml: [functions.op] execution = "eager"')
