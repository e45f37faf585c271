"""The decision: what one gradient's evidence shows, by the :data:`RECONCILE` table, and the problems it reports.

:data:`RECONCILE` decides, as a table, whether to report, redraw (a kink
inside the finite-difference step fools only finite differences), or settle
for the evidence there is; :func:`decide` applies it to one gradient at one
draw and writes the problems (element-wise, along a direction, unreliable,
non-finite) and why the draw, not the gradient, may be at fault.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

import numpy as np

from gradcheck.checking.diagnose import UNRELIABLE_HINT
from gradcheck.checking.evidence import Evidence, Judged, Judging, NativeEvidence, NumericEvidence
from gradcheck.compare import NOISE_FLOOR, UNRELIABLE, Tolerance, compare_elementwise, heat_map
from gradcheck.instrument import Outcome
from gradcheck.results import Problem

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


def native_problem(judged: Judged, native: NativeEvidence) -> Problem:
    """The custom gradient differs from native autodiff, element-wise."""
    result, gradient = native.comparison, native.gradient
    assert result is not None and gradient is not None
    return Problem(
        "native",
        judged.source.name,
        f"the {judged.what} differs from native autodiff at {result.mismatched} of {result.total} "
        f"elements (max abs error {result.max_abs_error:.3g} at {_fmt_index(result.worst_index)})",
        execution=judged.execution,
        **result.errors(),
        heatmap=heat_map(judged.got, np.nan_to_num(gradient)),
        order=judged.order,
    )


def numeric_problem(judged: Judged, numeric: NumericEvidence, localiser: np.ndarray | None) -> Problem:
    """The custom gradient differs from finite differences: element-wise, or along a direction.

    A projection locates nothing; ``localiser`` (native autodiff, where it
    agrees with the projections) gives the worst element.
    """
    name, what, got = judged.source.name, judged.what, judged.got
    result = numeric.comparison
    if numeric.gradient is not None and result is not None:
        return Problem(
            "numeric",
            name,
            f"the {what} differs from finite differences at {result.mismatched} of "
            f"{result.total} elements (max abs error {result.max_abs_error:.3g} at "
            f"{_fmt_index(result.worst_index)})",
            execution=judged.execution,
            **result.errors(),
            heatmap=heat_map(got, numeric.gradient),
            order=judged.order,
        )
    failing = [p for p in numeric.projections if p.conclusive and not p.ok] or list(numeric.projections)
    worst = max(failing, key=lambda p: p.abs_error)
    located = compare_elementwise(got, localiser, Tolerance(0.0, 0.0)) if localiser is not None else None
    return Problem(
        "numeric",
        name,
        f"the {what} differs from finite differences along a random direction: "
        f"<gradient, u> = {worst.projected:.6g}, finite differences give {worst.estimate:.6g}",
        execution=judged.execution,
        max_abs_error=worst.abs_error,
        max_rel_error=worst.rel_error,
        worst_index=located.worst_index if located is not None else None,
        order=judged.order,
    )


def _unreliable_problem(judged: Judged) -> Problem:
    return Problem(
        "numeric",
        judged.source.name,
        f"finite differences were unreliable for the {judged.what} at every draw (a kink or jump "
        "within the step) and no other reference was usable",
        execution=judged.execution,
        hint=UNRELIABLE_HINT,
        order=judged.order,
    )


_KINK_HINT = (
    "the custom gradient agrees with native autodiff but not with finite differences at any draw: is the "
    "forward pass differentiable (kinks, stop_gradient, rounding)?"
)


def non_finite_verdict(judged: Judged, notes: list[str], native: Outcome | None) -> Verdict:
    got = judged.got
    bad = np.argwhere(~np.isfinite(got))
    index = tuple(int(i) for i in bad[0]) if got.ndim else ()
    problem = Problem(
        "finite",
        judged.source.name,
        f"the {judged.what} has NaN or Inf at {len(bad)} of {got.size} elements where the forward output is finite",
        execution=judged.execution,
        worst_index=index,
        hint="a division by zero, log of zero, or an overflowing exp in the backward function?",
        order=judged.order,
    )
    domain = None
    if _native_non_finite_too(judged, native):
        domain = (
            f"the {judged.what} was NaN or Inf at {len(bad)} of {got.size} elements, where native autodiff "
            "is NaN or Inf too"
        )
    return Verdict(final=True, problems=[problem], notes=notes, domain=domain)


def _native_non_finite_too(judged: Judged, native: Outcome | None) -> bool:
    """Native autodiff is NaN or Inf wherever the custom gradient is: the draw left the function's domain.

    A backward function that is NaN where native autodiff is finite has a
    bug of its own (a division by zero), whatever the draw.
    """
    if native is None or not native.ok or native.grads is None:
        return False
    gradient = native.grads.get(judged.source.name)
    if gradient is None or np.shape(gradient) != np.shape(judged.got):
        return False
    return bool(np.all(~np.isfinite(gradient)[~np.isfinite(judged.got)]))


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


def decide(
    judging: Judging,
    judged: Judged,
    native: NativeEvidence,
    numeric: NumericEvidence,
    notes: list[str],
    native_ran: bool,
) -> Verdict:
    """The problems the evidence shows, and what :func:`reconcile` makes of them."""
    problems: list[Problem] = []
    expected = None
    if native.verdict is Evidence.DISAGREES:
        problems.append(native_problem(judged, native))
        expected = native.gradient
    if numeric.verdict is Evidence.DISAGREES:
        native_located = numeric.native_projections is Evidence.AGREES
        problems.append(numeric_problem(judged, numeric, native.gradient if native_located else None))
        if numeric.gradient is not None:
            expected = numeric.gradient
        elif native_located:
            expected = native.gradient
    decision = reconcile(native.verdict, numeric.verdict, last_draw=judged.draw + 1 >= MAX_DRAWS)
    if decision is Reconciled.REDRAW:
        return Verdict(final=False, problems=problems, notes=notes)
    if decision is Reconciled.NATIVE_VOUCHES:
        notes.append(
            f"finite differences were unreliable for {judged.source.name} at every draw (a kink or jump "
            "near the inputs); native autodiff agrees with the custom gradient"
        )
        return Verdict(final=True, problems=problems, notes=notes)
    domain = None
    if judged.draw + 1 >= MAX_DRAWS and numeric.verdict is Evidence.INCONCLUSIVE:
        domain = (
            f"finite differences of the {judged.what} were inconclusive at every draw (the forward output "
            "does not vary smoothly there)"
        )
    elif native.verdict is Evidence.DISAGREES and _unreliable_where_native_differs(native, numeric, judged.got):
        domain = (
            f"native autodiff differed from the {judged.what} where finite differences were unreliable "
            "(the forward output does not vary smoothly there)"
        )
    if decision is Reconciled.UNRELIABLE:
        problems.append(_unreliable_problem(judged))
    if decision is Reconciled.KINK:
        problems = [replace(p, hint=_KINK_HINT) if p.check == "numeric" else p for p in problems]
    if judging.settings.reference == "native" and native.gradient is None and native_ran:
        problems.append(
            Problem(
                "native",
                judged.source.name,
                f"native autodiff gives no finite {judged.what} to compare with",
                execution=judged.execution,
                hint='use reference = "numeric" or "both"',
                order=judged.order,
            )
        )
    return Verdict(final=True, problems=problems, notes=notes, custom=judged.got, expected=expected, domain=domain)
