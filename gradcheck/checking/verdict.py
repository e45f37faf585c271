"""The decision on one gradient's evidence, made in one place, and the problems it reports.

:func:`decision` looks the evidence up in :data:`RECONCILE` (report, redraw:
a kink inside the finite-difference step fools only finite differences, or
settle for the evidence there is) and says what that reports; :func:`decide`
writes it out for one gradient at one draw, with why the draw, not the
gradient, may be at fault. A quick stage asks the same decision where its
agreement may stand for the careful stage (:func:`agreement_settles`). A
non-finite custom gradient, and a second order that cannot be computed, are
reported from here too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

import numpy as np

from gradcheck.checking.evidence import Evidence, GradientCase, JudgingContext, NativeEvidence, NumericEvidence
from gradcheck.compare import NOISE_FLOOR, UNRELIABLE, Tolerance, compare_elementwise, heat_map
from gradcheck.instrument import Outcome
from gradcheck.results import Problem, format_shape

#: Input draws at most: the first, plus redraws where only finite differences disagree.
MAX_DRAWS = 3


class Reconciled(enum.Enum):
    """What to do with a gradient's evidence."""

    JUDGED = "judged"
    """Report what disagrees (possibly nothing)."""
    REDRAW = "redraw"
    """Only finite differences object or cannot tell: try a fresh draw first."""
    KINK = "kink"
    """At the last draw, finite differences alone still disagree: ask whether the forward pass is differentiable."""
    NATIVE_VOUCHES = "native vouches"
    """At the last draw, finite differences were unreliable throughout; native autodiff agrees: pass."""
    UNRELIABLE = "unreliable"
    """At the last draw, finite differences were unreliable throughout and no other reference was usable."""


_A, _D, _I, _U = Evidence.AGREES, Evidence.DISAGREES, Evidence.INCONCLUSIVE, Evidence.UNAVAILABLE
_JUDGED = (Reconciled.JUDGED, Reconciled.JUDGED)
#: (native, numeric) -> (what to do before the last draw, what to do at the last draw).
RECONCILE: dict[tuple[Evidence, Evidence], tuple[Reconciled, Reconciled]] = {
    (_A, _A): _JUDGED,
    (_A, _D): (Reconciled.REDRAW, Reconciled.KINK),
    (_A, _I): (Reconciled.REDRAW, Reconciled.NATIVE_VOUCHES),
    (_A, _U): _JUDGED,
    (_D, _A): _JUDGED,
    (_D, _D): _JUDGED,
    (_D, _I): (Reconciled.REDRAW, Reconciled.JUDGED),
    (_D, _U): _JUDGED,
    (_U, _A): _JUDGED,
    (_U, _D): _JUDGED,
    (_U, _I): (Reconciled.REDRAW, Reconciled.UNRELIABLE),
    (_U, _U): _JUDGED,
}


def reconcile(native: Evidence, numeric: Evidence, last_draw: bool) -> Reconciled:
    """Look up what to do with ``native`` and ``numeric`` evidence (native is never INCONCLUSIVE)."""
    before_last, at_last = RECONCILE[(native, numeric)]
    return at_last if last_draw else before_last


@dataclass(frozen=True)
class Verdict:
    """The judgement of one source's gradient at one draw."""

    final: bool
    """False: redraw before judging."""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    custom: np.ndarray | None = None
    expected: np.ndarray | None = None
    """What the gradient should have been, where a reference says so (for hints)."""
    returned_none: bool = False
    """The backward function returned None for this input (not a zero tensor): for the hint."""
    domain: str | None = None
    """Why the draw, not the gradient, may be at fault (NaN where native autodiff is NaN too, finite
    differences inconclusive at every draw): the check may be retried with narrower draws."""


def _fmt_index(index: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, index)) + "]" if index is not None else "?"


def native_problem(case: GradientCase, native: NativeEvidence) -> Problem:
    """The custom gradient differs from native autodiff, element-wise."""
    result, gradient = native.comparison, native.gradient
    assert result is not None and gradient is not None
    return Problem(
        "native",
        case.source.name,
        f"the {case.what} differs from native autodiff at {result.mismatched} of {result.total} "
        f"elements (max abs error {result.max_abs_error:.3g} at {_fmt_index(result.worst_index)})",
        execution=case.execution,
        **result.errors(),
        heatmap=heat_map(case.got, np.nan_to_num(gradient)),
        order=case.order,
    )


