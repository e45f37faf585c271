"""One custom-gradient function or layer -> one :class:`Result`; the user's exceptions become results.

:func:`check_subject` reads as the checklist it follows:

1. :mod:`~gradcheck.checking.prepare`: build the call target (a function, a
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
4. unless ``--shape-only``: eager against ``tf.function``, then
   :mod:`~gradcheck.checking.verdict`: each gradient against native autodiff and
   finite differences, redrawing where only finite differences disagree;
   with ``--order 2`` the same for the gradient of the gradient;
5. :mod:`~gradcheck.checking.diagnose`: name the likely bug where the pattern is
   recognisable;
6. put the user's variables back as they were.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from gradcheck import _tf, state, tracebacks
from gradcheck.checking import audit, diagnose, reaching, verdict
from gradcheck.checking.exceptions import UserCodeError, describe_exception, exception_problem
from gradcheck.checking.prepare import (
    Built,
    Draws,
    InputTooLarge,
    NeedsConfig,
    NeedsFloat32,
    build,
    draw_values,
    dtype_clash,
    frozen,
    input_records,
    keyword_convention,
    probe,
    redraw_layer_weights,
    reference_harness,
    table_key,
)
from gradcheck.checking.request import CheckRequest
from gradcheck.harness import Harness
from gradcheck.importing import import_root
from gradcheck.inputs import CallPlan, subject_rng
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.results import Problem, Result, format_shape
from gradcheck.targets import ReachingTarget, WrapperTarget

__all__ = ["CheckRequest", "ShapeGuess", "check_subject", "guess_shapes", "input_records"]


@dataclass
class _Findings:
    """What one check has found so far: the one mutable record, filled in by the checklist's steps."""

    dtype: str
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skip_reason: str | None = None
    backward_line: int | None = None
    inner: tuple[dict[str, object], ...] = ()
    plan: CallPlan | None = None
    harness: Harness | None = None
    reference_harness: Harness | None = None
    domain: list[str] = field(default_factory=list)
    """Why the failure may be the draws' fault (see :attr:`verdict.Verdict.domain`)."""
    redrawn_because: tuple[str, ...] = ()
    """The domain problems of the earlier tries: each narrows the guessed draws one step."""
    numeric_only: bool = False
    """The subject reaches no custom gradient: TensorFlow's own gradient is checked against finite differences."""

    def note(self, *notes: str) -> None:
        """Add each note not given yet (several gradients can give the same note)."""
        self.notes.extend(n for n in notes if n not in self.notes)


@dataclass(frozen=True)
class _Retry:
    """Run the check again: in float32, or with some constants passed by keyword."""

    dtype: str
    keywords: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Prepared:
    """A planned call, with the harness that runs it and its draws."""

    built: Built
    plan: CallPlan
    harness: Harness
    draws: Draws
    outputs: list[np.ndarray] | None
    """The forward outputs at draw 0, from the first forward pass; None where a layer's weights were redrawn since."""


def _path(request: CheckRequest) -> str | None:
    return request.subject.path


# -- the checklist ---------------------------------------------------------------


def _run(request: CheckRequest, findings: _Findings) -> str:
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
        trial = _Findings(dtype=request.settings.dtype, redrawn_because=(*tried.redrawn_because, tried.domain[0]))
        trial_status = _checked(request, trial)
        if trial_status in ("passed", "failed") and not trial.domain:
            for name in (f.name for f in fields(_Findings)):
                setattr(findings, name, getattr(trial, name))
            return trial_status
        if trial_status != "failed" or trial.plan is None:
            break
        tried = trial
    return status


def _checked(request: CheckRequest, findings: _Findings) -> str:
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


