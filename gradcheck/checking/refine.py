"""Fast mode's refinements of the evidence: the first look at every gradient at once, and the element-wise
checks that settle what projections leave open.

Before reconciling, named steps refine the evidence (:func:`gather_evidence`):
:func:`first_look` (native autodiff agrees everywhere: one joint direction
confirms it), :func:`settle_native_disagreement` (native autodiff disagrees
where finite differences agree: is the forward pass not differentiable by
TensorFlow here?), :func:`localise_fast_failure` (a failed projection is
checked element by element, where affordable), :func:`resolve_inconclusive`
and :func:`native_below_resolution` (native autodiff differs by less than
finite differences resolve).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gradcheck.checking.evidence import (
    Evidence,
    GradientCase,
    JudgingContext,
    NativeEvidence,
    NumericEvidence,
    custom_gradient,
    difference_step,
    full_evidence,
    judge_full,
    native_evidence,
    numeric_evidence,
    plainly_agrees,
    random_directions,
    reliable,
)
from gradcheck.checking.verdict import agreement_settles
from gradcheck.compare import Tolerance, compare_elementwise, tolerance
from gradcheck.finite_differences import BatchedLoss, joint_central_differences
from gradcheck.harness import Source
from gradcheck.instrument import Outcome

#: Largest input (in elements) that fast mode localises with a whole
#: finite-difference gradient after a failed projection.
LOCALISE_MAX_ELEMENTS = 4096


@dataclass(frozen=True)
class FirstLook:
    """Fast mode's first look at every gradient of one draw at once (:func:`first_look`)."""

    natives: dict[str, NativeEvidence]
    """Native evidence of the sources it compared, for judging to reuse."""
    agrees: bool
    """Every gradient agrees with native autodiff element by element, and finite differences along one
    direction through all inputs confirm them plainly."""


def first_look(
    context: JudgingContext,
    sources: list[Source],
    draw: int,
    values: dict[str, Any],
    custom: Outcome,
    native: Outcome | None,
    losses: BatchedLoss,
    loss: Callable[[dict[str, Any]], tuple[float, float]],
) -> FirstLook | None:
    """Fast mode's cheapest sufficient evidence: native autodiff element-wise, and central differences.

    Where the custom gradient equals native autodiff element by element,
    finite differences only have to confirm that native autodiff is the
    derivative of the forward pass (not cut by a stop_gradient, an integer
    op or a registered surrogate). Random directions through every input
    at once (one per three projections, see :func:`look_directions`) do
    that in two forward passes each (the center is native autodiff's own
    forward pass), where the per-input stage takes ``1 + 2k`` for every
    input. Anything short of plain agreement (the test of
    :func:`quick_agreement`) leaves every gradient to the per-input stages,
    which then judge it as if this look had not been taken.
    """
    settings = context.settings
    if settings.mode != "fast" or settings.reference != "both" or native is None or not native.ok or not sources:
        return None
    dtypes = {(context.reference_dtype(s), context.tolerance_dtype(s), difference_step(context, s)) for s in sources}
    if len(dtypes) != 1:
        return None
    ((dtype, tolerance_dtype, step),) = dtypes
    natives: dict[str, NativeEvidence] = {}
    count = look_directions(settings.projections)
    gots: list[np.ndarray] = []
    directions: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for source in sources:
        got, _ = custom_gradient(source, custom, 1)
        if got.shape != source.shape or not np.all(np.isfinite(got)):
            return FirstLook(natives, agrees=False)
        case = GradientCase(source, draw, values, got, losses, custom.execution, 1)
        tol_native = tolerance(tolerance_dtype, "native", settings.rtol, settings.atol)
        natives[source.name] = seen = native_evidence(case, native, tol_native)
        if seen.verdict is not Evidence.AGREES or seen.notes:
            return FirstLook(natives, agrees=False)
        gots.append(np.asarray(got, dtype=np.float64))
        for direction, part in zip(directions, _look_directions(context, case, count)):
            direction[source.name] = part
    found = joint_central_differences(loss, values, directions, step, dtype)
    tol = tolerance(tolerance_dtype, "numeric", settings.rtol, settings.atol)
    agrees = all(
        plainly_agrees(gots, list(d.values()), float(v), float(c), found.rounding, tol)
        for d, v, c in zip(directions, found.values, found.curvature)
    )
    return FirstLook(natives, agrees)