def numeric_problem(case: GradientCase, numeric: NumericEvidence, localiser: np.ndarray | None) -> Problem:
    """The custom gradient differs from finite differences: element-wise, or along a direction.

    A projection locates nothing; ``localiser`` (native autodiff, where it
    agrees with the projections) gives the worst element.
    """
    name, what, got = case.source.name, case.what, case.got
    result = numeric.comparison
    if numeric.gradient is not None and result is not None:
        return Problem(
            "numeric",
            name,
            f"the {what} differs from finite differences at {result.mismatched} of "
            f"{result.total} elements (max abs error {result.max_abs_error:.3g} at "
            f"{_fmt_index(result.worst_index)})",
            execution=case.execution,
            **result.errors(),
            heatmap=heat_map(got, numeric.gradient),
            order=case.order,
        )
    failing = [p for p in numeric.projections if p.conclusive and not p.ok] or list(numeric.projections)
    worst = max(failing, key=lambda p: p.abs_error)
    located = compare_elementwise(got, localiser, Tolerance(0.0, 0.0)) if localiser is not None else None
    return Problem(
        "numeric",
        name,
        f"the {what} differs from finite differences along a random direction: "
        f"<gradient, u> = {worst.projected:.6g}, finite differences give {worst.estimate:.6g}",
        execution=case.execution,
        max_abs_error=worst.abs_error,
        max_rel_error=worst.rel_error,
        worst_index=located.worst_index if located is not None else None,
        order=case.order,
    )


#: Finite differences could not judge a gradient at any draw, and nothing else could.
UNRELIABLE_HINT = 'check with reference = "native", or draw inputs away from the kink'


def _unreliable_problem(case: GradientCase) -> Problem:
    return Problem(
        "numeric",
        case.source.name,
        f"finite differences were unreliable for the {case.what} at every draw (a kink or jump "
        "within the step) and no other reference was usable",
        execution=case.execution,
        hint=UNRELIABLE_HINT,
        order=case.order,
        reason="unreliable-numeric",
    )


def uncomputed_second_order(description: str) -> Problem:
    """The gradient of the custom gradient could not be computed (``description``: why): nothing to judge."""
    return Problem(
        "numeric",
        None,
        "second order: the gradient of the custom gradient could not be computed: " + description,
        execution="eager",
        hint="the backward function must be built from differentiable TensorFlow ops "
        "(or carry a @tf.custom_gradient of its own)",
        order=2,
    )


_KINK_HINT = (
    "the custom gradient agrees with native autodiff but not with finite differences at any draw: is the "
    "forward pass differentiable (kinks, stop_gradient, rounding)?"
)


def non_finite_verdict(case: GradientCase, notes: list[str], native: Outcome | None) -> Verdict:
    """A custom gradient with NaN or Inf is a problem whatever the references say (the draw's fault, maybe,
    where native autodiff is NaN or Inf there too)."""
    got = case.got
    bad = np.argwhere(~np.isfinite(got))
    index = tuple(int(i) for i in bad[0]) if got.ndim else ()
    problem = Problem(
        "finite",
        case.source.name,
        f"the {case.what} has NaN or Inf at {len(bad)} of {got.size} elements where the forward output is finite",
        execution=case.execution,
        worst_index=index,
        hint="a division by zero, log of zero, or an overflowing exp in the backward function?",
        order=case.order,
        reason="non-finite-gradient",
    )
    domain = None
    if _native_non_finite_too(case, native):
        domain = (
            f"the {case.what} was NaN or Inf at {len(bad)} of {got.size} elements, where native autodiff "
            "is NaN or Inf too"
        )
    return Verdict(final=True, problems=[problem], notes=notes, domain=domain)


def misshapen_verdict(case: GradientCase, notes: list[str]) -> Verdict:
    """A custom gradient of another shape than its input's: a ``shape`` problem, with no values to compare."""
    got, expected = case.got.shape, case.source.shape
    problem = Problem(
        "shape",
        case.source.name,
        f"the {case.what} has shape {format_shape(got)}, its input {format_shape(expected)}",
        execution=case.execution,
        expected=format_shape(expected),
        got=format_shape(got),
        order=case.order,
    )
    return Verdict(final=True, problems=[problem], notes=notes)


def _native_non_finite_too(case: GradientCase, native: Outcome | None) -> bool:
    """Native autodiff is NaN or Inf wherever the custom gradient is: the draw left the function's domain.

    A backward function that is NaN where native autodiff is finite has a
    bug of its own (a division by zero), whatever the draw.
    """
    if native is None or not native.ok or native.grads is None:
        return False
    gradient = native.grads.get(case.source.name)
    if gradient is None or np.shape(gradient) != np.shape(case.got):
        return False
    return bool(np.all(~np.isfinite(gradient)[~np.isfinite(case.got)]))


def _unreliable_where_native_differs(native: NativeEvidence, numeric: NumericEvidence, got: np.ndarray) -> bool:
    """Finite differences "agree" with the custom gradient only within an error bound too wide to judge by.

    Where native autodiff differs most, a finite difference whose error
    bound dwarfs the values compared cannot say which gradient is right.
    """
    if numeric.verdict is not Evidence.AGREES or numeric.gradient is None or numeric.error is None:
        return False
    index = native.comparison.worst_index if native.comparison is not None else None
    if index is None:
        return False
    size = np.maximum(np.abs(numeric.gradient), np.abs(got))
    magnitude = float(np.max(size, initial=0.0))
    return bool(numeric.error[index] > UNRELIABLE * (size[index] + NOISE_FLOOR * magnitude))