def _attempt(request: CheckRequest, findings: _Findings, keywords: frozenset[str]) -> str | _Retry:
    """One try at the whole check in ``findings.dtype``."""
    prepared = _prepare(request, findings, keywords)
    if not isinstance(prepared, _Prepared):
        return prepared
    values, upstreams = prepared.draws(0)
    outputs = prepared.outputs if prepared.outputs is not None else prepared.harness.outputs(values)
    if any(not np.all(np.isfinite(o)) for o in outputs):
        findings.problems.append(_non_finite_forward())
        if findings.redrawn_because:  # draws gradcheck narrowed itself: narrower ones may still fit
            findings.domain.append("the forward output was NaN or Inf")
        return "failed"
    outcomes = {e: prepared.harness.custom(values, upstreams, e) for e in request.settings.executions}
    retry = keyword_convention(prepared.plan, request.subject.kind, outcomes, keywords)
    if retry:
        prepared.harness.restore()
        findings.notes.append(
            f"{', '.join(sorted(retry))} passed by keyword: the backward function returns no gradient for "
            "it, as for an argument the caller names"
        )
        return _Retry(findings.dtype, keywords | retry)
    if request.subject.reaching:
        request, status = _reached(request, outcomes, findings)
        if status is not None:
            return status
        if findings.numeric_only:
            outcomes = _as_written(prepared, values, upstreams, request.settings.executions)
    findings.backward_line = findings.backward_line or _backward_line(outcomes)
    audited = _audit(request, prepared, outcomes, findings)
    if any(p.check == "exception" for p in findings.problems):
        return "error"
    if _values_comparable(request, prepared, findings):
        _compare_values(request, prepared, outcomes, audited.not_tensors, findings)
    return "failed" if findings.problems else "passed"


def _reached(
    request: CheckRequest, outcomes: Mapping[str, Outcome], findings: _Findings
) -> tuple[CheckRequest, str | None]:
    """A subject checked through the custom gradients it reaches: skip it, or say what it reached."""
    seen = reaching.reached(request.subject, outcomes, table_key(request), request.settings.reference)
    if seen.skip_reason is not None:
        findings.skip_reason = seen.skip_reason
        return request, "skipped"
    findings.inner = reaching.inner_functions(seen.records)
    if seen.note:
        findings.note(seen.note)
    findings.numeric_only = seen.numeric_only
    if seen.numeric_only and request.settings.reference in ("both", "native"):
        request = replace(request, settings=replace(request.settings, reference="numeric"))
    return request, None


def _as_written(
    prepared: _Prepared, values: dict[str, Any], upstreams: list[np.ndarray], executions: tuple[str, ...]
) -> dict[str, Outcome]:
    """TensorFlow's gradient of a subject that reaches no custom gradient, its code run as written.

    The first run made every ``tf.function`` plain Python to see the custom
    gradients it reaches; TensorFlow's tape then ignores a
    ``gradient_override_map`` inside one, so a registered gradient would go
    unchecked (and the default one be checked in its place).
    """
    target = prepared.built.target
    if isinstance(target, ReachingTarget):
        target.as_written = True
    prepared.harness.forget_traces()
    return {e: prepared.harness.custom(values, upstreams, e) for e in executions}


def _prepare(request: CheckRequest, findings: _Findings, keywords: frozenset[str]) -> _Prepared | str | _Retry:
    """Build, plan (probing where shapes are open), run the first forward pass and make draw 0."""
    dtype = findings.dtype
    built = build(request, dtype)
    plan = built.plan.with_keywords(set(keywords)) if keywords else built.plan
    if plan.unknown:
        try:
            probed = probe(request, plan, built, dtype)
        except NeedsFloat32 as clash:
            return _float32(request, findings, clash.error)
        if probed.plan is None:
            findings.skip_reason = probed.skip_reason
            return "skipped"
        findings.notes.append(probed.note)  # type: ignore[arg-type]
        plan = probed.plan
    if findings.redrawn_because:
        plan = _narrowed(plan, findings)
    findings.plan = plan
    harness = findings.harness = Harness(built.target, plan, built.name_variable)
    settings = request.settings
    try:
        # Frozen before the first forward pass, so that its tensors and its tape serve the later passes too.
        values, _ = frozen(draw_values(plan, subject_rng(settings.seed, request.subject.name, 0)), [])
        outputs = harness.outputs(values, keep_tape=settings.compares_native)
        # The first forward pass found the variables: draw 0 holds their values as they are.
        values.update(harness.variable_values())
    except Exception as error:  # the forward pass raised
        if raised_by_gradcheck(error) or isinstance(error, InputTooLarge):
            raise
        harness.restore()
        if dtype == "float64" and dtype_clash(error):
            return _float32(request, findings, error)
        findings.problems.append(exception_problem("forward pass raised", error, _path(request)))
        return "error"
    redrawn = built.layer is not None and built.fresh_layer
    if redrawn:
        rng = subject_rng(request.settings.seed, request.subject.name + ":weights", 0)
        redraw_layer_weights(values, built.layer, harness, rng)
    draws = Draws(request.settings.seed, request.subject.name, plan, harness)
    draws.first(values)
    if not outputs:
        findings.skip_reason = "the forward pass has no float or complex outputs: there is no gradient to check"
        return "skipped"
    empty = _nothing_to_compare(plan, values, outputs)
    if empty is not None:
        findings.skip_reason = empty
        return "skipped"
    findings.note(*verdict.complex_notes(harness.output_labels))
    harness.native_ahead(*draws(0))
    return _Prepared(built, plan, harness, draws, None if redrawn else outputs)


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


