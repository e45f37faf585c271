"""The hints that name the likely bug behind a wrong gradient value: a custom gradient's, or TensorFlow's own.

Not every hint is here. The audit writes its structural problems' hints (a
gradient's count, dtype or shape, a missing ``variables``; the shape one with
:func:`shape_hint` from here), the verdict its own (a kink, a non-finite
gradient, finite differences unreliable at every draw, a second order that
cannot be computed), and the run those of its errors (an import, an
exception, float32 code, inputs too large). A subject that reaches no custom
gradient has its own hints here, the unreliable one found by the problem's
``reason``, not by its hint's text.

The pure pattern tests (numpy only, tested without TensorFlow) come first;
then the hints that rerun the backward function or native autodiff with one
thing changed (an operand transposed, one upstream gradient zeroed or two
exchanged, an all-ones upstream) and see whether the result matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gradcheck.checking import surrogates
from gradcheck.results import Problem

if TYPE_CHECKING:
    from gradcheck.harness import Harness
    from gradcheck.inputs import CallPlan
    from gradcheck.loss import Draw


def close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-3) -> bool:
    """Equal up to ``rtol`` in norm: for recognising patterns, not for verdicts."""
    if a.shape != b.shape:
        return False
    scale = max(float(np.linalg.norm(b.reshape(-1))), float(np.linalg.norm(a.reshape(-1))))
    if scale == 0:
        return True
    return float(np.linalg.norm((a - b).reshape(-1))) <= rtol * scale


def value_hint(
    got: np.ndarray,
    expected: np.ndarray,
    expected_with_ones: np.ndarray | None = None,
    pattern_rtol: float = 1e-3,
    declaring: surrogates.Declaring | None = None,
) -> str | None:
    """The likely bug behind a gradient that differs in value, where it is recognisable (``declaring``: where a
    surrogate's proxy line would go)."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape or not np.all(np.isfinite(got)):
        return None
    got_norm = float(np.linalg.norm(got.reshape(-1)))
    expected_norm = float(np.linalg.norm(expected.reshape(-1)))
    # A reference that is finite-difference noise beside this gradient (a step function's) is zero.
    if expected_norm <= pattern_rtol * got_norm or expected_norm == 0:
        if got_norm > 0:
            return "the reference gradient is zero but this one is not: a surrogate gradient (straight-through, " + (
                f"clipping)? {surrogates.declare(None, declaring)}"
            )
        return None
    if got_norm <= pattern_rtol * expected_norm:
        return "the gradient is zero: a missing term, or a stop_gradient in the backward function?"
    if expected_with_ones is not None and close(got, expected_with_ones, pattern_rtol):
        return "the gradient ignores the upstream gradient: missing multiply by dy?"
    factor = float(np.sum(got * expected) / np.sum(expected * expected))
    if close(got, factor * expected, pattern_rtol):
        if abs(factor + 1) <= pattern_rtol:
            return "wrong sign: the gradient is the negative of the expected one"
        if got.size > 1:  # one number is always some factor times another: no evidence of a factor bug
            return f"off by a constant factor: the gradient is {factor:.4g} times the expected one"
        return None
    square = got.ndim >= 2 and got.shape[-1] == got.shape[-2]
    if square and close(got, np.swapaxes(expected, -1, -2), pattern_rtol):
        return "the gradient is the transpose of the expected one: a missing or extra transpose?"
    return None


def swap_hint(
    grads: dict[str, np.ndarray], references: dict[str, np.ndarray], pattern_rtol: float = 1e-3
) -> dict[str, str]:
    """Inputs whose gradients look exchanged with another input's, by value."""
    hints: dict[str, str] = {}
    names = [n for n in grads if n in references]
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            a, b = grads[first], grads[second]
            if a.shape != references[second].shape or b.shape != references[first].shape:
                continue
            if close(a, references[second], pattern_rtol) and close(b, references[first], pattern_rtol):
                message = f"the gradients of {first} and {second} are swapped: return them in input order"
                hints[first] = message
                hints[second] = message
    return hints


def shape_hint(
    name: str,
    got: tuple[int | None, ...],
    expected: tuple[int, ...],
    returned_shapes: dict[str, tuple[int | None, ...] | None],
    input_shapes: dict[str, tuple[int | None, ...]],
) -> str | None:
    """The likely bug behind a gradient of the wrong shape."""
    for other, other_shape in input_shapes.items():
        if other == name or tuple(got) != tuple(other_shape):
            continue
        back = returned_shapes.get(other)
        if back is not None and tuple(back) == tuple(expected):
            return f"the gradients of {name} and {other} look swapped: each has the other's shape"
    if len(expected) == 2 and tuple(got) == tuple(reversed(expected)):
        return "the gradient has the transposed shape: a missing or extra transpose?"
    if tuple(got) == () and expected != ():
        return "a scalar gradient broadcasts silently in TensorFlow: the backward function reduced over all axes"
    axes = broadcast_axes(tuple(int(d) for d in got if d is not None), expected) if None not in got else None
    if axes:
        return (
            f"missing sum over the broadcast axis {axes[0]}"
            if len(axes) == 1
            else f"missing sum over the broadcast axes {', '.join(map(str, axes))}"
        ) + f": reduce_sum the gradient to the input's shape {list(expected)}"
    return None


def broadcast_axes(got: tuple[int, ...], expected: tuple[int, ...]) -> tuple[int, ...] | None:
    """Axes of ``got`` to sum over to reach ``expected``, if ``expected`` broadcasts to ``got``."""
    if len(got) < len(expected) or got == expected:
        return None
    lead = len(got) - len(expected)
    axes = list(range(lead))
    for i, (g, e) in enumerate(zip(got[lead:], expected)):
        if g == e:
            continue
        if e == 1:
            axes.append(lead + i)
            continue
        return None
    return tuple(axes) if axes else None


def pass_through(got: np.ndarray, upstream: np.ndarray, pattern_rtol: float = 1e-3) -> str | None:
    """How ``got`` passes ``upstream`` through, if it does: ``unchanged``, ``scaled by c``, ``with its sign
    reversed`` or ``where a mask keeps it`` (a clipped pass-through); None otherwise."""
    got = np.asarray(got, dtype=np.float64)
    upstream = np.asarray(upstream, dtype=np.float64)
    if got.shape != upstream.shape or not np.any(got) or not np.all(np.isfinite(got)):
        return None
    kept = surrogates.kept_mask(got, upstream, pattern_rtol)
    factor = float(np.sum(got * upstream) / max(float(np.sum(upstream * upstream)), 1e-300))
    if close(got, factor * upstream, pattern_rtol):
        if abs(factor - 1) <= pattern_rtol:
            return "unchanged"
        if abs(factor + 1) <= pattern_rtol:
            return "with its sign reversed"
        return f"scaled by {factor:.4g}"
    if kept is not None:
        return "where a mask keeps it (a clipped pass-through)"
    return None


def surrogate_hint(
    got: np.ndarray,
    expected: np.ndarray,
    upstream: np.ndarray | None,
    declaring: surrogates.Declaring | None = None,
    values: np.ndarray | None = None,
) -> str | None:
    """Recognise a surrogate gradient: the upstream passed through where the true derivative differs.

    Straight-through estimators, gradient scaling and reversal, and clipped
    pass-throughs look like sign, factor or swap bugs by value. Those
    readings are plausible only where the forward pass is itself a scaled
    identity other than the identity (``y = k x``): then a pass-through may
    be a forgotten factor, and no surrogate hint is given. With
    ``declaring`` (and the input's drawn ``values``, for a clip's bound),
    the hint gives the proxy line for the function's table.
    """
    how = surrogate_reading(got, expected, upstream)
    if how is None or upstream is None:
        return None
    expected = np.asarray(expected, dtype=np.float64)
    upstream = np.asarray(upstream, dtype=np.float64)
    if not np.any(expected):
        truth = "the forward pass's derivative is zero"
    elif close(expected, upstream):
        truth = "the forward pass is the identity"
    else:
        truth = "the forward pass's derivative differs"
    advice = surrogates.advice(how, declaring, values, got, upstream)
    return (
        f"the gradient is the upstream gradient passed through {how}, while {truth}: a surrogate gradient "
        f"(straight-through, gradient scaling or reversal, clipping)? {advice}"
    )


def surrogate_reading(got: np.ndarray, expected: np.ndarray, upstream: np.ndarray | None) -> str | None:
    """How a gradient that is no derivative of its forward pass passes the upstream through (see
    :func:`pass_through`), where that reads as a surrogate on purpose; None otherwise."""
    if upstream is None:
        return None
    how = pass_through(got, upstream)
    if how is None:
        return None
    expected = np.asarray(expected, dtype=np.float64)
    upstream = np.asarray(upstream, dtype=np.float64)
    factor = float(np.sum(expected * upstream) / max(float(np.sum(upstream * upstream)), 1e-300))
    linear = close(expected, factor * upstream) and abs(factor) > 1e-3 and abs(factor - 1) > 1e-3
    return None if linear else how


def identity_forward_hint(
    got: np.ndarray,
    expected: np.ndarray,
    upstream: np.ndarray | None,
    declaring: surrogates.Declaring | None = None,
    factor: np.ndarray | None = None,
) -> str | None:
    """The last reading of a gradient no other hint explains, where the forward pass is the identity.

    The true gradient is then the upstream itself, so a backward function
    that computes anything else (``dy * scale``, with ``scale`` another input,
    whose values are ``factor``) is most likely a surrogate on purpose
    (sonnet's ``scale_gradient``).
    """
    if upstream is None or not np.any(upstream) or not close(np.asarray(expected, np.float64), upstream):
        return None
    line = surrogates.scaled_by_argument(got, upstream, factor, declaring) if factor is not None else None
    return (
        "the gradient is not the upstream gradient, while the forward pass is the identity: a surrogate "
        f"(gradient scaling or reversal, straight-through)? {surrogates.declare(line, declaring)}"
    )


def upstream_of(rerun: Rerun, shape: tuple[int, ...]) -> np.ndarray | None:
    """The upstream gradient of the one output shaped like ``shape`` (None when not exactly one)."""
    matching = [u for u in rerun.draw.upstreams if u.shape == tuple(shape)]
    return matching[0] if len(matching) == 1 else None


# -- hints that rerun the backward function ------------------------------------


class HintEvidence(Protocol):
    """What a hint needs of a verdict: the gradient judged and what it was expected to be (read-only:
    a frozen :class:`gradcheck.checking.verdict.Verdict` is one)."""

    @property
    def custom(self) -> np.ndarray | None: ...
    @property
    def expected(self) -> np.ndarray | None: ...
    @property
    def returned_none(self) -> bool: ...


@dataclass(frozen=True)
class Rerun:
    """What the hints that rerun the user's code need: the harnesses, the plan and draw 0."""

    harness: Harness
    reference_harness: Harness
    plan: CallPlan
    draw: Draw
    """Draw 0."""
    subject_name: str = ""
    """The function or layer checked, for hints that name it."""
    numeric_only_table: str | None = None
    """Set where the subject reaches no custom gradient (TensorFlow's own gradient was checked against
    finite differences): its config table, ``[functions.NAME]``, for the hint that shows the line to add."""
    declaring: surrogates.Declaring | None = None
    """Where a surrogate's proxy line goes, and the proxy already declared: for the surrogate hints."""


def with_hints(problems: list[Problem], verdicts: Mapping[str, HintEvidence], rerun: Rerun) -> list[Problem]:
    """Attach the likely bug to each value problem where the pattern is recognisable."""
    customs: dict[str, np.ndarray] = {}
    expected: dict[str, np.ndarray] = {}
    for n, v in verdicts.items():
        if v.custom is not None and v.expected is not None:
            customs[n], expected[n] = v.custom, v.expected
    declaring = rerun.declaring
    declared = declaring.declared if declaring is not None else None
    passed = {
        n: hint
        for n in customs
        if not declared
        and (
            hint := surrogate_hint(
                customs[n],
                expected[n],
                upstream_of(rerun, customs[n].shape),
                declaring,
                surrogates.drawn(rerun.draw.values, n),
            )
        )
    }
    # A surrogate's gradient is no other input's gradient misplaced: no swap reading for it.
    swaps = swap_hint({n: g for n, g in customs.items() if n not in passed}, expected)
    ones: dict[str, np.ndarray] | None = None
    hinted = []
    for problem in problems:
        name = problem.input
        if rerun.numeric_only_table is not None:
            hinted.append(_numeric_only_hinted(problem, rerun.subject_name, rerun.numeric_only_table))
            continue
        if problem.hint is None and problem.check in ("native", "numeric") and name in expected:
            first = problem.order == 1
            hint = surrogates.against_proxy(customs[name], expected[name], declared) if declared and first else None
            hint = hint or (passed.get(name) if first else None) or swaps.get(name)
            if first and verdicts[name].returned_none:
                hint = none_hint(argument_name(rerun.plan, name))
            if hint is None and first:
                hint = conjugate_hint(rerun, name, customs[name], expected[name])
            if hint is None:
                if ones is None:
                    ones = native_with_ones_upstream(rerun)
                hint = value_hint(customs[name], expected[name], ones.get(name), declaring=declaring)
            if hint is None and first:
                hint = upstream_hint(rerun, name, customs[name])
            if hint is None and first:
                hint = transposed_operand_hint(rerun, name, expected[name])
            if hint is None and first and not declared:
                factor = surrogates.drawn(rerun.draw.values, declaring.second_input if declaring is not None else None)
                hint = identity_forward_hint(
                    customs[name], expected[name], upstream_of(rerun, customs[name].shape), declaring, factor
                )
            if hint is not None:
                problem = replace(problem, hint=hint)
        hinted.append(problem)
    return hinted


def _numeric_only_hinted(problem: Problem, subject: str, table: str) -> Problem:
    """The hint for a subject that reaches no custom gradient: its gradient is TensorFlow's own.

    The hints for custom gradients (a swap, a sign, a missing dy in the
    backward function, or ``reference = "native"``) do not apply: there is
    no backward function of the user's, and native autodiff is the gradient
    being judged.
    """
    if problem.check != "numeric" or problem.order != 1:
        return problem
    if problem.reason == "unreliable-numeric":
        return replace(problem, hint=unreliable_numeric_only_hint(subject, table))
    if problem.hint is None:
        return replace(problem, hint=registered_gradient_hint(subject, table))
    return problem


def registered_gradient_hint(subject: str, table: str) -> str:
    """TensorFlow's own gradient differs from finite differences: a registered surrogate, on purpose or not."""
    return (
        f"{subject} reaches no tf.custom_gradient: this is TensorFlow's own gradient (the gradients registered "
        "for the ops it runs, tf.RegisterGradient and gradient_override_map included) differing from finite "
        "differences. Quantization and rounding ops (FakeQuant, straight-through estimators) register surrogate "
        f"gradients on purpose; if that is intended, {surrogates.declare_numeric_only(table)}"
    )


def unreliable_numeric_only_hint(subject: str, table: str) -> str:
    """Finite differences could not judge TensorFlow's own gradient, and there is no other reference."""
    return (
        f"{subject} reaches no tf.custom_gradient, so finite differences are its only reference: draw inputs "
        "away from the kink (low, high), or if TensorFlow's gradient is a surrogate on purpose (a rounding or "
        f"quantization op's straight-through gradient), {surrogates.declare_numeric_only(table)}"
    )


def none_hint(name: str) -> str:
    """A gradient the backward function left out (None): on purpose or not, and how to declare it."""
    return (
        f"the backward function returned None for {name}: if {name} is left out on purpose, say so in the "
        f'config (make it a constant: constants = {{ {name} = ... }}, or set reference = "none"); '
        "if not, its gradient is missing"
    )


def argument_name(plan: CallPlan, name: str) -> str:
    """The argument a gradient belongs to: a complex input for its ``.real`` and ``.imag`` parts (one gradient)."""
    for argument in plan.arguments:
        if argument.role == "complex" and any(part.name == name for part in argument.items):
            return argument.name
    return name


def upstream_hint(rerun: Rerun, name: str, got: np.ndarray) -> str | None:
    """Recognise a backward function that drops or mixes up the upstream gradients of several outputs.

    Reruns native autodiff with one upstream zeroed, or two same-shaped
    upstreams exchanged: if that is what the custom gradient computed, the
    backward function ignores that output's upstream or takes them in
    another order than TensorFlow passes them.
    """
    labels = rerun.reference_harness.output_labels
    if len(labels) < 2:
        return None
    upstreams = rerun.draw.upstreams

    def native_with(changed: list[np.ndarray]) -> np.ndarray | None:
        outcome = rerun.reference_harness.native(replace(rerun.draw, upstreams=changed))
        return outcome.grads.get(name) if outcome.ok and outcome.grads else None

    for j, label in enumerate(labels):
        changed = [np.zeros_like(u) if i == j else u for i, u in enumerate(upstreams)]
        native = native_with(changed)
        if native is not None and close(got, native):
            return (
                f"the backward function ignores the upstream gradient of output {label} "
                f"(its argument {j + 1} of {len(labels)})"
            )
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            if upstreams[i].shape != upstreams[j].shape:
                continue
            changed = list(upstreams)
            changed[i], changed[j] = upstreams[j], upstreams[i]
            native = native_with(changed)
            if native is not None and close(got, native):
                return (
                    f"the backward function takes the upstream gradients of outputs {labels[i]} and "
                    f"{labels[j]} in swapped order: TensorFlow passes one per output in tf.nest.flatten "
                    "order (a dict's keys sorted)"
                )
    return None


def conjugate_hint(rerun: Rerun, name: str, got: np.ndarray, expected: np.ndarray) -> str | None:
    """Recognise a backward function that misses (or adds) a complex conjugate.

    The gradient of a complex input's imaginary part with its sign reversed
    is the conjugate of the right gradient. For complex outputs, native
    autodiff is rerun with every upstream gradient conjugated (its imaginary
    part's upstream negated): if that (conjugated once more, for a complex
    input) is what the custom gradient computed, the backward function
    follows the other convention for complex derivatives.
    """
    imaginary_part = name.endswith(".imag")
    conjugated = imaginary_part and close(got, -np.asarray(expected))
    labels = rerun.reference_harness.output_labels
    imaginary = [i for i, label in enumerate(labels) if label.endswith(".imag")]
    if not conjugated and imaginary:
        changed = [-u if i in imaginary else u for i, u in enumerate(rerun.draw.upstreams)]
        outcome = rerun.reference_harness.native(replace(rerun.draw, upstreams=changed))
        native = outcome.grads.get(name) if outcome.ok and outcome.grads else None
        conjugated = native is not None and close(got, -native if imaginary_part else native)
    if not conjugated:
        return None
    return (
        "the gradient is what the conjugate upstream gives: TensorFlow passes dy = dL/dRe y + i dL/dIm y "
        "and expects Re(dy * conj(dy/dx)) for a real x (dy * conj(f'(z)) for a complex z); "
        "a missing or extra tf.math.conj?"
    )


def transposed_operand_hint(rerun: Rerun, name: str, expected: np.ndarray) -> str | None:
    """Recognise a missing transpose inside the backward function.

    For each square matrix input, rerun the custom gradient with that
    input transposed: if the gradient of ``name`` then equals the
    expected one, the backward function uses the operand the wrong way round.
    """
    for argument in rerun.plan.tensors:
        spec = argument.spec
        if spec is None or len(spec.shape) < 2 or spec.shape[-1] != spec.shape[-2] or spec.symmetric:
            continue
        moved = dict(rerun.draw.values)
        moved[argument.name] = np.swapaxes(rerun.draw.values[argument.name], -1, -2)
        outcome = rerun.harness.custom(rerun.draw.at(moved), "eager")
        moved_gradient = None if outcome.grads is None else outcome.grads.get(name)
        if not outcome.ok or moved_gradient is None:
            continue
        if close(moved_gradient, expected):
            return (
                f"the gradient of {name} comes out right when {argument.name} is transposed: "
                f"a missing or extra transpose of {argument.name} in the backward function"
            )
    return None


def native_with_ones_upstream(rerun: Rerun) -> dict[str, np.ndarray]:
    """Native gradients for an all-ones upstream, to recognise an ignored dy."""
    outcome = rerun.reference_harness.native(
        replace(rerun.draw, upstreams=[np.ones_like(u) for u in rerun.draw.upstreams])
    )
    if not outcome.ok or outcome.grads is None:
        return {}
    return {n: g for n, g in outcome.grads.items() if g is not None and np.all(np.isfinite(g))}
