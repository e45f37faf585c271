"""One custom-gradient function or layer -> one :class:`Result`; the user's exceptions become results.

:func:`check_subject` reads as the checklist it follows:

1. :mod:`~gradcheck.checking.build`, :mod:`~gradcheck.checking.probe`,
   :mod:`~gradcheck.checking.draws`: build the call target (a function, a
   bound method, a gradient wrapper, or a Keras layer whose custom-gradient
   functions are swapped in and out), plan the call (config, input
   signature, or probing small shapes) and draw seeded inputs; code written
   for float32 is rerun in float32, and defaulted constants the backward
   function treats as named arguments are rerun by keyword;
2. one forward pass, which also finds the variables it reads, then the
   custom vector-Jacobian product in each execution mode through an
   instrumented backward function;
3. :mod:`~gradcheck.checking.audit`: count, shapes, dtypes, variable gradients,
   whether TensorFlow called the backward function at all;
4. unless ``--shape-only``, :mod:`~gradcheck.checking.values`: eager
   against ``tf.function``, then :mod:`~gradcheck.checking.draw_loop`: each
   gradient against native autodiff and finite differences
   (:mod:`~gradcheck.checking.evidence`, refined by
   :mod:`~gradcheck.checking.refine`, decided by
   :mod:`~gradcheck.checking.verdict`), redrawing where only finite
   differences disagree; with ``--order 2`` the same for the gradient of the
   gradient;
5. :mod:`~gradcheck.checking.diagnose`: name the likely bug where the pattern is
   recognisable;
6. put the user's variables back as they were.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from gradcheck import tracebacks
from gradcheck.checking import audit, draw_loop, executions, proxied
from gradcheck.checking.build import (
    Built,
    NeedsConfig,
    NeedsFloat32,
    build,
    dtype_clash,
    keyword_convention,
    table_key,
)
from gradcheck.checking.conditions import check_conditions
from gradcheck.checking.draws import (
    Draws,
    InputTooLarge,
    draw_values,
    freeze,
    input_records,
    redraw_layer_weights,
    seeded_upstreams,
)
from gradcheck.checking.exceptions import UserCodeError, describe_exception, exception_problem, first_line
from gradcheck.checking.findings import Findings, Prepared
from gradcheck.checking.probe import ShapeGuess, guess_shapes, probe
from gradcheck.checking.request import CheckRequest
from gradcheck.checking.values import compare_values, values_comparable
from gradcheck.first_pass import first_pass
from gradcheck.harness import Harness
from gradcheck.inputs import CallPlan
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.kinds import Reached
from gradcheck.loss import Draw
from gradcheck.results import Problem, Result, format_shape
from gradcheck.sampling import subject_rng
from gradcheck.targets import NestedTarget
from gradcheck.targets.proxy import ProxyError, inner_target

__all__ = ["CheckRequest", "ShapeGuess", "check_subject", "guess_shapes", "input_records"]


@dataclass(frozen=True)
class _Retry:
    """Run the check again: in float32, or with some constants passed by keyword."""

    dtype: str
    keywords: frozenset[str] = frozenset()


def _path(request: CheckRequest) -> str | None:
    return request.subject.path


# -- the checklist ---------------------------------------------------------------


def _run(request: CheckRequest, findings: Findings) -> str:
    """Check the subject, again with narrower draws where the draws, not the gradient, look at fault.

    Inputs drawn by default (guessed, or configured by shape alone) may
    leave the function's domain: a NaN gradient where native autodiff is
    NaN too, or finite differences inconclusive at every draw because the
    forward output does not vary smoothly there. The check is then rerun
    with positive draws, then draws in [0.1, 0.9), as probing narrows; the
    first conclusive try is the result, with a note saying so. Otherwise
    the first try is reported as it was.
    """
    status = _checked(request, findings)
    tried = findings
    while status == "failed" and tried.domain and tried.plan is not None and tried.plan.narrowed() is not None:
        trial = Findings(dtype=request.settings.dtype, redrawn_because=(*tried.redrawn_because, tried.domain[0]))
        trial_status = _checked(request, trial)
        if trial_status in ("passed", "failed") and not trial.domain:
            for name in (f.name for f in fields(Findings)):
                setattr(findings, name, getattr(trial, name))
            return trial_status
        if trial_status != "failed" or trial.plan is None:
            break
        tried = trial
    return status


def _checked(request: CheckRequest, findings: Findings) -> str:
    """Check the subject once; return its status. Variables are restored whatever happens.

    A straight loop over attempts: float64 first (unless the dtype is set),
    float32 where the code is written for it, and once more with constants
    passed by keyword where the backward function treats them so.
    """
    attempt: str | _Retry = _Retry(findings.dtype)
    try:
        while isinstance(attempt, _Retry):
            findings.dtype = attempt.dtype
            attempt = _attempt(request, findings, attempt.keywords)
        return attempt
    except NeedsConfig as missing:
        findings.skip_reason = str(missing)
        return "skipped"
    except InputTooLarge as large:
        where = f"{request.config_label}: {table_key(request)}"
        findings.problems.append(
            Problem("exception", large.name, f"{where}: {large}", hint="give the input smaller shapes in the config")
        )
        return "error"
    except UserCodeError as error:
        cause = error.__cause__ or error
        findings.problems.append(exception_problem(str(error), cause, _path(request), described=False))
        return "error"
    finally:
        for harness in (findings.harness, findings.reference_harness):
            if harness is not None:
                harness.restore()


def _attempt(request: CheckRequest, findings: Findings, keywords: frozenset[str]) -> str | _Retry:
    """One try at the whole check in ``findings.dtype``."""
    prepared = _prepare(request, findings, keywords)
    if not isinstance(prepared, Prepared):
        return prepared
    draw = prepared.draws(0)
    outputs = prepared.outputs if prepared.outputs is not None else prepared.harness.outputs(draw.values)
    if any(not np.all(np.isfinite(o)) for o in outputs):
        findings.problems.append(_non_finite_forward())
        if findings.redrawn_because:  # draws gradcheck narrowed itself: narrower ones may still fit
            findings.domain.append("the forward output was NaN or Inf")
        return "failed"
    outcomes = {e: prepared.harness.custom(draw, e) for e in request.settings.executions}
    clash = _dtype_clash_everywhere(outcomes) if findings.dtype == "float64" else None
    if clash is not None:
        return _float32(request, findings, *clash)
    retry = keyword_convention(prepared.plan, request.subject.kind, outcomes, keywords)
    if retry:
        prepared.harness.restore()
        findings.notes.append(
            f"{', '.join(sorted(retry))} passed by keyword: the backward function returns no gradient for "
            "it, as for an argument the caller names"
        )
        return _Retry(findings.dtype, keywords | retry)
    subject = request.subject
    target = inner_target(prepared.built.target)
    seen = subject.kind.reached(subject, outcomes, table_key(request), request.settings.reference, target)
    if seen is not None:
        request, status = _reached(request, seen, findings)
        if status is not None:
            return status
        if findings.numeric_only:
            outcomes = _as_written(prepared, draw, request.settings.executions)
    findings.backward_line = findings.backward_line or _backward_line(outcomes)
    audited = _audit(request, prepared, outcomes, findings)
    if any(p.check == "exception" for p in findings.problems):
        return "error"
    judged = {e: o for e, o in outcomes.items() if seen is None or seen.judged is None or e in seen.judged}
    if judged and values_comparable(request, prepared, findings):
        compare_values(request, prepared, judged, audited, findings)
    return "failed" if findings.problems else "passed"


def _reached(request: CheckRequest, seen: Reached, findings: Findings) -> tuple[CheckRequest, str | None]:
    """A subject checked through the custom gradients it reaches: skip it, or say what it reached."""
    if seen.skip_reason is not None:
        findings.skip_reason = seen.skip_reason
        return request, "skipped"
    findings.inner = seen.inner_functions
    findings.problems.extend(seen.problems)
    if seen.note:
        findings.note(seen.note)
    findings.numeric_only = seen.numeric_only
    if seen.numeric_only and request.settings.reference in ("both", "native"):
        request = replace(request, settings=replace(request.settings, reference="numeric"))
    return request, None


def _as_written(prepared: Prepared, draw: Draw, executions: tuple[str, ...]) -> dict[str, Outcome]:
    """TensorFlow's gradient of a subject that reaches no custom gradient, its code run as written.

    The first run made every ``tf.function`` plain Python to see the custom
    gradients it reaches; TensorFlow's tape then ignores a
    ``gradient_override_map`` inside one, so a registered gradient would go
    unchecked (and the default one be checked in its place).
    """
    target = inner_target(prepared.built.target)
    if isinstance(target, NestedTarget):
        target.as_written = True
    prepared.harness.forget_traces()
    return {e: prepared.harness.custom(draw, e) for e in executions}


def _prepare(request: CheckRequest, findings: Findings, keywords: frozenset[str]) -> Prepared | str | _Retry:
    """Build, plan (probing where shapes are open), run the first forward pass and make draw 0."""
    dtype = findings.dtype
    built = build(request, dtype)
    plan = _planned(request, findings, built, keywords)
    if not isinstance(plan, CallPlan):
        return plan
    findings.plan = plan
    findings.harness = None
    built = proxied.with_proxies(built, request)
    settings = request.settings
    try:
        # Frozen before the first forward pass, so that its tensors serve the later passes too.
        values = draw_values(plan, subject_rng(settings.seed, request.subject.name, 0))
        freeze(values.values())
        upstreams = functools.partial(seeded_upstreams, settings.seed, request.subject.name, 0)
        first = first_pass(built.target, plan, values, built.name_variable, upstreams, settings.compares_native)
        harness = findings.harness = Harness(built.target, plan, first)
        # The first forward pass found the variables: draw 0 holds their values as they are.
        values.update(harness.variables.values())
    except Exception as error:  # the forward pass raised
        if raised_by_gradcheck(error) or isinstance(error, InputTooLarge):
            raise
        if isinstance(error, ProxyError):
            raise UserCodeError(first_line(error)) from error
        if dtype == "float64" and dtype_clash(error):
            return _float32(request, findings, error)
        findings.problems.append(exception_problem("forward pass raised", error, _path(request)))
        return "error"
    redrawn = built.layer is not None and built.fresh_layer
    if redrawn:
        rng = subject_rng(request.settings.seed, request.subject.name + ":weights", 0)
        redraw_layer_weights(values, built.layer, harness, rng)
    draws = Draws(request.settings.seed, request.subject.name, plan, harness)
    assert first.upstreams is not None  # asked for
    draws.first(values, first.upstreams)
    outputs = first.outputs
    if not outputs:
        findings.skip_reason = "the forward pass has no float or complex outputs: there is no gradient to check"
        return "skipped"
    empty = _nothing_to_compare(plan, values, outputs)
    if empty is not None:
        findings.skip_reason = empty
        return "skipped"
    findings.note(*draw_loop.complex_notes(harness.output_labels))
    if (note := proxied.proxy_note(built.target)) is not None:
        findings.note(note)
    return Prepared(built, plan, harness, draws, None if redrawn else outputs)


def _planned(
    request: CheckRequest, findings: Findings, built: Built, keywords: frozenset[str]
) -> CallPlan | str | _Retry:
    """The call plan: the built one with ``keywords`` passed by keyword, probed where shapes are open,
    narrowed once per earlier try."""
    plan = built.plan.with_keywords(set(keywords)) if keywords else built.plan
    if plan.unknown:
        try:
            probed = probe(request, plan, built, findings.dtype)
        except NeedsFloat32 as clash:
            return _float32(request, findings, clash.error)
        if probed.plan is None:
            findings.skip_reason = probed.skip_reason
            return "skipped"
        findings.note(probed.note)  # type: ignore[arg-type]
        plan = probed.plan
    if findings.redrawn_because:
        plan = _narrowed(plan, findings)
    return plan


def _nothing_to_compare(plan: CallPlan, values: Mapping[str, Any], outputs: list[np.ndarray]) -> str | None:
    """Why no gradient element can be compared (every drawn input or every output has size 0), or None.

    A zero-size input comes from an ``input_signature`` (``[0, 2]``; the config refuses size 0):
    a check of it compares nothing, and must not pass as if it had.
    """
    drawn = [leaf for leaf in plan.leaves if leaf.spec is not None and leaf.spec.differentiable]
    sizes = {leaf.name: np.shape(values[leaf.name]) for leaf in drawn if leaf.name in values}
    if sizes and all(math.prod(shape) == 0 for shape in sizes.values()):
        shown = ", ".join(f"{name} {format_shape(shape)}" for name, shape in sizes.items())
        return f"nothing to compare: every input has size 0 ({shown}); give the input_signature non-zero sizes"
    if all(np.size(output) == 0 for output in outputs):
        return "nothing to compare: every output of the forward pass has size 0"
    return None


def _narrowed(plan: CallPlan, findings: Findings) -> CallPlan:
    """The plan with its default draws narrowed once per earlier try, and a note saying why."""
    reasons = []
    narrowed = None
    for reason in findings.redrawn_because:
        narrowed = plan.narrowed()
        if narrowed is None:
            break
        before = "normal draws" if narrowed.step == "positive" else "positive draws"
        reasons.append(f"with {before} {reason}")
        plan = narrowed.plan
    if narrowed is not None:
        findings.note(
            f"{', '.join(narrowed.names)} {narrowed.described}: {'; '.join(reasons)}. The draws most likely left "
            "the function's domain; set distribution, low and high in the config to choose them"
        )
    return plan


def _dtype_clash_everywhere(outcomes: Mapping[str, Outcome]) -> tuple[BaseException, str] | None:
    """The error, and what raised it, where float64 inputs met float32 code in every execution mode and a
    backward function was among what raised (Keras constants are float32; inside ``tf.function`` a
    Python float default becomes a float32 tensor, so the forward pass may raise there instead), or None."""
    errors = [o.error for o in outcomes.values()]
    if not errors or not all(e is not None and dtype_clash(e) for e in errors):
        return None
    backward = [any(r.phase == "backward" for r in o.records) for o in outcomes.values()]
    if not any(backward):
        return None
    first = errors[backward.index(True)]
    assert first is not None
    if all(backward):
        return first, "the backward function"
    return first, "the backward function (and the forward pass in another execution mode)"


def _float32(
    request: CheckRequest, findings: Findings, error: BaseException, raised: str = "the forward pass"
) -> str | _Retry:
    """Float64 inputs met float32 code (``raised``: the part that raised): rerun in float32, unless the user
    chose the dtype."""
    if request.dtype_given:
        problem = exception_problem(
            f"{raised.removeprefix('the ')} raised with {findings.dtype} inputs", error, _path(request)
        )
        hint = (
            "the code mixes in float32 constants: check it with --dtype float32 "
            f'(or dtype = "float32" in {table_key(request)})'
        )
        findings.problems.append(replace(problem, hint=hint))
        return "error"
    findings.notes.append(
        f"ran in float32: with float64 inputs {raised} raised "
        f"({describe_exception(error, _path(request))}), so the code is written for float32; "
        "tolerances and steps are float32's"
    )
    if findings.harness is not None:
        findings.harness.restore()
    findings.harness = None
    return _Retry("float32")


def _non_finite_forward() -> Problem:
    return Problem(
        "finite",
        None,
        "the forward output holds NaN or Inf for the drawn inputs, so gradients were not "
        'compared; draw inputs inside the function\'s domain (e.g. distribution = "positive", '
        "or low/high)",
    )


def _backward_line(outcomes: Mapping[str, Outcome]) -> int | None:
    lines = (r.line for o in outcomes.values() for r in o.records if r.line is not None)
    return next(lines, None)


def _audit(
    request: CheckRequest, prepared: Prepared, outcomes: Mapping[str, Outcome], findings: Findings
) -> audit.Audit:
    """Audit every execution mode's backward functions; merge their problems into the findings."""
    audited = audit.Audited(
        name=request.subject.name,
        kind=request.subject.kind,
        path=_path(request),
        plan=prepared.plan,
        variables=tuple(prepared.harness.variables),
        name_variable=prepared.built.name_variable,
        wrapper=not request.subject.kind.records_backward(bool(findings.inner)),
    )
    audits = {execution: audit.audit(audited, outcome) for execution, outcome in outcomes.items()}
    findings.problems.extend(audit.keyword_problems(prepared.plan))
    table = f"{request.config_label}: {table_key(request)}"
    findings.problems.extend(executions.merge_audits(prepared.plan, {e: a.problems for e, a in audits.items()}, table))
    misshapen = {name: shape for a in audits.values() for name, shape in a.misshapen.items()}
    return audit.Audit([], frozenset().union(*(a.not_tensors for a in audits.values())), misshapen)