def _narrowed(plan: CallPlan, findings: _Findings) -> CallPlan:
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


def _float32(request: CheckRequest, findings: _Findings, error: BaseException) -> str | _Retry:
    """Float64 inputs met float32 code: rerun in float32, unless the user chose the dtype."""
    if request.dtype_given:
        problem = exception_problem(f"forward pass raised with {findings.dtype} inputs", error, _path(request))
        hint = 'the code mixes in float32 constants: check it with --dtype float32 (or dtype = "float32")'
        findings.problems.append(replace(problem, hint=hint))
        return "error"
    findings.notes.append(
        "ran in float32: with float64 inputs the forward pass raised "
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
    request: CheckRequest, prepared: _Prepared, outcomes: Mapping[str, Outcome], findings: _Findings
) -> audit.Audit:
    """Audit every execution mode's backward functions; merge their problems into the findings."""
    audited = audit.Audited(
        name=request.subject.name,
        kind=request.subject.kind,
        path=_path(request),
        plan=prepared.plan,
        variables=tuple(prepared.harness.variables),
        name_variable=prepared.built.name_variable,
        wrapper=isinstance(prepared.built.target, WrapperTarget) or (request.subject.reaching and not findings.inner),
        reaching=request.subject.reaching,
    )
    audits = {execution: audit.audit(audited, outcome) for execution, outcome in outcomes.items()}
    findings.problems.extend(audit.keyword_problems(prepared.plan))
    findings.problems.extend(audit.merge_audits(prepared.plan, {e: a.problems for e, a in audits.items()}))
    return audit.Audit([], frozenset().union(*(a.not_tensors for a in audits.values())))


def _values_comparable(request: CheckRequest, prepared: _Prepared, findings: _Findings) -> bool:
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


def _compare_values(
    request: CheckRequest,
    prepared: _Prepared,
    outcomes: Mapping[str, Outcome],
    not_tensors: frozenset[str],
    findings: _Findings,
) -> None:
    """Eager against tf.function, then each gradient against the references, then the second order."""
    working = [o for o in outcomes.values() if o.ok]
    if not working:
        return
    settings = request.settings
    differing: list[Problem] = []
    if len(working) == 2:
        sources = prepared.harness.sources
        differing = audit.compare_executions(sources, working[0], working[1], settings.rtol, settings.atol)
        findings.problems.extend(differing)
    skip = {p.input for p in findings.problems if p.check in ("shape", "variables", "count") and p.input}
    skip |= not_tensors
    values, upstreams = prepared.draws(0)
    wide, note = reference_harness(
        request.subject.kind,
        findings.dtype,
        prepared.built,
        prepared.plan,
        prepared.harness,
        values,
        settings.compares_native,
    )
    findings.reference_harness = wide
    if note:
        findings.notes.append(note)
    judging = _judging(request, prepared, wide)
    rerun = diagnose.Rerun(
        prepared.harness,
        wide,
        prepared.plan,
        values,
        upstreams,
        subject_name=request.subject.name,
        numeric_only_table=table_key(request) if findings.numeric_only else None,
    )
    describe = lambda error: describe_exception(error, _path(request))  # noqa: E731
    judgement = verdict.value_checks(judging, prepared.harness, wide, prepared.draws, working[0], skip, describe)
    if len(working) == 2:  # the tf.function gradient is the eager one except where `differing` says
        judgement = verdict.seen_in_every_execution(judgement, {p.input for p in differing})
    _record(judgement, rerun, findings)
    if settings.order == 2 and not findings.problems:
        second = verdict.second_order_checks(judging, prepared.harness, wide, prepared.draws, skip, describe)
        _record(second, rerun, findings)
        if not second.problems:
            findings.notes.append("second order: the gradient of the custom gradient agrees with the references")


