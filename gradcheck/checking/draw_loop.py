"""Each gradient judged at each draw, for the first and the second order: the draw loop.

At draw 0 every gradient is judged (:func:`judge_source`: the evidence of
:mod:`~gradcheck.checking.evidence`, refined by
:mod:`~gradcheck.checking.refine`, decided by :mod:`~gradcheck.checking.verdict`);
what is not final is judged again on fresh draws, up to
:data:`~gradcheck.checking.verdict.MAX_DRAWS` (:func:`draw_loop`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gradcheck.checking.evidence import GradientCase, JudgingContext, custom_gradient, gradient_label
from gradcheck.checking.refine import FirstLook, first_look, gather_evidence
from gradcheck.checking.verdict import (
    MAX_DRAWS,
    Verdict,
    decide,
    misshapen_verdict,
    non_finite_verdict,
    uncomputed_second_order,
)
from gradcheck.finite_differences import BatchedLoss, Loss, one_at_a_time
from gradcheck.harness import Harness, Source
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.loss import Draw
from gradcheck.results import Problem
from gradcheck.sampling import subject_rng


def judge(
    context: JudgingContext,
    case: GradientCase,
    native_outcome: Outcome | None,
    notes: list[str],
    look: FirstLook | None = None,
) -> Verdict:
    """The verdict on one finite custom gradient at one draw: gather the evidence, then reconcile it."""
    native, numeric, found = gather_evidence(context, case, native_outcome, look)
    return decide(context, case, native, numeric, notes + found, native_ran=native_outcome is not None)


def judge_source(
    context: JudgingContext,
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
    case = GradientCase(source, draw, values, got, losses, custom.execution, order)
    if got.shape != source.shape:  # the audit found it at the first draw; here a later draw or order 2 did
        return misshapen_verdict(case, notes)
    if not np.all(np.isfinite(got)):
        return non_finite_verdict(case, notes, native)
    verdict = judge(context, case, native, notes, look)
    if order == 1 and (custom.grads or {}).get(source.name) is None:
        verdict = replace(verdict, returned_none=True)
    return verdict


def _forward_non_finite_too(verdict: Verdict, harness: Harness, values: dict[str, Any]) -> Verdict:
    """A NaN gradient with no native autodiff to look at: the draw's fault where the forward output is NaN too."""
    finite = next((p for p in verdict.problems if p.reason == "non-finite-gradient"), None)
    if finite is None or finite.input is None:
        return verdict
    try:
        outputs = harness.outputs(values)
    except Exception as error:  # a forward pass that raises here says nothing about the domain
        if raised_by_gradcheck(error):
            raise
        return verdict
    if all(np.all(np.isfinite(o)) for o in outputs):
        return verdict
    what = gradient_label(finite.input, finite.order)
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
class Conclusion:
    """What the draw loop concludes: the verdicts on every source, the problems they found (before hints), and notes."""

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

    @property
    def agrees(self) -> bool:
        """Every gradient judged has a final verdict that reports nothing, and nothing else was reported."""
        return not self.problems and all(v.final for v in self.verdicts.values())


#: One draw's verdicts on the sources still pending (``draw``, ``pending``); None where the custom
#: gradient could not be computed at that draw.
JudgeDraw = Callable[[int, list[Source]], dict[str, Verdict] | None]


def draw_loop(sources: list[Source], pending: list[Source], judge_draw: JudgeDraw, notes: list[str]) -> Conclusion:
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
    return Conclusion(verdicts, problems, notes, [n for v in ordered for n in v.notes], settled, domain)


