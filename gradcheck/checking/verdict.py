"""Judge each gradient's values: native evidence, numeric evidence, and their reconciliation.

Each reference gives :class:`Evidence` about the custom gradient: native
autodiff element-wise, finite differences either whole (``full`` mode) or
along random directions (``fast`` mode). Before reconciling, two named
steps refine the evidence in fast mode: :func:`settle_native_disagreement`
(native autodiff disagrees where finite differences agree: is the forward
pass not differentiable by TensorFlow here?) and :func:`localise_fast_failure`
(a failed projection is checked element by element, where affordable).
:data:`RECONCILE` then decides, as a table, whether to report, redraw (a kink
inside the finite-difference step fools only finite differences), or settle
for the evidence there is.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gradcheck.arrays import projection_sums, scale_by_magnitude
from gradcheck.checking.diagnose import UNRELIABLE_HINT
from gradcheck.compare import (
    NOISE_FLOOR,
    UNRELIABLE,
    Comparison,
    ProjectionComparison,
    Tolerance,
    compare_elementwise,
    compare_projection,
    heat_map,
    tolerance,
)
from gradcheck.config import Settings
from gradcheck.finite_differences import (
    BatchedLoss,
    central_differences,
    default_step,
    directional_derivatives,
    finite_difference_gradient,
    joint_central_differences,
    one_at_a_time,
)
from gradcheck.harness import Harness, Source
from gradcheck.inputs import subject_rng, symmetrize
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.results import Problem

#: Input draws at most: the first, plus redraws where only finite differences disagree.
MAX_DRAWS = 3
#: Largest input (in elements) that fast mode localises with a whole
#: finite-difference gradient after a failed projection.
LOCALISE_MAX_ELEMENTS = 4096
#: Beyond this many Jacobian entries (input elements x output elements), full mode checks
#: that input with random projections instead. Full mode never holds a Jacobian (its
#: batches of perturbed inputs stay under 64 MB), so the bound is on time: each input
#: element costs a few forward passes over every output.
JACOBIAN_MAX_ENTRIES = 10**9


class Evidence(enum.Enum):
    """What one reference says about a custom gradient."""

    AGREES = "agrees"
    DISAGREES = "disagrees"
    INCONCLUSIVE = "inconclusive"
    """Finite differences too unreliable to judge by (a kink or jump within the step)."""
    UNAVAILABLE = "unavailable"
    """No such reference: not asked for, raised, non-finite, or not differentiable here."""


def evidence(ok: bool | None, available: bool = True) -> Evidence:
    """``True`` / ``False`` / ``None`` (can't tell) as evidence."""
    if not available:
        return Evidence.UNAVAILABLE
    if ok is None:
        return Evidence.INCONCLUSIVE
    return Evidence.AGREES if ok else Evidence.DISAGREES


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


# -- what flows in and out -------------------------------------------------------


@dataclass(frozen=True)
class Judging:
    """What judging needs that does not change from one gradient to the next."""

    settings: Settings
    subject_name: str
    wide: bool
    """True when the references are evaluated in float64 for narrower inputs."""
    output_size: int
    """Elements over all outputs, for the Jacobian's size."""
    batching: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """How the reference harness evaluated each source's perturbations, and why (filled in as it first perturbs)."""
    output_dtypes: tuple[str, ...] = ()
    """The reference harness's output dtypes: code that computes in a narrower dtype than its inputs
    (a layer pinned to float32 fed float64) is only as precise as its outputs."""

    def reference_dtype(self, source: Source) -> str:
        """The precision the references of ``source`` are evaluated in (steps and rounding follow it)."""
        fed = source.dtype if source.kind == "variable" or not self.wide else "float64"
        return narrowest(fed, *self.output_dtypes)

    def tolerance_dtype(self, source: Source) -> str:
        """The dtype whose tolerances judge the gradient of ``source``."""
        return narrowest(source.dtype, *self.output_dtypes)

    def narrowed(self, sources: list[Source]) -> list[str]:
        """A note where the forward pass computes in a narrower dtype than its float inputs."""
        inputs = {s.dtype for s in sources if s.kind == "input"}
        computed = narrowest(*inputs, *self.output_dtypes) if inputs else None
        if computed is None or computed in inputs:
            return []
        return [
            f"the forward pass returns {computed} for {', '.join(sorted(inputs))} inputs: finite-difference "
            f"steps, rounding bounds and tolerances are {computed}'s"
        ]


#: Float dtypes from the least to the most precise.
PRECISION = ("bfloat16", "float16", "float32", "float64")


def narrowest(*dtypes: str) -> str:
    """The least precise of float ``dtypes`` (unknown names count as float64)."""
    return min(dtypes, key=lambda d: PRECISION.index(d) if d in PRECISION else len(PRECISION))


@dataclass(frozen=True)
class Judged:
    """One gradient at one draw, about to be judged."""

    source: Source
    draw: int
    values: dict[str, Any]
    got: np.ndarray
    """The custom gradient (symmetrised where the input is), finite."""
    losses: BatchedLoss
    execution: str
    order: int

    @property
    def what(self) -> str:
        """``gradient of x`` or ``second-order gradient of x``, for messages."""
        return f"{'second-order ' if self.order == 2 else ''}gradient of {self.source.name}"


@dataclass(frozen=True)
class NativeEvidence:
    """Native autodiff's gradient, compared element-wise where it is finite."""

    verdict: Evidence
    gradient: np.ndarray | None = None
    comparison: Comparison | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NumericEvidence:
    """Finite differences: a whole gradient, or projections along random directions."""

    verdict: Evidence
    gradient: np.ndarray | None = None
    comparison: Comparison | None = None
    projections: tuple[ProjectionComparison, ...] = ()
    native_projections: Evidence = Evidence.UNAVAILABLE
    """Native autodiff's gradient along the same directions (for "native is not differentiable here")."""
    error: np.ndarray | None = None
    """The whole gradient's error bound, element-wise."""
    notes: tuple[str, ...] = ()


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


# -- native evidence -------------------------------------------------------------


def native_evidence(judged: Judged, native: Outcome | None, tol: Tolerance) -> NativeEvidence:
    """Native autodiff, element-wise, where it is finite."""
    if native is None or not native.ok:
        return NativeEvidence(Evidence.UNAVAILABLE)
    source = judged.source
    raw = native.grads.get(source.name) if native.grads else None
    gradient = np.zeros(source.shape) if raw is None else raw
    if source.symmetric:
        gradient = symmetrize(gradient)
    finite = np.isfinite(gradient)
    if not finite.any():
        note = f"native autodiff of the {judged.what} is NaN/Inf everywhere; finite differences judge it"
        return NativeEvidence(Evidence.UNAVAILABLE, notes=(note,))
    comparison = compare_elementwise(judged.got, gradient, tol, mask=finite)
    notes: tuple[str, ...] = ()
    if not finite.all():
        notes = (
            f"native autodiff gives NaN/Inf at {int((~finite).sum())} of {finite.size} elements "
            f"of the {judged.what} (as it does where people need custom gradients); finite differences judge those",
        )
    return NativeEvidence(evidence(comparison.ok), gradient, comparison, notes)


# -- numeric evidence ------------------------------------------------------------


def _step(judging: Judging, source: Source) -> float:
    eps = judging.settings.eps
    return eps if eps is not None else default_step(judging.reference_dtype(source))


def _scale(judged: Judged) -> np.ndarray:
    """``max(1, |x|)``, the finite-difference steps' and the directions' scale (one array, made in place)."""
    scale = np.abs(np.asarray(judged.values[judged.source.name], dtype=np.float64))
    return np.maximum(scale, 1.0, out=scale) if isinstance(scale, np.ndarray) else np.maximum(scale, 1.0)


def full_evidence(judging: Judging, judged: Judged, tol: Tolerance) -> NumericEvidence:
    """The whole finite-difference gradient, element-wise."""
    source, got = judged.source, judged.got

    def acceptable(gradient: np.ndarray, error: np.ndarray) -> np.ndarray:
        # Elements that plain central differences already confirm need no second step.
        difference = np.abs(got - gradient)
        magnitude = float(np.max(np.abs(np.nan_to_num(gradient)), initial=0.0))
        bound = tol.atol + tol.rtol * (np.abs(gradient) + NOISE_FLOOR * magnitude) + error
        return np.isfinite(gradient) & (difference <= 0.5 * bound)

    base = np.asarray(judged.values[source.name], dtype=np.float64)
    gradient, error, _ = finite_difference_gradient(
        judged.losses,
        base,
        source.name,
        _scale(judged),
        _step(judging, source),
        judging.reference_dtype(source),
        source.symmetric,
        accept=acceptable,
    )
    notes: tuple[str, ...] = ()
    strategy, why = judging.batching.get(source.name, ("", ""))
    if strategy == "loop" and source.kind == "input":
        notes = (
            f"finite differences of {source.name} were evaluated one perturbation at a time: "
            f"the function cannot be batched ({why})",
        )
    comparison, ok = judge_full(got, gradient, error, tol)
    return NumericEvidence(evidence(ok), gradient, comparison, error=error, notes=notes)


def judge_full(
    got: np.ndarray, gradient: np.ndarray, error: np.ndarray, tol: Tolerance
) -> tuple[Comparison, bool | None]:
    """Element-wise against a finite-difference gradient; None where only unreliable elements fail."""
    result = compare_elementwise(got, gradient, tol, expected_error=error)
    if result.ok:
        return result, True
    # An element's finite difference is trusted when its own error is small
    # next to the values being compared (either side), as for projections.
    size = np.maximum(np.abs(gradient), np.abs(got))
    magnitude = float(np.max(size, initial=0.0))
    reliable = error <= UNRELIABLE * (size + NOISE_FLOOR * magnitude + tol.atol)
    strict = compare_elementwise(got, gradient, tol, expected_error=error, mask=reliable)
    return result, (None if strict.ok else False)


#: The quick stage accepts a projection only when its whole error budget fits in this fraction of the
#: tolerance (and of the conclusiveness bound); the rest of the budget is what its argument spends.
QUICK_FRACTION = 0.5


def _directions(judging: Judging, judged: Judged) -> list[np.ndarray]:
    """The random directions of one gradient's projections: the same stream whichever stage uses them."""
    return _random_directions(
        judging, judged, "directions", judging.settings.projections, lambda rng, shape: rng.standard_normal(size=shape)
    )


def _random_directions(
    judging: Judging,
    judged: Judged,
    stream: str,
    count: int,
    draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray],
) -> list[np.ndarray]:
    """``count`` directions along ``judged.source`` from its own seeded ``stream``, symmetric where the input
    is, scaled by ``max(1, |x|)`` as the finite-difference steps are."""
    source = judged.source
    rng = subject_rng(
        judging.settings.seed, f"{judging.subject_name}:{source.name}:{stream}:{judged.order}", judged.draw
    )
    values = np.asarray(judged.values[source.name], dtype=np.float64)
    scale = None
    directions = []
    for _ in range(count):
        direction = draw(rng, source.shape)
        if source.symmetric:
            direction = symmetrize(direction)
        # The draw is this function's own array, so it is scaled in place: block by block where it is big.
        if not scale_by_magnitude(direction, values):
            scale = _scale(judged) if scale is None else scale
            if isinstance(direction, np.ndarray) and direction.shape == np.shape(scale):
                direction *= scale
            else:
                direction = direction * scale
        directions.append(direction)
    return directions