@dataclass(frozen=True)
class Decision:
    """What the evidence on one gradient at one draw shows, before any problem is written (:func:`decision`)."""

    reconciled: Reconciled
    """What :data:`RECONCILE` says to do with the evidence."""
    reports: tuple[str, ...]
    """The problems it reports, in order: ``native`` and ``numeric`` (that reference disagrees),
    ``unreliable`` (finite differences unreliable at every draw, no other reference usable),
    ``no native`` (native autodiff, the only reference asked for, gives no finite gradient)."""

    @property
    def settles(self) -> bool:
        """A final verdict that reports nothing: the gradient passes."""
        return self.reconciled is not Reconciled.REDRAW and not self.reports


def last_draw(case: GradientCase) -> bool:
    """Whether ``case`` is at the last of the :data:`MAX_DRAWS` draws, where nothing is redrawn."""
    return case.draw + 1 >= MAX_DRAWS


def decision(
    context: JudgingContext, native: NativeEvidence, numeric: Evidence, last: bool, native_ran: bool
) -> Decision:
    """The one decision on a gradient's evidence: what to do (:func:`reconcile`) and what that reports.

    :func:`decide` writes out what it reports; a quick stage asks it, through
    :func:`agreement_settles`, where its agreement may stand.
    """
    reconciled = reconcile(native.verdict, numeric, last_draw=last)
    reports = [name for name, seen in (("native", native.verdict), ("numeric", numeric)) if seen is Evidence.DISAGREES]
    if reconciled is Reconciled.UNRELIABLE:
        reports.append("unreliable")
    judged_now = reconciled not in (Reconciled.REDRAW, Reconciled.NATIVE_VOUCHES)
    if judged_now and context.settings.reference == "native" and native.gradient is None and native_ran:
        reports.append("no native")
    return Decision(reconciled, tuple(reports))


def agreement_settles(context: JudgingContext, case: GradientCase, native: NativeEvidence, native_ran: bool) -> bool:
    """Whether finite differences agreeing with the custom gradient would settle it, given ``native``.

    Only there may a quick stage's agreement (fast mode's first look, the
    quick stage at ``±h``) stand for the careful stage's projections: where
    native autodiff disagrees, settling it needs the careful stage's
    projections of native autodiff's gradient too.
    """
    return decision(context, native, Evidence.AGREES, last_draw(case), native_ran).settles


def decide(
    context: JudgingContext,
    case: GradientCase,
    native: NativeEvidence,
    numeric: NumericEvidence,
    notes: list[str],
    native_ran: bool,
) -> Verdict:
    """The verdict :func:`decision` makes of the evidence, with the problems it reports written out."""
    made = decision(context, native, numeric.verdict, last_draw(case), native_ran)
    problems = [_written(report, made, case, native, numeric) for report in made.reports]
    if made.reconciled is Reconciled.REDRAW:
        return Verdict(final=False, problems=problems, notes=notes)
    if made.reconciled is Reconciled.NATIVE_VOUCHES:
        notes.append(
            f"finite differences were unreliable for {case.source.name} at every draw (a kink or jump "
            "near the inputs); native autodiff agrees with the custom gradient"
        )
        return Verdict(final=True, problems=problems, notes=notes)
    expected = _expected(native, numeric)
    domain = _domain(case, native, numeric)
    return Verdict(final=True, problems=problems, notes=notes, custom=case.got, expected=expected, domain=domain)


def _written(
    report: str, made: Decision, case: GradientCase, native: NativeEvidence, numeric: NumericEvidence
) -> Problem:
    """The problem ``report`` of :attr:`Decision.reports`, written out."""
    if report == "native":
        return native_problem(case, native)
    if report == "numeric":
        located = numeric.native_projections is Evidence.AGREES
        problem = numeric_problem(case, numeric, native.gradient if located else None)
        return replace(problem, hint=_KINK_HINT) if made.reconciled is Reconciled.KINK else problem
    if report == "unreliable":
        return _unreliable_problem(case)
    return Problem(
        "native",
        case.source.name,
        f"native autodiff gives no finite {case.what} to compare with",
        execution=case.execution,
        hint='use reference = "numeric" or "both"',
        order=case.order,
    )


def _expected(native: NativeEvidence, numeric: NumericEvidence) -> np.ndarray | None:
    """What the gradient should have been, where a disagreeing reference says (finite differences' word last)."""
    expected = native.gradient if native.verdict is Evidence.DISAGREES else None
    if numeric.verdict is Evidence.DISAGREES:
        if numeric.gradient is not None:
            expected = numeric.gradient
        elif numeric.native_projections is Evidence.AGREES:
            expected = native.gradient
    return expected


def _domain(case: GradientCase, native: NativeEvidence, numeric: NumericEvidence) -> str | None:
    """Why the draw, not the gradient, may be at fault in a final verdict (see :attr:`Verdict.domain`)."""
    if last_draw(case) and numeric.verdict is Evidence.INCONCLUSIVE:
        return (
            f"finite differences of the {case.what} were inconclusive at every draw (the forward output "
            "does not vary smoothly there)"
        )
    if native.verdict is Evidence.DISAGREES and _unreliable_where_native_differs(native, numeric, case.got):
        return (
            f"native autodiff differed from the {case.what} where finite differences were unreliable "
            "(the forward output does not vary smoothly there)"
        )
    return None
