"""The checklist's value step: eager against ``tf.function``, then each gradient against the references
through the draw loop (:mod:`~gradcheck.checking.draw_loop`), then the second order; what they find
goes into the check's findings, with hints for the failing inputs (:mod:`~gradcheck.checking.diagnose`).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from gradcheck.checking import audit, diagnose, draw_loop, executions, proxied
from gradcheck.checking.build import choose_reference_harness, table_key
from gradcheck.checking.evidence import JudgingContext
from gradcheck.checking.exceptions import describe_exception
from gradcheck.checking.findings import Findings, Prepared
from gradcheck.checking.request import CheckRequest
from gradcheck.harness import Harness
from gradcheck.instrument import Outcome
from gradcheck.results import Problem, format_shape


def values_comparable(request: CheckRequest, prepared: Prepared, findings: Findings) -> bool:
    """Whether gradient values can and should be compared (and a note where not)."""
    settings = request.settings
    if not prepared.harness.sources:
        findings.notes.append("no float inputs or variables: only the count of returned gradients was checked")
    elif settings.shape_only:
        pass
    elif settings.reference == "none":
        findings.notes.append('reference = "none": count, shapes and dtypes audited, values not compared')
    elif any(p.check == "count" and p.input is None for p in findings.problems):
        findings.notes.append("values not compared: the gradients cannot be matched to the inputs")
    else:
        return True
    return False


def compare_values(
    request: CheckRequest,
    prepared: Prepared,
    outcomes: Mapping[str, Outcome],
    audited: audit.Audit,
    findings: Findings,
) -> None:
    """Eager against tf.function, then each gradient against the references, then the second order.

    Gradients the audit found to be no tensor, or handed back in another shape than their input's,
    have no values to compare.
    """
    working = [o for o in outcomes.values() if o.ok]
    if not working:
        return
    settings = request.settings
    differing: list[Problem] = []
    if len(working) == 2:
        sources = prepared.harness.sources
        differing = executions.compare_executions(sources, working[0], working[1], settings.rtol, settings.atol)
        findings.problems.extend(differing)
    skip = _not_compared(audited, findings)
    draw = prepared.draws(0)
    reference_harness, note = choose_reference_harness(
        request.subject.kind,
        findings.dtype,
        prepared.built,
        prepared.plan,
        prepared.harness,
        draw,
        settings.compares_native,
    )
    findings.reference_harness = reference_harness
    if note:
        findings.notes.append(note)
    context = _context(request, prepared, reference_harness)
    rerun = diagnose.Rerun(
        prepared.harness,
        reference_harness,
        prepared.plan,
        draw,
        subject_name=request.subject.name,
        numeric_only_table=table_key(request) if findings.numeric_only else None,
        declaring=proxied.declaring(request, prepared.built, prepared.plan),
    )
    describe = lambda error: describe_exception(error, request.subject.path)  # noqa: E731
    conclusion = draw_loop.value_checks(
        context, prepared.harness, reference_harness, prepared.draws, working[0], skip, describe
    )
    if len(working) == 2:  # the tf.function gradient is the eager one except where `differing` says
        conclusion = draw_loop.seen_in_every_execution(conclusion, {p.input for p in differing})
    _record(conclusion, rerun, findings)
    if settings.order == 2 and not findings.problems:
        second = draw_loop.second_order_checks(
            context, prepared.harness, reference_harness, prepared.draws, skip, describe
        )
        _record(second, rerun, findings)
        if second.agrees:
            findings.notes.append("second order: the gradient of the custom gradient agrees with the references")


def _not_compared(audited: audit.Audit, findings: Findings) -> set[str]:
    """The sources whose values are not compared: a shape, variables or count problem names them, or the audit
    found their gradients to be no tensors or of another shape than their input's (noted where no problem names it)."""
    skip = {p.input for p in findings.problems if p.check in ("shape", "variables", "count") and p.input}
    skip |= audited.not_tensors
    findings.note(*_misshapen_notes(audited.misshapen, skip))
    skip |= set(audited.misshapen)
    return skip


def _misshapen_notes(misshapen: Mapping[str, tuple[int, ...]], named: Set[str | None]) -> list[str]:
    """Why the values of a gradient no problem names were not compared: a backward function's gradient of
    the wrong shape reached it (the audit reported that backward function)."""
    return [
        f"values of {name} not compared: its gradient arrives with shape {format_shape(shape)} (from the shape "
        "problem above)"
        for name, shape in misshapen.items()
        if name not in named
    ]


def _context(request: CheckRequest, prepared: Prepared, reference_harness: Harness) -> JudgingContext:
    """What judging needs that does not change from one gradient to the next."""
    return JudgingContext(
        settings=request.settings,
        subject_name=request.subject.name,
        float64_references=reference_harness is not prepared.harness,
        output_size=prepared.harness.output_size,
        batching=reference_harness.batching,  # the live mapping: the harness learns each strategy as it first perturbs
        output_dtypes=tuple(spec.dtype for spec in reference_harness.output_specs),
    )


def _record(conclusion: draw_loop.Conclusion, rerun: diagnose.Rerun, findings: Findings) -> None:
    if conclusion.verdicts:
        findings.problems.extend(diagnose.with_hints(conclusion.problems, conclusion.verdicts, rerun))
    else:
        findings.problems.extend(conclusion.problems)
    findings.notes.extend(draw_loop.redraw_notes(conclusion, failed=bool(findings.problems)))
    findings.note(*conclusion.verdict_notes)
    findings.domain.extend(conclusion.domain)