def quick_agreement(judging: Judging, judged: Judged, directions: list[np.ndarray], tol: Tolerance) -> bool:
    """Whether central differences at ``±h`` alone show the gradient plainly right along every direction.

    Fast mode's first stage: ``1 + 2k`` losses instead of the ``1 + 4k`` of
    :func:`directional_derivatives`. It can only say "agrees"; anything else
    goes to the careful stage, so every failing result is the careful one.

    Why it lets through nothing the careful stage would catch: along the same
    direction, at the same ``±h`` points, the careful estimate is
    ``R = D + (D - F) / 3`` (``D``, ``F``: central differences at ``h``,
    ``2h``) with error bound ``E >= |D - F|``, and it fails only when
    ``|p - R| > B + E`` (``p = <gradient, u>``, ``B`` the tolerance). Here
    ``|p - D| + rounding <= B' / 2`` with ``B' <= B`` (its scale leaves out
    ``|R|``), so ``|p - R| <= |p - D| + |D - F| / 3 <= B / 2 + E / 3``: never
    a failure. The rounding term also covers the last bits by which a loss
    may differ between stacks of different sizes. The curvature (a kink
    inside ``h`` makes it the jump in slope) and the rounding, held to half
    the careful stage's conclusiveness bound, keep kinks and noisy losses
    for the careful stage, whose redraws and notes then stay as they are.
    What it cannot see is a kink, or a non-finite loss, between ``h`` and
    ``2h``, where the careful stage would call the projection inconclusive
    and redraw: there ``±h`` is smooth and its estimate sound.
    """
    source = judged.source
    found = central_differences(
        judged.losses, source.name, directions, _step(judging, source), judging.reference_dtype(source)
    )
    got = np.asarray(judged.got, dtype=np.float64)
    return all(
        _plainly_agrees([got], [direction], float(value), float(curvature), found.rounding, tol)
        for direction, value, curvature in zip(directions, found.values, found.curvature)
    )