def value_checks(
    context: JudgingContext,
    harness: Harness,
    reference_harness: Harness,
    draws: Callable[[int], Draw],
    primary: Outcome,
    skip: set[str],
    describe: Callable[[BaseException], str],
) -> Conclusion:
    """Judge each source's gradient against the references, redrawing where only finite differences disagree."""
    notes: list[str] = context.narrowed(harness.sources)

    def judge_draw(index: int, pending: list[Source]) -> dict[str, Verdict] | None:
        draw = draws(index)
        values = draw.values
        custom = primary if index == 0 else harness.custom(draw, primary.execution)
        if not custom.ok:
            return None
        native = None
        if context.settings.compares_native:
            native = reference_harness.native(draw)
            if not native.ok and index == 0:
                notes.append(
                    f"native autodiff of the forward pass raised ({describe(native.error)}); "  # type: ignore[arg-type]
                    "finite differences decide"
                )
        losses = reference_harness.losses(draw)
        look = first_look(context, pending, index, values, custom, native, losses, _loss_at(reference_harness, draw))
        found = {}
        for source in pending:
            found[source.name] = judge_source(context, source, index, values, custom, native, losses, 1, look)
            if found[source.name].domain is None and (native is None or not native.ok):
                found[source.name] = _forward_non_finite_too(found[source.name], harness, values)
        return found

    pending = [s for s in harness.sources if s.name not in skip]
    return draw_loop(harness.sources, pending, judge_draw, notes)


def _loss_at(harness: Harness, draw: Draw) -> Loss:
    """The loss as finite differences see it: a function of the values, at the draw's upstream gradients."""
    return lambda moved: harness.loss(draw.at(moved))


def redraw_notes(conclusion: Conclusion, failed: bool) -> list[str]:
    """The run's notes, with the gradients settled on a fresh draw ("passed" only where the result passed)."""
    if not conclusion.redrawn:
        return list(conclusion.notes)
    note = "finite differences disagreed at the first draw but not on a fresh one (a kink within the step); " + (
        f"{', '.join(conclusion.redrawn)} agreed on the fresh draw" if failed else "passed on redraw"
    )
    return [*conclusion.notes, note]


def seen_in_every_execution(conclusion: Conclusion, differing: set[str | None]) -> Conclusion:
    """Value problems with no execution mode where eager and tf.function gave the same gradient.

    Values are judged on the eager gradient; where tf.function's equals it,
    the problem is the same in both modes, so it names neither.
    """
    problems = [p if p.input in differing else replace(p, execution=None) for p in conclusion.problems]
    verdicts = {
        name: v if name in differing else replace(v, problems=[replace(p, execution=None) for p in v.problems])
        for name, v in conclusion.verdicts.items()
    }
    return replace(conclusion, problems=problems, verdicts=verdicts)


def second_order_checks(
    context: JudgingContext,
    harness: Harness,
    reference_harness: Harness,
    draws: Callable[[int], Draw],
    skip: set[str],
    describe: Callable[[BaseException], str],
) -> Conclusion:
    """The gradient of the custom gradient against finite differences of the gradient (and native),
    through the same draws and decision as the first order (:func:`draw_loop`)."""
    sources = [s for s in harness.sources if s.name not in skip]
    failed: list[Problem] = []

    def judge_draw(index: int, pending: list[Source]) -> dict[str, Verdict] | None:
        draw = draws(index)
        rng = subject_rng(context.settings.seed, context.subject_name + ":second-order", index)
        weights = {s.name: rng.standard_normal(size=s.shape) for s in sources}
        custom = harness.second_order(draw, weights, "custom")
        if not custom.ok:
            failed.append(uncomputed_second_order(describe(custom.error)))  # type: ignore[arg-type]
            return None
        native = None
        if context.settings.compares_native:
            native = reference_harness.second_order(draw, weights, "native")
        losses = one_at_a_time(lambda moved: reference_harness.first_order_loss(draw.at(moved), weights), draw.values)
        return {s.name: judge_source(context, s, index, draw.values, custom, native, losses, 2) for s in pending}

    conclusion = draw_loop(sources, sources, judge_draw, [])
    return replace(conclusion, problems=[*conclusion.problems, *failed]) if failed else conclusion