def _judging(request: CheckRequest, prepared: _Prepared, wide: Harness) -> verdict.Judging:
    """What judging needs that does not change from one gradient to the next."""
    output_size = sum(int(np.prod(spec.shape, dtype=np.int64)) for spec in prepared.harness.output_specs or [])
    return verdict.Judging(
        settings=request.settings,
        subject_name=request.subject.name,
        wide=wide is not prepared.harness,
        output_size=output_size,
        batching=wide.batching,  # the live mapping: the harness learns each strategy as it first perturbs
        output_dtypes=tuple(spec.dtype for spec in wide.output_specs or []),
    )


def _record(judgement: verdict.Judgement, rerun: diagnose.Rerun, findings: _Findings) -> None:
    if judgement.verdicts:
        findings.problems.extend(diagnose.with_hints(judgement.problems, judgement.verdicts, rerun))
    else:
        findings.problems.extend(judgement.problems)
    findings.notes.extend(verdict.redraw_notes(judgement, failed=bool(findings.problems)))
    findings.note(*judgement.verdict_notes)
    findings.domain.extend(judgement.domain)


def _fed_dtype(findings: _Findings) -> str:
    """The dtype the float inputs were fed in (an input signature or the config can fix it)."""
    if findings.plan is not None:
        dtypes = {a.spec.dtype for a in findings.plan.differentiable if a.spec is not None}
        if len(dtypes) == 1:
            return dtypes.pop()
    return findings.dtype


@dataclass(frozen=True)
class ShapeGuess:
    """What probing found for one function's inputs (``gradcheck init``)."""

    plan: CallPlan | None
    """The call plan with configured and guessed shapes (guessed arguments say so); None where probing failed."""
    failure: str | None = None
    """Why no shapes could be found (forward pass raising, no candidate accepted)."""
    constants: tuple[tuple[str, str], ...] = ()
    """Arguments that are Python values, not tensors: each name with the TOML placeholder the config needs."""


def guess_shapes(request: CheckRequest) -> ShapeGuess:
    """Probe small candidate shapes for the inputs the config leaves open, as a check would.

    The same prober as :func:`check_subject` uses, so the shapes ``gradcheck
    init`` writes are the ones a run would have guessed.
    """
    with _checking(request):
        for dtype in dict.fromkeys((request.settings.dtype, "float32")):
            try:
                built = build(request, dtype)
                if not built.plan.unknown:
                    return ShapeGuess(plan=built.plan)
                probed = probe(request, built.plan, built, dtype)
            except NeedsConfig as error:
                return ShapeGuess(plan=None, failure=str(error), constants=error.constants)
            except UserCodeError as error:
                return ShapeGuess(plan=None, failure=str(error))
            except NeedsFloat32 as error:
                if dtype == "float32":
                    return ShapeGuess(plan=None, failure=str(error))
                continue
            return ShapeGuess(plan=probed.plan, failure=probed.failure or probed.skip_reason)
    raise AssertionError("unreachable: float32 probing never asks for float32")  # pragma: no cover


@contextlib.contextmanager
def _checking(request: CheckRequest) -> Iterator[None]:
    """The conditions of one check, and the caller's state put back afterwards.

    The module's own import-time state is applied (its seeds, ``floatx``,
    directory), then the switches gradcheck needs are pinned (eager, no
    ``run_functions_eagerly``, no TF32), and the check is placed on the
    device asked for. Everything, the values of the module's variables
    included, is as before once the check is over, whatever it did.
    """
    tf = _tf.tensorflow()
    subject = request.subject
    source = Path(subject.path) if subject.path and not subject.path.startswith("<") else None
    roots = [import_root(source)] if source is not None and source.is_file() else []
    with state.preserved(roots):
        if request.module_state is not None:
            request.module_state.apply()
        state.pin_flags()
        variables = state.reachable_variables(subject.module, extra=(subject.obj, subject.forward))
        with (
            state.variables_preserved(variables),
            # gradcheck's arithmetic (squares of tiny differences, ratios of zeros) is written for
            # numpy's default error state; a caller's or module's np.seterr(all="raise") is not its own.
            np.errstate(**state.NUMPY_ERRORS),
            _tf.quiet_logs(),
            tf.device(_tf.device_name(request.settings.device)),
        ):
            yield


def check_subject(request: CheckRequest) -> Result:
    """Check one function or layer; the user's exceptions become ``error`` results, never escape."""
    start = time.perf_counter()
    findings = _Findings(dtype=request.settings.dtype)
    subject = request.subject
    with _checking(request):
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
        kind=subject.kind,
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