def _plainly_agrees(
    gots: list[np.ndarray], parts: list[np.ndarray], value: float, curvature: float, rounding: float, tol: Tolerance
) -> bool:
    """Whether ``<got, direction>`` and a central difference ``value`` along it agree with room to spare
    (the argument of :func:`quick_agreement`). The gradient and the direction come in parts, one per input
    the direction moves, in the same order."""
    projected, products_squared, direction_squared = 0.0, 0.0, 0.0
    for one_got, part in zip(gots, parts):
        sums = projection_sums(one_got, part)
        projected += sums[0]
        products_squared += sums[1]
        direction_squared += sums[2]
    size = max(abs(projected), math.sqrt(products_squared))
    bound = tol.atol * math.sqrt(direction_squared) + tol.rtol * size
    if not (math.isfinite(value) and math.isfinite(curvature) and math.isfinite(rounding)):
        return False
    if abs(projected - value) + rounding > QUICK_FRACTION * bound:
        return False
    # Curvature is O(h) where smooth, so it is held only to the conclusiveness bound, as a kink is.
    return curvature + rounding <= QUICK_FRACTION * UNRELIABLE * max(size, tol.atol)


def projected_evidence(
    judging: Judging, judged: Judged, native_gradient: np.ndarray | None, tol: Tolerance, quick: bool = False
) -> NumericEvidence:
    """``<gradient, u>`` against directional finite differences along ``judging.settings.projections`` random ``u``.

    With ``quick``, :func:`quick_agreement` looks first and, where it sees
    plain agreement, that is the evidence (with no projections kept:
    nothing reads them from agreeing evidence unless native autodiff
    disagrees, and then ``quick`` is off).
    """
    source, name = judged.source, judged.source.name
    native_usable = native_gradient is not None and bool(np.all(np.isfinite(native_gradient)))
    directions = _directions(judging, judged)
    if quick and quick_agreement(judging, judged, directions, tol):
        return NumericEvidence(Evidence.AGREES)
    # Every direction in one stack of perturbed inputs, sharing its center: far fewer forward calls.
    estimates = directional_derivatives(
        judged.losses, name, directions, _step(judging, source), judging.reference_dtype(source)
    )
    projections, native_hits = [], []
    for direction, estimate in zip(directions, estimates):
        projections.append(compare_projection(judged.got, direction, estimate.value, estimate.error, tol))
        if native_usable:
            native_hits.append(compare_projection(native_gradient, direction, estimate.value, estimate.error, tol).ok)  # type: ignore[arg-type]
    if any(p.conclusive and not p.ok for p in projections):
        ok: bool | None = False
    elif all(p.conclusive for p in projections):
        ok = True
    else:
        ok = None
    native_projections = evidence(all(native_hits), available=bool(native_hits))
    return NumericEvidence(evidence(ok), projections=tuple(projections), native_projections=native_projections)