def look_directions(projections: int) -> int:
    """The first look's joint directions: one for each three projections per input (rounded up), so that
    asking for more projections asks the first look for more evidence too."""
    return -(-projections // 3)


def _look_directions(context: JudgingContext, case: GradientCase, count: int) -> list[np.ndarray]:
    """The first look's parts of its directions along ``case.source``: uniform on ``[-sqrt 3, sqrt 3]``.

    Any continuous distribution makes a cancelling projection a zero-probability
    event; this one has the normal draws' variance and is several times
    cheaper to draw for inputs of millions of elements. Its stream is its own,
    so the per-input projections' directions are the same with or without it.
    """

    def uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        direction = rng.random(size=shape)
        direction *= 2 * math.sqrt(3.0)
        direction -= math.sqrt(3.0)
        return direction

    return random_directions(context, case, "first look", count, uniform)


def gather_evidence(
    context: JudgingContext, case: GradientCase, native_outcome: Outcome | None, look: FirstLook | None = None
) -> tuple[NativeEvidence, NumericEvidence, list[str]]:
    """Native and numeric evidence about one gradient, refined in fast mode, with their notes in order."""
    source, settings = case.source, context.settings
    tol_native = tolerance(context.tolerance_dtype(source), "native", settings.rtol, settings.atol)
    tol_numeric = tolerance(context.tolerance_dtype(source), "numeric", settings.rtol, settings.atol)
    known = look.natives.get(source.name) if look is not None else None
    native = known if known is not None else native_evidence(case, native_outcome, tol_native)
    # A quick stage's agreement stands only where the decision says agreement settles the gradient.
    quick = agreement_settles(context, case, native, native_ran=native_outcome is not None)
    confirmed = quick and look is not None and look.agrees
    numeric, fallback = numeric_evidence(context, case, native, tol_numeric, quick, confirmed)
    notes = [*native.notes, *fallback, *numeric.notes]
    numeric = replace(numeric, notes=())
    refined: tuple[str, ...] = ()
    if settings.mode == "fast":
        if numeric.verdict is Evidence.AGREES and native.verdict is Evidence.DISAGREES:
            native, numeric, refined = settle_native_disagreement(context, case, native, numeric, tol_numeric)
        elif numeric.verdict is Evidence.DISAGREES:
            numeric, refined = localise_fast_failure(context, case, numeric, tol_numeric)
        elif numeric.verdict is Evidence.INCONCLUSIVE and native.verdict is Evidence.DISAGREES:
            numeric, refined = resolve_inconclusive(context, case, numeric, tol_numeric)
            if numeric.verdict is Evidence.AGREES:
                native, below = native_below_resolution(case, native, tol_numeric)
                refined = (*refined, *below)
    elif numeric.verdict is Evidence.AGREES and native.verdict is Evidence.DISAGREES:
        native, refined = native_off_the_derivative(case, native, numeric, tol_numeric)
        if native.verdict is Evidence.DISAGREES:
            native, refined = native_below_resolution(case, native, tol_numeric)
    return native, numeric, notes + list(refined)


def _not_differentiable_note(name: str) -> str:
    return (
        f"native autodiff of {name} disagrees with finite differences (the forward pass is not "
        "differentiable by TensorFlow, e.g. stop_gradient, integer ops, or numpy through tf.numpy_function "
        "or tf.py_function); the custom gradient agrees with finite differences"
    )


def native_off_the_derivative(
    case: GradientCase, native: NativeEvidence, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NativeEvidence, tuple[str, ...]]:
    """Native autodiff disagrees where whole finite differences agree with the custom gradient (full mode):
    set it aside where it is no derivative of the forward pass at all.

    Where every finite difference can judge the custom gradient (none has an error bound wide enough
    to agree with anything) and native autodiff's own gradient misses them, TensorFlow cannot
    differentiate the forward pass here (a forward pass computed in numpy has no native path, and its
    native gradient is zero): native evidence says nothing about the custom gradient, as fast mode
    finds along its projections.
    """
    assert native.gradient is not None and numeric.gradient is not None and numeric.error is not None
    if not np.all(reliable(case.got, numeric.gradient, numeric.error, tol)):
        return native, ()
    usable = np.where(np.isfinite(native.gradient), native.gradient, numeric.gradient)
    _, ok = judge_full(usable, numeric.gradient, numeric.error, tol)
    if ok is not False:
        return native, ()
    return replace(native, verdict=Evidence.UNAVAILABLE), (_not_differentiable_note(case.source.name),)


def settle_native_disagreement(
    context: JudgingContext, case: GradientCase, native: NativeEvidence, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NativeEvidence, NumericEvidence, tuple[str, ...]]:
    """Native autodiff disagrees where the projections agree: settle it (fast mode), with notes saying how.

    Where native autodiff also misses the projections, TensorFlow cannot
    differentiate the forward pass here (stop_gradient, integer ops) and
    native evidence is set aside. Otherwise the gradient is compared element
    by element where affordable, since a projection can miss a difference in
    a few elements.
    """
    name = case.source.name
    unavailable = replace(native, verdict=Evidence.UNAVAILABLE)
    if numeric.native_projections is Evidence.DISAGREES:
        return unavailable, numeric, (_not_differentiable_note(name),)
    if case.source.size > LOCALISE_MAX_ELEMENTS:
        return native, numeric, ()
    whole = _element_wise(context, case, numeric, tol)
    if whole.verdict is not Evidence.AGREES:
        return native, replace(whole, notes=()), whole.notes
    note = (
        f"native autodiff of {name} differs from the custom gradient, but finite differences "
        "agree with the custom gradient element by element"
    )
    return unavailable, replace(whole, notes=()), whole.notes + (note,)


def native_below_resolution(
    case: GradientCase, native: NativeEvidence, tol: Tolerance
) -> tuple[NativeEvidence, tuple[str, ...]]:
    """Native autodiff differs slightly where finite differences confirm the custom gradient element by element
    (full mode, or fast mode where the projections could not judge).

    Native autodiff differentiates the forward pass as computed: where that
    is an approximation (a truncated series, an iteration stopped at a
    tolerance), its derivative is no more exact than the approximation, and
    the custom gradient is often the exact derivative of the function meant.
    A difference finite differences cannot resolve (within their own
    tolerance) is then a note; a larger one stays a problem.
    """
    assert native.gradient is not None and native.comparison is not None
    finite = np.isfinite(native.gradient)
    if not compare_elementwise(case.got, native.gradient, tol, mask=finite).ok:
        return native, ()
    comparison = native.comparison
    relative = f", {comparison.max_rel_error:.2g} relative" if comparison.max_rel_error is not None else ""
    note = (
        f"native autodiff of {case.source.name} differs from the custom gradient by at most "
        f"{comparison.max_abs_error:.2g}{relative}, below what finite differences resolve, and finite "
        "differences agree with the custom gradient element by element: an approximate forward pass "
        "(a series, an iteration) has an approximate native derivative; not counted as a problem"
    )
    return replace(native, verdict=Evidence.UNAVAILABLE), (note,)


def _element_wise(
    context: JudgingContext, case: GradientCase, numeric: NumericEvidence, tol: Tolerance
) -> NumericEvidence:
    whole = full_evidence(context, case, tol)
    return replace(whole, projections=numeric.projections, native_projections=numeric.native_projections)


def localise_fast_failure(
    context: JudgingContext, case: GradientCase, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NumericEvidence, tuple[str, ...]]:
    """A failed projection, checked element by element where affordable (fast mode), with its notes.

    The element-wise check is the finer one: where it passes, the projection
    met a kink and the evidence becomes inconclusive (a redraw decides);
    where it fails, the report gives the elements and the worst one.
    """
    if case.source.size > LOCALISE_MAX_ELEMENTS:
        return numeric, ()
    whole = _element_wise(context, case, numeric, tol)
    verdict = Evidence.INCONCLUSIVE if whole.verdict is Evidence.AGREES else Evidence.DISAGREES
    return replace(whole, verdict=verdict, notes=()), whole.notes


def resolve_inconclusive(
    context: JudgingContext, case: GradientCase, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NumericEvidence, tuple[str, ...]]:
    """Projections too coarse to judge by while native autodiff disagrees (fast mode): element by element.

    Each projection sums every element's finite-difference error, so in
    float32 it can stay inconclusive where single elements resolve; full
    mode's element-wise comparison, where affordable, then decides as it
    would in full mode (and a native difference below its resolution is a
    note there too).
    """
    if case.source.size > LOCALISE_MAX_ELEMENTS:
        return numeric, ()
    whole = _element_wise(context, case, numeric, tol)
    return replace(whole, notes=()), whole.notes
