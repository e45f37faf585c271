"""What each reference says about one custom gradient: native autodiff element-wise, finite differences
whole (``full`` mode) or along random directions (``fast`` mode), with fast mode's quick stage.

Each reference gives :class:`Evidence`: it agrees, disagrees, cannot tell
(finite differences with a kink or jump within their step) or is not
available. The evidence is gathered here; :mod:`~gradcheck.checking.refine`
refines it in fast mode, and :mod:`~gradcheck.checking.verdict` decides what
it shows.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradcheck.arrays import projection_sums, scale_by_magnitude
from gradcheck.compare import (
    NOISE_FLOOR,
    UNRELIABLE,
    Comparison,
    ProjectionComparison,
    Tolerance,
    compare_elementwise,
    compare_projection,
)
from gradcheck.config import Settings
from gradcheck.dtypes import narrowest
from gradcheck.finite_differences import (
    BatchedLoss,
    central_differences,
    default_step,
    directional_derivatives,
    finite_difference_gradient,
)
from gradcheck.harness import Source
from gradcheck.instrument import Outcome
from gradcheck.results import format_shape
from gradcheck.sampling import subject_rng, symmetrize

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


@dataclass(frozen=True)
class JudgingContext:
    """The context every gradient of one check is judged in: what does not change from one gradient to the next."""

    settings: Settings
    subject_name: str
    float64_references: bool
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
        fed = source.dtype if source.kind == "variable" or not self.float64_references else "float64"
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


@dataclass(frozen=True)
class GradientCase:
    """One case to judge: the custom gradient of one source at one draw, with what its references need."""

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
        return gradient_label(self.source.name, self.order)


def gradient_label(name: str, order: int) -> str:
    """``gradient of x`` or ``second-order gradient of x``: the gradient a problem on ``name`` is about."""
    return f"{'second-order ' if order == 2 else ''}gradient of {name}"


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


# -- native evidence -------------------------------------------------------------


def native_evidence(case: GradientCase, native: Outcome | None, tol: Tolerance) -> NativeEvidence:
    """Native autodiff, element-wise, where it is finite."""
    if native is None or not native.ok:
        return NativeEvidence(Evidence.UNAVAILABLE)
    source = case.source
    raw = native.grads.get(source.name) if native.grads else None
    gradient = np.zeros(source.shape) if raw is None else raw
    if np.shape(gradient) != source.shape:
        note = (
            f"native autodiff gives the {case.what} in shape {format_shape(np.shape(gradient))}, not "
            f"{format_shape(source.shape)} (the gradient TensorFlow has for an op of the forward pass, such as "
            "tf.py_function, does not fit it); finite differences judge it"
        )
        return NativeEvidence(Evidence.UNAVAILABLE, notes=(note,))
    if source.symmetric:
        gradient = symmetrize(gradient)
    finite = np.isfinite(gradient)
    if not finite.any():
        note = f"native autodiff of the {case.what} is NaN/Inf everywhere; finite differences judge it"
        return NativeEvidence(Evidence.UNAVAILABLE, notes=(note,))
    comparison = compare_elementwise(case.got, gradient, tol, mask=finite)
    notes: tuple[str, ...] = ()
    if not finite.all():
        notes = (
            f"native autodiff gives NaN/Inf at {int((~finite).sum())} of {finite.size} elements "
            f"of the {case.what} (as it does where people need custom gradients); finite differences judge those",
        )
    return NativeEvidence(evidence(comparison.ok), gradient, comparison, notes)


# -- numeric evidence ------------------------------------------------------------


def difference_step(context: JudgingContext, source: Source) -> float:
    eps = context.settings.eps
    return eps if eps is not None else default_step(context.reference_dtype(source))


def _scale(case: GradientCase) -> np.ndarray:
    """``max(1, |x|)``, the finite-difference steps' and the directions' scale (one array, made in place)."""
    scale = np.abs(np.asarray(case.values[case.source.name], dtype=np.float64))
    return np.maximum(scale, 1.0, out=scale) if isinstance(scale, np.ndarray) else np.maximum(scale, 1.0)


def full_evidence(context: JudgingContext, case: GradientCase, tol: Tolerance) -> NumericEvidence:
    """The whole finite-difference gradient, element-wise."""
    source, got = case.source, case.got

    def acceptable(gradient: np.ndarray, error: np.ndarray) -> np.ndarray:
        # Elements that plain central differences already confirm need no second step.
        difference = np.abs(got - gradient)
        magnitude = float(np.max(np.abs(np.nan_to_num(gradient)), initial=0.0))
        bound = tol.atol + tol.rtol * (np.abs(gradient) + NOISE_FLOOR * magnitude) + error
        return np.isfinite(gradient) & (difference <= 0.5 * bound)

    base = np.asarray(case.values[source.name], dtype=np.float64)
    gradient, error, _ = finite_difference_gradient(
        case.losses,
        base,
        source.name,
        _scale(case),
        difference_step(context, source),
        context.reference_dtype(source),
        source.symmetric,
        accept=acceptable,
    )
    notes: tuple[str, ...] = ()
    strategy, why = context.batching.get(source.name, ("", ""))
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
    strict = compare_elementwise(got, gradient, tol, expected_error=error, mask=reliable(got, gradient, error, tol))
    return result, (None if strict.ok else False)


def reliable(got: np.ndarray, gradient: np.ndarray, error: np.ndarray, tol: Tolerance) -> np.ndarray:
    """The elements whose finite difference (``gradient``, ``error``) can judge ``got``.

    An element's finite difference is trusted when its own error is small
    next to the values being compared (either side), as for projections.
    """
    size = np.maximum(np.abs(gradient), np.abs(got))
    magnitude = float(np.max(size, initial=0.0))
    return np.asarray(error <= UNRELIABLE * (size + NOISE_FLOOR * magnitude + tol.atol))


#: The quick stage accepts a projection only when its whole error budget fits in this fraction of the
#: tolerance (and of the conclusiveness bound); the rest of the budget is what its argument spends.
QUICK_FRACTION = 0.5


def _directions(context: JudgingContext, case: GradientCase) -> list[np.ndarray]:
    """The random directions of one gradient's projections: the same stream whichever stage uses them."""
    return random_directions(
        context, case, "directions", context.settings.projections, lambda rng, shape: rng.standard_normal(size=shape)
    )