def numeric_evidence(
    judging: Judging, judged: Judged, native: NativeEvidence, tol: Tolerance, confirmed: bool = False
) -> tuple[NumericEvidence, tuple[str, ...]]:
    """Finite differences, whole (full mode, Jacobian permitting) or projected; and a note where full mode fell back."""
    settings, source = judging.settings, judged.source
    full = settings.mode == "full"
    notes: tuple[str, ...] = ()
    jacobian = source.size * judging.output_size
    if full and jacobian > JACOBIAN_MAX_ENTRIES:
        full = False
        notes = (
            f"full mode would compare a {jacobian:.2g}-entry Jacobian for {source.name}; "
            "checked with random projections (fast mode) instead",
        )
    if settings.reference not in ("both", "numeric"):
        return NumericEvidence(Evidence.UNAVAILABLE), notes
    if full:
        return full_evidence(judging, judged, tol), notes
    if confirmed:
        return NumericEvidence(Evidence.AGREES), notes
    # Native disagreement is settled from the careful stage's projections: no quick look then.
    quick = native.verdict is not Evidence.DISAGREES
    return projected_evidence(judging, judged, native.gradient, tol, quick=quick), notes


def settle_native_disagreement(
    judging: Judging, judged: Judged, native: NativeEvidence, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NativeEvidence, NumericEvidence, tuple[str, ...]]:
    """Native autodiff disagrees where the projections agree: settle it (fast mode), with notes saying how.

    Where native autodiff also misses the projections, TensorFlow cannot
    differentiate the forward pass here (stop_gradient, integer ops) and
    native evidence is set aside. Otherwise the gradient is compared element
    by element where affordable, since a projection can miss a difference in
    a few elements.
    """
    name = judged.source.name
    unavailable = replace(native, verdict=Evidence.UNAVAILABLE)
    if numeric.native_projections is Evidence.DISAGREES:
        note = (
            f"native autodiff of {name} disagrees with finite differences (the forward pass is not "
            "differentiable by TensorFlow, e.g. stop_gradient or integer ops); the custom gradient "
            "agrees with finite differences"
        )
        return unavailable, numeric, (note,)
    if judged.source.size > LOCALISE_MAX_ELEMENTS:
        return native, numeric, ()
    whole = _element_wise(judging, judged, numeric, tol)
    if whole.verdict is not Evidence.AGREES:
        return native, replace(whole, notes=()), whole.notes
    note = (
        f"native autodiff of {name} differs from the custom gradient, but finite differences "
        "agree with the custom gradient element by element"
    )
    return unavailable, replace(whole, notes=()), whole.notes + (note,)