def _fed_dtype(findings: Findings) -> str:
    """The dtype the float inputs were fed in (an input signature or the config can fix it)."""
    if findings.plan is not None:
        dtypes = {a.spec.dtype for a in findings.plan.differentiable if a.spec is not None}
        if len(dtypes) == 1:
            return dtypes.pop()
    return findings.dtype


def check_subject(request: CheckRequest) -> Result:
    """Check one function or layer; the user's exceptions become ``error`` results, never escape."""
    start = time.perf_counter()
    findings = Findings(dtype=request.settings.dtype)
    subject = request.subject
    with check_conditions(request):
        try:
            status = _run(request, findings)
        except SystemExit as exit_:  # the user's code called sys.exit(): not a reason to end the run
            status = "error"
            message = f"the function called sys.exit({exit_.code!r})"
            findings.problems.append(exception_problem(message, exit_, subject.path, described=False))
        except BaseException as error:  # KeyboardInterrupt or another BaseException the user's code raised
            if tracebacks.is_ctrl_c(error) or isinstance(error, GeneratorExit):
                raise
            status = "error"
            findings.problems.append(exception_problem("the function raised", error, subject.path))
    return Result(
        id=subject.id,
        name=subject.name,
        kind=subject.kind.reported,
        status=status,
        dtype=_fed_dtype(findings),
        inputs=input_records(findings.plan, findings.harness),
        problems=tuple(findings.problems),
        seconds=time.perf_counter() - start,
        notes=tuple(findings.notes),
        skip_reason=findings.skip_reason,
        path=subject.path,
        line=subject.line,
        backward_line=findings.backward_line,
        custom_gradients=findings.inner,
        reproduce=request.reproduce if status in ("failed", "error") else None,
    )