def random_directions(
    context: JudgingContext,
    case: GradientCase,
    stream: str,
    count: int,
    draw: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray],
) -> list[np.ndarray]:
    """``count`` directions along ``case.source`` from its own seeded ``stream``, symmetric where the input
    is, scaled by ``max(1, |x|)`` as the finite-difference steps are."""
    source = case.source
    rng = subject_rng(context.settings.seed, f"{context.subject_name}:{source.name}:{stream}:{case.order}", case.draw)
    values = np.asarray(case.values[source.name], dtype=np.float64)
    scale = None
    directions = []
    for _ in range(count):
        direction = draw(rng, source.shape)
        if source.symmetric:
            direction = symmetrize(direction)
        # The draw is this function's own array, so it is scaled in place: block by block where it is big.
        if not scale_by_magnitude(direction, values):
            scale = _scale(case) if scale is None else scale
            if isinstance(direction, np.ndarray) and direction.shape == np.shape(scale):
                direction *= scale
            else:
                direction = direction * scale
        directions.append(direction)
    return directions


def quick_agreement(context: JudgingContext, case: GradientCase, directions: list[np.ndarray], tol: Tolerance) -> bool:
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
    source = case.source
    found = central_differences(
        case.losses, source.name, directions, difference_step(context, source), context.reference_dtype(source)
    )
    got = np.asarray(case.got, dtype=np.float64)
    return all(
        plainly_agrees([got], [direction], float(value), float(curvature), found.rounding, tol)
        for direction, value, curvature in zip(directions, found.values, found.curvature)
    )


def plainly_agrees(
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
    context: JudgingContext, case: GradientCase, native_gradient: np.ndarray | None, tol: Tolerance, quick: bool = False
) -> NumericEvidence:
    """``<gradient, u>`` against directional finite differences along ``context.settings.projections`` random ``u``.

    With ``quick``, :func:`quick_agreement` looks first and, where it sees
    plain agreement, that is the evidence (with no projections kept:
    nothing reads them from agreeing evidence unless native autodiff
    disagrees, and then ``quick`` is off).
    """
    source, name = case.source, case.source.name
    native_usable = native_gradient is not None and bool(np.all(np.isfinite(native_gradient)))
    directions = _directions(context, case)
    if quick and quick_agreement(context, case, directions, tol):
        return NumericEvidence(Evidence.AGREES)
    # Every direction in one stack of perturbed inputs, sharing its center: far fewer forward calls.
    estimates = directional_derivatives(
        case.losses, name, directions, difference_step(context, source), context.reference_dtype(source)
    )
    projections, native_hits = [], []
    for direction, estimate in zip(directions, estimates):
        projections.append(compare_projection(case.got, direction, estimate.value, estimate.error, tol))
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
    context: JudgingContext, case: GradientCase, native: NativeEvidence, tol: Tolerance, quick: bool, confirmed: bool
) -> tuple[NumericEvidence, tuple[str, ...]]:
    """Finite differences, whole (full mode, Jacobian permitting) or projected; and a note where full mode fell back.

    ``quick``: the quick stage's agreement may stand for the careful
    stage's, where agreement would settle the gradient (the decision says,
    :func:`~gradcheck.checking.verdict.agreement_settles`); ``confirmed``:
    fast mode's first look has already shown that agreement.
    """
    settings, source = context.settings, case.source
    full = settings.mode == "full"
    notes: tuple[str, ...] = ()
    jacobian = source.size * context.output_size
    if full and jacobian > JACOBIAN_MAX_ENTRIES:
        full = False
        notes = (
            f"full mode would compare a {jacobian:.2g}-entry Jacobian for {source.name}; "
            "checked with random projections (fast mode) instead",
        )
    if settings.reference not in ("both", "numeric"):
        return NumericEvidence(Evidence.UNAVAILABLE), notes
    if full:
        return full_evidence(context, case, tol), notes
    if confirmed:
        return NumericEvidence(Evidence.AGREES), notes
    return projected_evidence(context, case, native.gradient, tol, quick=quick), notes


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
    return (symmetrize(raw) if source.symmetric and raw.shape == source.shape else raw), notes
