"""The reconciliation of evidence, row by row, and the evidence it is fed, built by hand. No TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from gradcheck.checking import evidence, refine, verdict
from gradcheck.checking.evidence import Evidence
from gradcheck.checking.verdict import MAX_DRAWS, Reconciled
from gradcheck.compare import ProjectionComparison, compare_elementwise, tolerance
from gradcheck.config import Settings
from gradcheck.harness import Source

A, D, N, U = Evidence.AGREES, Evidence.DISAGREES, Evidence.INCONCLUSIVE, Evidence.UNAVAILABLE
J, R = Reconciled.JUDGED, Reconciled.REDRAW

ROWS = [
    # native, numeric, before the last draw, at the last draw
    (A, A, J, J),
    (A, D, R, Reconciled.KINK),
    (A, N, R, Reconciled.NATIVE_VOUCHES),
    (A, U, J, J),
    (D, A, J, J),
    (D, D, J, J),
    (D, N, R, J),
    (D, U, J, J),
    (U, A, J, J),
    (U, D, J, J),
    (U, N, R, Reconciled.UNRELIABLE),
    (U, U, J, J),
]


@pytest.mark.parametrize(("native", "numeric", "before", "last"), ROWS)
def test_each_row_of_the_table(native: Evidence, numeric: Evidence, before: Reconciled, last: Reconciled) -> None:
    assert verdict.reconcile(native, numeric, last_draw=False) is before
    assert verdict.reconcile(native, numeric, last_draw=True) is last


def test_the_table_covers_every_pair_native_can_give() -> None:
    assert set(verdict.RECONCILE) == {(n, m) for n in (A, D, U) for m in Evidence}
    assert {(n, m) for n, m, _, _ in ROWS} == set(verdict.RECONCILE)


def test_evidence_from_a_comparison() -> None:
    assert evidence.evidence(True) is A and evidence.evidence(False) is D
    assert evidence.evidence(None) is N and evidence.evidence(True, available=False) is U


SOURCE = Source("x", (3,), "float64")
GOT = np.array([1.0, 2.0, 3.0])


def case(draw: int) -> evidence.GradientCase:
    return evidence.GradientCase(SOURCE, draw, {"x": np.zeros(3)}, GOT, losses=None, execution="eager", order=1)  # type: ignore[arg-type]


def context(reference: str = "both") -> evidence.JudgingContext:
    return evidence.JudgingContext(Settings(reference=reference), "op", float64_references=False, output_size=3)


def native(gradient: np.ndarray) -> evidence.NativeEvidence:
    comparison = compare_elementwise(GOT, gradient, tolerance("float64", "native"))
    return evidence.NativeEvidence(evidence.evidence(comparison.ok), gradient, comparison)


def projection(ok: bool, conclusive: bool = True) -> ProjectionComparison:
    return ProjectionComparison(ok, conclusive, 1.0, 1.0 if ok else 2.0, 0.0 if ok else 1.0, 0.0 if ok else 0.5)


def decide(native_evidence: evidence.NativeEvidence, numeric: evidence.NumericEvidence, draw: int) -> verdict.Verdict:
    return verdict.decide(context(), case(draw), native_evidence, numeric, [], native_ran=True)


def test_only_finite_differences_disagree_redraw_then_ask_about_kinks() -> None:
    numeric = evidence.NumericEvidence(D, projections=(projection(False),), native_projections=A)
    first = decide(native(GOT), numeric, draw=0)
    assert not first.final and [p.check for p in first.problems] == ["numeric"]
    last = decide(native(GOT), numeric, draw=MAX_DRAWS - 1)
    assert last.final and "is the forward pass differentiable" in (last.problems[0].hint or "")
    assert last.problems[0].worst_index is None  # the custom gradient equals native: nothing to locate


def test_unreliable_finite_differences_and_native_agreeing_pass_with_a_note() -> None:
    numeric = evidence.NumericEvidence(N, projections=(projection(True, conclusive=False),))
    last = decide(native(GOT), numeric, draw=MAX_DRAWS - 1)
    assert last.final and last.problems == [] and "native autodiff agrees" in last.notes[-1]


def test_unreliable_finite_differences_alone_are_a_problem() -> None:
    numeric = evidence.NumericEvidence(N, projections=(projection(True, conclusive=False),))
    last = decide(evidence.NativeEvidence(U), numeric, draw=MAX_DRAWS - 1)
    assert [p.message.split(" at every")[0] for p in last.problems] == [
        "finite differences were unreliable for the gradient of x"
    ]


def test_both_disagree_is_judged_at_once_and_native_locates_the_projection() -> None:
    wrong = 2 * GOT
    numeric = evidence.NumericEvidence(D, projections=(projection(False),), native_projections=A)
    result = decide(native(wrong), numeric, draw=0)
    assert result.final and [p.check for p in result.problems] == ["native", "numeric"]
    assert result.problems[1].worst_index == (2,)
    assert result.expected is not None and np.array_equal(result.expected, wrong)


def test_native_not_differentiable_here_is_set_aside() -> None:
    numeric = evidence.NumericEvidence(A, native_projections=D)
    settled, _, notes = refine.settle_native_disagreement(
        context(), case(0), native(2 * GOT), numeric, tolerance("float64", "numeric")
    )
    assert settled.verdict is U and "not differentiable by TensorFlow" in notes[0]


def test_full_mode_sets_native_aside_only_where_it_misses_the_finite_differences() -> None:
    tol = tolerance("float64", "numeric")
    whole = evidence.NumericEvidence(A, gradient=GOT.copy(), error=np.full(3, 1e-9))
    # No native path (a forward pass in numpy): native autodiff's zeros are no derivative of it.
    set_aside, notes = refine.native_off_the_derivative(case(0), native(np.zeros(3)), whole, tol)
    assert set_aside.verdict is U and "not differentiable by TensorFlow" in notes[0]
    # Native autodiff within the finite differences' reach of them stays evidence (it may still disagree).
    close = GOT + np.array([0.0, 0.0, 1e-5])
    kept, notes = refine.native_off_the_derivative(case(0), native(close), whole, tol)
    assert kept.verdict is D and notes == ()
    # Where some finite difference cannot tell (its error bound agrees with anything: a chaotic forward
    # pass), the custom gradient's agreement proves nothing, and native autodiff is not set aside.
    vague = evidence.NumericEvidence(A, gradient=GOT.copy(), error=np.array([1e-9, 1e-9, 100.0]))
    kept, _ = refine.native_off_the_derivative(case(0), native(np.zeros(3)), vague, tol)
    assert kept.verdict is D


def test_a_native_gradient_of_another_shape_is_no_evidence() -> None:
    from gradcheck.instrument import Outcome

    found = evidence.native_evidence(
        case(0), Outcome("eager", grads={"x": np.zeros(())}), tolerance("float64", "native")
    )
    assert found.verdict is U and "in shape (), not (3,)" in found.notes[0]


def test_a_custom_gradient_of_another_shape_is_a_shape_problem() -> None:
    misshapen = evidence.GradientCase(SOURCE, 0, {"x": np.zeros(3)}, np.zeros((3, 1)), None, "eager", 2)  # type: ignore[arg-type]
    result = verdict.misshapen_verdict(misshapen, [])
    [problem] = result.problems
    assert result.final and (problem.check, problem.order, problem.expected, problem.got) == (
        "shape",
        2,
        "(3,)",
        "(3, 1)",
    )


def test_a_quick_stage_may_stand_only_where_agreement_settles_the_gradient() -> None:
    # Native autodiff disagreeing is a problem, or is settled from the careful stage's projections.
    assert verdict.agreement_settles(context(), case(0), native(GOT), native_ran=True)
    assert verdict.agreement_settles(context(), case(0), evidence.NativeEvidence(U), native_ran=False)
    assert not verdict.agreement_settles(context(), case(0), native(2 * GOT), native_ran=True)