def native_below_resolution(
    judged: Judged, native: NativeEvidence, tol: Tolerance
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
    if not compare_elementwise(judged.got, native.gradient, tol, mask=finite).ok:
        return native, ()
    comparison = native.comparison
    relative = f", {comparison.max_rel_error:.2g} relative" if comparison.max_rel_error is not None else ""
    note = (
        f"native autodiff of {judged.source.name} differs from the custom gradient by at most "
        f"{comparison.max_abs_error:.2g}{relative}, below what finite differences resolve, and finite "
        "differences agree with the custom gradient element by element: an approximate forward pass "
        "(a series, an iteration) has an approximate native derivative; not counted as a problem"
    )
    return replace(native, verdict=Evidence.UNAVAILABLE), (note,)


def _element_wise(judging: Judging, judged: Judged, numeric: NumericEvidence, tol: Tolerance) -> NumericEvidence:
    whole = full_evidence(judging, judged, tol)
    return replace(whole, projections=numeric.projections, native_projections=numeric.native_projections)


def localise_fast_failure(
    judging: Judging, judged: Judged, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NumericEvidence, tuple[str, ...]]:
    """A failed projection, checked element by element where affordable (fast mode), with its notes.

    The element-wise check is the finer one: where it passes, the projection
    met a kink and the evidence becomes inconclusive (a redraw decides);
    where it fails, the report gives the elements and the worst one.
    """
    if judged.source.size > LOCALISE_MAX_ELEMENTS:
        return numeric, ()
    whole = _element_wise(judging, judged, numeric, tol)
    verdict = Evidence.INCONCLUSIVE if whole.verdict is Evidence.AGREES else Evidence.DISAGREES
    return replace(whole, verdict=verdict, notes=()), whole.notes


# -- problems --------------------------------------------------------------------


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


def _non_finite(judged: Judged, notes: list[str], native: Outcome | None) -> Verdict:
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


# -- one gradient ----------------------------------------------------------------


def custom_gradient(source: Source, custom: Outcome, order: int) -> tuple[np.ndarray, list[str]]:
    """The custom gradient of ``source`` as judged (None compared as zeros, with a note saying so)."""
    name = source.name
    raw = custom.grads.get(name) if custom.grads else None
    notes = []
    if raw is None:
        notes.append(
            f"the backward function returned None for {name}: compared as zeros"
            if order == 1
            else f"the gradient of {name} does not depend on the inputs through TF ops (None): compared as zeros"
        )
        raw = np.zeros(source.shape)
    return (symmetrize(raw) if source.symmetric else raw), notes


def gather_evidence(
    judging: Judging, judged: Judged, native_outcome: Outcome | None, look: FirstLook | None = None
) -> tuple[NativeEvidence, NumericEvidence, list[str]]:
    """Native and numeric evidence about one gradient, refined in fast mode, with their notes in order."""
    source, settings = judged.source, judging.settings
    tol_native = tolerance(judging.tolerance_dtype(source), "native", settings.rtol, settings.atol)
    tol_numeric = tolerance(judging.tolerance_dtype(source), "numeric", settings.rtol, settings.atol)
    known = look.natives.get(source.name) if look is not None else None
    native = known if known is not None else native_evidence(judged, native_outcome, tol_native)
    confirmed = look is not None and look.agrees
    numeric, fallback = numeric_evidence(judging, judged, native, tol_numeric, confirmed)
    notes = [*native.notes, *fallback, *numeric.notes]
    numeric = replace(numeric, notes=())
    refined: tuple[str, ...] = ()
    if settings.mode == "fast":
        if numeric.verdict is Evidence.AGREES and native.verdict is Evidence.DISAGREES:
            native, numeric, refined = settle_native_disagreement(judging, judged, native, numeric, tol_numeric)
        elif numeric.verdict is Evidence.DISAGREES:
            numeric, refined = localise_fast_failure(judging, judged, numeric, tol_numeric)
        elif numeric.verdict is Evidence.INCONCLUSIVE and native.verdict is Evidence.DISAGREES:
            numeric, refined = resolve_inconclusive(judging, judged, numeric, tol_numeric)
            if numeric.verdict is Evidence.AGREES:
                native, below = native_below_resolution(judged, native, tol_numeric)
                refined = (*refined, *below)
    elif numeric.verdict is Evidence.AGREES and native.verdict is Evidence.DISAGREES:
        native, refined = native_below_resolution(judged, native, tol_numeric)
    return native, numeric, notes + list(refined)


def resolve_inconclusive(
    judging: Judging, judged: Judged, numeric: NumericEvidence, tol: Tolerance
) -> tuple[NumericEvidence, tuple[str, ...]]:
    """Projections too coarse to judge by while native autodiff disagrees (fast mode): element by element.

    Each projection sums every element's finite-difference error, so in
    float32 it can stay inconclusive where single elements resolve; full
    mode's element-wise comparison, where affordable, then decides as it
    would in full mode (and a native difference below its resolution is a
    note there too).
    """
    if judged.source.size > LOCALISE_MAX_ELEMENTS:
        return numeric, ()
    whole = _element_wise(judging, judged, numeric, tol)
    return replace(whole, notes=()), whole.notes


def judge(
    judging: Judging,
    judged: Judged,
    native_outcome: Outcome | None,
    notes: list[str],
    look: FirstLook | None = None,
) -> Verdict:
    """The verdict on one finite custom gradient at one draw: gather the evidence, then reconcile it."""
    native, numeric, found = gather_evidence(judging, judged, native_outcome, look)
    return decide(judging, judged, native, numeric, notes + found, native_ran=native_outcome is not None)


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


def judge_source(
    judging: Judging,
    source: Source,
    draw: int,
    values: dict[str, Any],
    custom: Outcome,
    native: Outcome | None,
    losses: BatchedLoss,
    order: int,
    look: FirstLook | None = None,
) -> Verdict:
    """The verdict on one source's gradient at one draw (a non-finite custom gradient needs no reference)."""
    got, notes = custom_gradient(source, custom, order)
    judged = Judged(source, draw, values, got, losses, custom.execution, order)
    if not np.all(np.isfinite(got)):
        return _non_finite(judged, notes, native)
    verdict = judge(judging, judged, native, notes, look)
    if order == 1 and (custom.grads or {}).get(source.name) is None:
        verdict = replace(verdict, returned_none=True)
    return verdict


# -- every gradient --------------------------------------------------------------


@dataclass(frozen=True)
class FirstLook:
    """Fast mode's first look at every gradient of one draw at once (:func:`first_look`)."""

    natives: dict[str, NativeEvidence]
    """Native evidence of the sources it compared, for judging to reuse."""
    agrees: bool
    """Every gradient agrees with native autodiff element by element, and finite differences along one
    direction through all inputs confirm them plainly."""


def first_look(
    judging: Judging,
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
    settings = judging.settings
    if settings.mode != "fast" or settings.reference != "both" or native is None or not native.ok or not sources:
        return None
    dtypes = {(judging.reference_dtype(s), judging.tolerance_dtype(s), _step(judging, s)) for s in sources}
    if len(dtypes) != 1:
        return None
    ((dtype, tolerance_dtype, step),) = dtypes
    natives: dict[str, NativeEvidence] = {}
    count = look_directions(settings.projections)
    gots: list[np.ndarray] = []
    directions: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for source in sources:
        got, _ = custom_gradient(source, custom, 1)
        if not np.all(np.isfinite(got)):
            return FirstLook(natives, agrees=False)
        judged = Judged(source, draw, values, got, losses, custom.execution, 1)
        tol_native = tolerance(tolerance_dtype, "native", settings.rtol, settings.atol)
        natives[source.name] = seen = native_evidence(judged, native, tol_native)
        if seen.verdict is not Evidence.AGREES or seen.notes:
            return FirstLook(natives, agrees=False)
        gots.append(np.asarray(got, dtype=np.float64))
        for direction, part in zip(directions, _look_directions(judging, judged, count)):
            direction[source.name] = part
    found = joint_central_differences(loss, values, directions, step, dtype)
    tol = tolerance(tolerance_dtype, "numeric", settings.rtol, settings.atol)
    agrees = all(
        _plainly_agrees(gots, list(d.values()), float(v), float(c), found.rounding, tol)
        for d, v, c in zip(directions, found.values, found.curvature)
    )
    return FirstLook(natives, agrees)


def look_directions(projections: int) -> int:
    """The first look's joint directions: one for each three projections per input (rounded up), so that
    asking for more projections asks the first look for more evidence too."""
    return -(-projections // 3)


def _look_directions(judging: Judging, judged: Judged, count: int) -> list[np.ndarray]:
    """The first look's parts of its directions along ``judged.source``: uniform on ``[-sqrt 3, sqrt 3]``.

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

    return _random_directions(judging, judged, "first look", count, uniform)


def _forward_non_finite_too(verdict: Verdict, harness: Harness, values: dict[str, Any]) -> Verdict:
    """A NaN gradient with no native autodiff to look at: the draw's fault where the forward output is NaN too."""
    finite = next((p for p in verdict.problems if p.check == "finite"), None)
    if finite is None:
        return verdict
    try:
        outputs = harness.outputs(values)
    except Exception as error:  # a forward pass that raises here says nothing about the domain
        if raised_by_gradcheck(error):
            raise
        return verdict
    if all(np.all(np.isfinite(o)) for o in outputs):
        return verdict
    what = finite.message.split(" has NaN")[0].removeprefix("the ")
    return replace(verdict, domain=f"the {what} was NaN or Inf where the forward output is NaN or Inf too")


def complex_notes(output_labels: list[str]) -> list[str]:
    """How complex outputs were checked (the convention, stated once per result)."""
    complex_outputs = [label[: -len(".real")] for label in output_labels if label.endswith(".real")]
    if not complex_outputs:
        return []
    return [
        f"complex output {', '.join(complex_outputs)} checked under TensorFlow's convention: the backward "
        "function gets dy = dL/dRe y + i dL/dIm y, and finite differences of the real loss "
        "<a, Re y> + <b, Im y> are the reference"
    ]


@dataclass(frozen=True)
class Judgement:
    """The verdicts on every source, the problems they found (before hints), and notes."""

    verdicts: dict[str, Verdict]
    problems: list[Problem]
    notes: list[str]
    """Notes about the run as a whole."""
    verdict_notes: list[str]
    """The verdicts' notes, in source order (the same note may come from several)."""
    redrawn: tuple[str, ...] = ()
    """Sources whose finite differences disagreed at the first draw only, and which have no problem."""
    domain: tuple[str, ...] = ()
    """Why the failures may be the draws' fault rather than the gradients' (see :attr:`Verdict.domain`)."""


#: One draw's verdicts on the sources still pending (``draw``, ``pending``); None where the custom
#: gradient could not be computed at that draw.
JudgeDraw = Callable[[int, list[Source]], dict[str, Verdict] | None]


def draw_loop(sources: list[Source], pending: list[Source], judge_draw: JudgeDraw, notes: list[str]) -> Judgement:
    """Judge ``pending`` at draw 0, then redraw those whose verdict was not final, up to :data:`MAX_DRAWS`.

    First and second order both judge through this loop: a verdict that is
    not final at one draw (only finite differences object or cannot tell)
    is judged again at the next, and at the last draw :func:`decide` makes
    what :data:`RECONCILE` says of it.
    """
    verdicts: dict[str, Verdict] = {}
    redrawn: set[str] = set()
    for index in range(MAX_DRAWS):
        if not pending:
            break
        found = judge_draw(index, pending)
        if found is None:
            break
        verdicts.update(found)
        still = [s for s in pending if not found[s.name].final]
        redrawn.update(s.name for s in still)
        pending = still
    ordered = [verdicts[s.name] for s in sources if s.name in verdicts]
    problems = [p for v in ordered for p in v.problems]
    settled = tuple(s.name for s in sources if s.name in redrawn and not verdicts[s.name].problems)
    domain = tuple(v.domain for v in ordered if v.domain is not None and v.problems)
    return Judgement(verdicts, problems, notes, [n for v in ordered for n in v.notes], settled, domain)


def value_checks(
    judging: Judging,
    harness: Harness,
    reference_harness: Harness,
    draws: Callable[[int], tuple[dict[str, Any], list[np.ndarray]]],
    primary: Outcome,
    skip: set[str],
    describe: Callable[[BaseException], str],
) -> Judgement:
    """Judge each source's gradient against the references, redrawing where only finite differences disagree."""
    notes: list[str] = judging.narrowed(harness.sources)

    def judge_draw(index: int, pending: list[Source]) -> dict[str, Verdict] | None:
        values, upstreams = draws(index)
        custom = primary if index == 0 else harness.custom(values, upstreams, primary.execution)
        if not custom.ok:
            return None
        native = None
        if judging.settings.compares_native:
            native = reference_harness.native(values, upstreams)
            if not native.ok and index == 0:
                notes.append(
                    f"native autodiff of the forward pass raised ({describe(native.error)}); "  # type: ignore[arg-type]
                    "finite differences decide"
                )
        losses = reference_harness.losses(values, upstreams)
        loss = functools.partial(reference_harness.loss, upstreams=upstreams)
        look = first_look(judging, pending, index, values, custom, native, losses, loss)
        found = {}
        for source in pending:
            found[source.name] = judge_source(judging, source, index, values, custom, native, losses, 1, look)
            if found[source.name].domain is None and (native is None or not native.ok):
                found[source.name] = _forward_non_finite_too(found[source.name], harness, values)
        return found

    pending = [s for s in harness.sources if s.name not in skip]
    return draw_loop(harness.sources, pending, judge_draw, notes)


def redraw_notes(judgement: Judgement, failed: bool) -> list[str]:
    """The run's notes, with the gradients settled on a fresh draw ("passed" only where the result passed)."""
    if not judgement.redrawn:
        return list(judgement.notes)
    note = "finite differences disagreed at the first draw but not on a fresh one (a kink within the step); " + (
        f"{', '.join(judgement.redrawn)} agreed on the fresh draw" if failed else "passed on redraw"
    )
    return [*judgement.notes, note]


def seen_in_every_execution(judgement: Judgement, differing: set[str | None]) -> Judgement:
    """Value problems with no execution mode where eager and tf.function gave the same gradient.

    Values are judged on the eager gradient; where tf.function's equals it,
    the problem is the same in both modes, so it names neither.
    """
    problems = [p if p.input in differing else replace(p, execution=None) for p in judgement.problems]
    verdicts = {
        name: v if name in differing else replace(v, problems=[replace(p, execution=None) for p in v.problems])
        for name, v in judgement.verdicts.items()
    }
    return replace(judgement, problems=problems, verdicts=verdicts)


def second_order_checks(
    judging: Judging,
    harness: Harness,
    reference_harness: Harness,
    draws: Callable[[int], tuple[dict[str, Any], list[np.ndarray]]],
    skip: set[str],
    describe: Callable[[BaseException], str],
) -> Judgement:
    """The gradient of the custom gradient against finite differences of the gradient (and native),
    through the same draws and decision as the first order (:func:`draw_loop`)."""
    sources = [s for s in harness.sources if s.name not in skip]
    failed: list[Problem] = []

    def judge_draw(index: int, pending: list[Source]) -> dict[str, Verdict] | None:
        values, upstreams = draws(index)
        rng = subject_rng(judging.settings.seed, judging.subject_name + ":second-order", index)
        weights = {s.name: rng.standard_normal(size=s.shape) for s in sources}
        custom = harness.second_order(values, upstreams, weights, "custom")
        if not custom.ok:
            failed.append(
                Problem(
                    "numeric",
                    None,
                    "second order: the gradient of the custom gradient could not be computed: "
                    + describe(custom.error),  # type: ignore[arg-type]
                    execution="eager",
                    hint="the backward function must be built from differentiable TensorFlow ops "
                    "(or carry a @tf.custom_gradient of its own)",
                    order=2,
                )
            )
            return None
        native = None
        if judging.settings.compares_native:
            native = reference_harness.second_order(values, upstreams, weights, "native")
        losses = one_at_a_time(lambda moved: reference_harness.first_order_loss(moved, upstreams, weights), values)
        return {s.name: judge_source(judging, s, index, values, custom, native, losses, 2) for s in pending}

    judgement = draw_loop(sources, sources, judge_draw, [])
    return replace(judgement, problems=[*judgement.problems, *failed]) if failed else judgement
