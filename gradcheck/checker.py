"""One custom-gradient function -> one :class:`Result`; the user's exceptions become results.

The order of work for one function:

1. plan the call (config, or probing small shapes) and draw seeded inputs;
2. one forward pass, then the custom vector-Jacobian product in each
   execution mode through an instrumented backward function;
3. audit what the backward function returned: count, shapes, dtypes;
4. unless ``--shape-only``: compare eager with ``tf.function``, and each
   input's gradient with native autodiff (element-wise) and with finite
   differences (random projections in ``fast`` mode, whole gradients in
   ``full`` mode or to localise a fast-mode failure), redrawing the inputs
   where only finite differences disagree, since a kink inside the step
   fools them and nothing else;
5. name the likely bug where the pattern is recognisable.
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gradcheck import _tf, compare
from gradcheck.config import Settings, SubjectConfig
from gradcheck.discovery import Subject
from gradcheck.inputs import (
    Argument,
    CallPlan,
    candidate_shapes,
    draw_tensor,
    plan_call,
    subject_rng,
    symmetrize,
)
from gradcheck.numerics import (
    Harness,
    Outcome,
    default_step,
    directional_derivative,
    finite_difference_gradient,
)
from gradcheck.results import InputRecord, Problem, Result

#: Random directions per input and draw in fast mode.
PROJECTIONS = 3
#: Input draws at most: the first, plus redraws where only finite differences disagree.
MAX_DRAWS = 3
#: Largest input (in elements) that fast mode localises with a whole
#: finite-difference gradient after a failed projection.
LOCALISE_MAX_ELEMENTS = 4096
#: Exceptions that mean "these shapes do not fit" while probing.
_SHAPE_ERRORS = ("InvalidArgumentError", "ValueError", "TypeError", "IndexError")


@dataclass(frozen=True)
class CheckRequest:
    """Everything needed to check one function."""

    subject: Subject
    """What to check."""
    settings: Settings
    """The merged settings for this function."""
    config: SubjectConfig | None = None
    """Its ``[functions.NAME]`` table, if any."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """Named sizes."""
    shape_overrides: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    """``--shape`` from the command line."""
    config_label: str = "gradcheck.toml"
    """How messages name the config file."""
    reproduce: str | None = None
    """The command that reproduces this check."""


class UserCodeError(Exception):
    """The user's code raised before any gradient could be computed."""


def describe_exception(error: BaseException, path: str | None) -> str:
    """``file:line in func: Type: first line of the message``, pointing at the user's frame."""
    where = None
    if path is not None:
        wanted = Path(path).resolve()
        chain: list[BaseException] = []
        current: BaseException | None = error
        while current is not None and current not in chain:
            chain.append(current)
            current = current.__cause__ or current.__context__
        for item in chain:
            for frame in reversed(traceback.extract_tb(item.__traceback__)):
                try:
                    same = Path(frame.filename).resolve() == wanted
                except OSError:  # pragma: no cover - unreadable frame paths
                    same = False
                if same:
                    where = f"{path}:{frame.lineno} in {frame.name}"
                    break
            if where:
                break
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    message = lines[0] if lines else ""
    if len(message) > 300:
        message = message[:297] + "..."
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return f"{where}: {text}" if where else text


def user_traceback(error: BaseException, path: str | None) -> str:
    """The formatted traceback of ``error``, from the first frame in the user's file on.

    gradcheck's harness and TensorFlow's dispatch frames above the user's
    code say nothing to the user, as pytest hides its own frames; where no
    frame is in the user's file the whole traceback is kept.
    """
    tb = error.__traceback__
    if path is not None:
        wanted = Path(path).resolve()
        current = tb
        while current is not None:
            try:
                same = Path(current.tb_frame.f_code.co_filename).resolve() == wanted
            except OSError:  # pragma: no cover - unreadable frame paths
                same = False
            if same:
                tb = current
                break
            current = current.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _fmt_shape(shape: tuple[int | None, ...] | None) -> str:
    if shape is None:
        return "unknown"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _fmt_index(index: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, index)) + "]" if index is not None else "?"


@dataclass
class _InputVerdict:
    """The judgement of one input's gradient at one draw."""

    final: bool
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    custom: np.ndarray | None = None
    reference: np.ndarray | None = None


class _Check:
    """The state of one check: settings, harness, and the problems found so far."""

    def __init__(self, request: CheckRequest) -> None:
        self.request = request
        self.subject = request.subject
        self.settings = request.settings
        self.notes: list[str] = []
        self.problems: list[Problem] = []
        self.plan: CallPlan | None = None
        self.harness: Harness | None = None
        self.backward_line: int | None = None
        self.skip_reason: str | None = None
        self.probe_failure: str | None = None
        self._draws: dict[int, tuple[dict[str, Any], list[np.ndarray]]] = {}

    # -- set-up ----------------------------------------------------------------

    def forward_callable(self) -> Any:
        subject = self.subject
        forward = subject.forward
        if subject.binding == "method":
            init = self.request.config.init if self.request.config else {}
            try:
                instance = subject.owner(**init)  # type: ignore[misc]
            except Exception as error:  # the user's constructor raised
                raise UserCodeError(
                    f"could not construct {subject.owner.__name__}(**init) for the method: "  # type: ignore[union-attr]
                    f"{describe_exception(error, subject.path)}; give its arguments as "
                    f'init = {{...}} in [functions."{subject.name}"]'
                ) from error
            return forward.__get__(instance, subject.owner)  # type: ignore[union-attr]
        if subject.binding == "classmethod":
            return forward.__get__(subject.owner, type(subject.owner))  # type: ignore[union-attr]
        return forward

    def draw(self, index: int) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Input values and upstream gradients of draw ``index`` (cached)."""
        if index not in self._draws:
            assert self.plan is not None and self.harness is not None
            rng = subject_rng(self.settings.seed, self.subject.name, index)
            values = draw_values(self.plan, rng)
            if self.harness.output_specs is None:
                self.harness.outputs(values)
            upstreams = [
                rng.standard_normal(size=spec.shape).astype(np.float64) for spec in self.harness.output_specs or []
            ]
            self._draws[index] = (values, upstreams)
        return self._draws[index]

    def probe(self, plan: CallPlan, forward: Any) -> CallPlan | None:
        """The first candidate shapes the forward pass accepts, or None (and a skip reason)."""
        last_error: BaseException | None = None
        errors: list[BaseException] = []
        for shapes in candidate_shapes(plan.unknown):
            for distribution in ("normal", "positive"):
                candidate = plan.with_shapes(shapes, self.settings.dtype).with_distribution(distribution)
                harness = Harness(forward, candidate)
                values = draw_values(candidate, subject_rng(self.settings.seed, self.subject.name, 0))
                try:
                    outputs = harness.outputs(values)
                except Exception as error:  # the forward refused these shapes
                    last_error = error
                    errors.append(error)
                    break
                if not outputs:
                    break
                if all(np.all(np.isfinite(o)) for o in outputs):
                    described = ", ".join(f"{n}={_fmt_shape(s)}" for n, s in shapes.items())
                    self.notes.append(
                        f"no shapes configured: using guessed shapes {described}"
                        + (f" ({distribution} draws)" if distribution != "normal" else "")
                        + "; set them in the config to check the shapes you use"
                    )
                    return candidate
        if errors and self._same_failure_whatever_the_shapes(errors):
            raise UserCodeError(
                f"forward pass raised: {describe_exception(errors[-1], self.subject.path)}"
            ) from errors[-1]
        example = ", ".join(f"{name} = [4, 5]" for name in plan.unknown)
        table = "layers" if self.subject.kind == "layer" else "functions"
        name = self.subject.name if "." not in self.subject.name else f'"{self.subject.name}"'
        why = f" (last try: {describe_exception(last_error, self.subject.path)})" if last_error else ""
        self.probe_failure = f"no guessed shapes worked{why}"
        self.skip_reason = (
            f"no shapes configured for {', '.join(plan.unknown)} and no guessed shapes worked{why}; "
            f"add to {self.request.config_label}: [{table}.{name}] inputs = {{ {example} }}"
        )
        return None

    def _same_failure_whatever_the_shapes(self, errors: list[BaseException]) -> bool:
        """True when probing failed for a reason that has nothing to do with shapes.

        Shape errors name the shapes, so their messages change from one guess
        to the next; an error that reads the same for every guess, or that
        is no kind of shape error at all, is a bug in the forward pass.
        """
        if len({(type(e), str(e)) for e in errors}) == 1 and len(errors) > 1:
            return True
        return all(type(e).__name__ not in _SHAPE_ERRORS for e in errors)

    # -- the run ---------------------------------------------------------------

    def plan_for(self, forward: Any) -> CallPlan:
        """The call plan from the config; unconfigured required inputs stay ``unknown``."""
        return plan_call(
            inspect.signature(forward),
            self.request.config,
            self.request.dims,
            self.settings.dtype,
            self.request.config_label,
            f"{'layers' if self.subject.kind == 'layer' else 'functions'}.{self.subject.name}",
            self.request.shape_overrides,
        )

    def run(self) -> str:
        """Check the function; return its status."""
        try:
            forward = self.forward_callable()
            plan = self.plan_for(forward)
            if plan.unknown:
                probed = self.probe(plan, forward)
                if probed is None:
                    return "skipped"
                plan = probed
        except UserCodeError as error:
            cause = error.__cause__ or error
            self.problems.append(
                Problem("exception", None, str(error), traceback=user_traceback(cause, self.subject.path))
            )
            return "error"
        self.plan = plan
        self.harness = Harness(forward, plan)
        try:
            values, upstreams = self.draw(0)
        except Exception as error:  # the forward pass raised
            self.problems.append(
                Problem(
                    "exception",
                    None,
                    f"forward pass raised: {describe_exception(error, self.subject.path)}",
                    traceback=user_traceback(error, self.subject.path),
                )
            )
            return "error"
        outputs = self.harness.outputs(values)
        if not outputs:
            self.skip_reason = "the function has no float outputs: there is no gradient to check"
            return "skipped"
        bad_outputs = [i for i, o in enumerate(outputs) if not np.all(np.isfinite(o))]
        if bad_outputs:
            self.problems.append(
                Problem(
                    "finite",
                    None,
                    "the forward output holds NaN or Inf for the drawn inputs, so gradients were not "
                    'compared; draw inputs inside the function\'s domain (e.g. distribution = "positive", '
                    "or low/high)",
                )
            )
            return "failed"
        outcomes = {
            execution: self.harness.custom(values, upstreams, execution) for execution in self.settings.executions
        }
        for outcome in outcomes.values():
            if outcome.record.line is not None and self.backward_line is None:
                self.backward_line = outcome.record.line
        self.problems.extend(self.merge_audits(outcomes))
        if any(p.check == "exception" for p in self.problems):
            return "error"
        if not plan.differentiable:
            self.notes.append("no float inputs: only the count of returned gradients was checked")
        elif self.settings.shape_only:
            pass
        elif self.settings.reference == "none":
            self.notes.append('reference = "none": count, shapes and dtypes audited, values not compared')
        elif any(p.check in ("count",) for p in self.problems):
            self.notes.append("values not compared: the gradients cannot be matched to the inputs")
        else:
            working = [o for o in outcomes.values() if o.ok]
            if working:
                if len(working) == 2:
                    self.problems.extend(self.compare_executions(working[0], working[1]))
                skip = {p.input for p in self.problems if p.check == "shape" and p.input}
                self.value_checks(working[0], skip)
        return "failed" if self.problems else "passed"

    # -- audit -----------------------------------------------------------------

    def audit(self, outcome: Outcome) -> list[Problem]:
        """Count, shape and dtype of what the backward function returned in one run."""
        assert self.plan is not None
        record = outcome.record
        problems: list[Problem] = []
        error = outcome.error
        path = self.subject.path
        if record.malformed and record.phase in ("forward-done",) and record.returned is None:
            return [Problem("exception", None, record.malformed)]
        if error is not None and record.phase in ("start", "forward"):
            return [
                Problem(
                    "exception",
                    None,
                    f"forward pass raised: {describe_exception(error, path)}",
                    traceback=user_traceback(error, path),
                )
            ]
        if error is not None and record.phase == "backward":
            return [
                Problem(
                    "exception",
                    None,
                    f"backward function raised: {describe_exception(error, path)}",
                    traceback=user_traceback(error, path),
                )
            ]
        if error is not None and "must accept keyword argument 'variables'" in str(error):
            return [
                Problem(
                    "variables",
                    None,
                    "the forward pass reads variables but the backward function does not take "
                    "variables=: " + describe_exception(error, None),
                    hint="accept variables=None in the backward function and return "
                    "(input_gradients, variable_gradients), or pass tf.convert_to_tensor(variable) "
                    "into the function instead of the variable",
                )
            ]
        if record.returned is not None:
            problems.extend(self._audit_returned(record))
        if record.malformed and record.returned is not None:
            problems.append(Problem("variables", None, record.malformed))
        if error is not None and not problems:
            problems.append(
                Problem(
                    "exception",
                    None,
                    f"TensorFlow raised after the backward function returned: {describe_exception(error, path)}",
                    traceback=user_traceback(error, path),
                )
            )
        if outcome.ok and record.calls == 0:
            problems.append(
                Problem(
                    "count",
                    None,
                    "TensorFlow never called the backward function, so native autodiff ran instead "
                    "(keyword arguments bypass custom_gradient in eager mode, TF issue #65839)",
                    expected=f"{len(self.plan.positional)} gradients",
                    got="backward not called",
                    hint="pass the tensors to the custom-gradient function positionally",
                )
            )
        return problems

    def _audit_returned(self, record: Any) -> list[Problem]:
        assert self.plan is not None
        slots = self.plan.positional
        returned = record.returned
        problems: list[Problem] = []
        names = [a.name for a in slots]
        if len(returned) != len(slots):
            fewer = len(returned) < len(slots)
            hint = (
                f"return one gradient per positional input, in order ({', '.join(names)}); "
                "None for inputs that get no gradient"
            )
            constants = [a.name for a in slots if a.role == "constant"]
            if constants and len(returned) == len(slots) - len(constants):
                hint = f"return None for the constant{'s' if len(constants) > 1 else ''} {', '.join(constants)} too"
            problems.append(
                Problem(
                    "count",
                    None,
                    f"the backward function returned {len(returned)} gradient{'s' if len(returned) != 1 else ''} "
                    f"for {len(slots)} input{'s' if len(slots) != 1 else ''} ({', '.join(names)})"
                    + ("; one is missing" if fewer and len(slots) - len(returned) == 1 else ""),
                    expected=str(len(slots)),
                    got=str(len(returned)),
                    hint=hint,
                )
            )
            return problems
        returned_shapes = {a.name: g.shape for a, g in zip(slots, returned)}
        input_shapes = {a.name: a.spec.shape for a in slots if a.spec is not None and a.role == "input"}
        for argument, gradient in zip(slots, returned):
            problems.extend(self._audit_slot(argument, gradient, returned_shapes, input_shapes))
        return problems

    def _audit_slot(
        self,
        argument: Argument,
        gradient: Any,
        returned_shapes: dict[str, Any],
        input_shapes: dict[str, tuple[int, ...]],
    ) -> list[Problem]:
        name = argument.name
        if argument.role in ("constant", "integer"):
            if gradient.kind == "none":
                return []
            what = "constant" if argument.role == "constant" else f"integer ({argument.spec.dtype}) input"  # type: ignore[union-attr]
            return [
                Problem(
                    "count" if argument.role == "constant" else "dtype",
                    name,
                    f"the backward function returned a gradient for the {what} {name}, which is not differentiable",
                    expected="None",
                    got=f"{gradient.type_name} {_fmt_shape(gradient.shape)}",
                    hint=f"return None in {name}'s place",
                )
            ]
        spec = argument.spec
        assert spec is not None
        expected_text = f"{_fmt_shape(spec.shape)} {spec.dtype}"
        if gradient.kind == "none":
            return []
        if gradient.kind == "other":
            return [
                Problem(
                    "dtype",
                    name,
                    f"the gradient of {name} is a {gradient.type_name}, not a tensor",
                    expected=expected_text,
                    got=gradient.type_name,
                )
            ]
        problems = []
        shape = gradient.shape
        if shape is not None and None not in shape and tuple(shape) != tuple(spec.shape):
            problems.append(
                Problem(
                    "shape",
                    name,
                    f"the gradient of {name} has shape {_fmt_shape(shape)}, its input {_fmt_shape(spec.shape)}"
                    + (" (TensorFlow broadcasts it silently)" if _broadcasts(shape, spec.shape) else ""),
                    expected=_fmt_shape(spec.shape),
                    got=_fmt_shape(shape),
                    hint=compare.shape_hint(name, shape, spec.shape, returned_shapes, input_shapes),
                )
            )
        if gradient.dtype != spec.dtype:
            source = {"python": "a Python value", "array": "a numpy array"}.get(gradient.kind, "")
            problems.append(
                Problem(
                    "dtype",
                    name,
                    f"the gradient of {name} is {gradient.dtype}"
                    + (f" ({source})" if source else "")
                    + f", its input {spec.dtype}",
                    expected=spec.dtype,
                    got=str(gradient.dtype),
                    hint=f"cast the gradient to the input's dtype: tf.cast(grad, {name}.dtype)",
                )
            )
        return problems

    def merge_audits(self, outcomes: dict[str, Outcome]) -> list[Problem]:
        """One list of audit problems over the execution modes.

        A problem seen in every mode is reported once with no execution; one
        seen in some modes only carries the mode. Where a mode raised and
        another did not, that is an ``execution`` problem, not an error.
        """
        audits = {execution: self.audit(outcome) for execution, outcome in outcomes.items()}
        if len(audits) == 1:
            return next(iter(audits.values()))
        keyed = {
            execution: {(p.check, p.input, p.message): p for p in problems} for execution, problems in audits.items()
        }
        common = set.intersection(*(set(k) for k in keyed.values()))
        merged = [p for key, p in keyed[next(iter(keyed))].items() if key in common]
        raised = {e for e, problems in audits.items() if any(p.check == "exception" for p in problems)}
        for execution, problems in keyed.items():
            for key, problem in problems.items():
                if key in common:
                    continue
                if problem.check == "exception" and raised != set(audits):
                    merged.append(self._execution_failure(execution, problem))
                else:
                    merged.append(replace(problem, execution=execution))
        return merged

    def _execution_failure(self, execution: str, problem: Problem) -> Problem:
        assert self.plan is not None
        where = "inside tf.function" if execution == "function" else "eagerly"
        other = "eagerly" if execution == "function" else "inside tf.function"
        hint = None
        message = problem.message
        if execution == "function":
            if "keywords arguments only when eager" in message:
                hint = "inside tf.function, custom_gradient refuses keyword arguments: pass them positionally"
            elif any(a.role == "constant" for a in self.plan.positional):
                constants = ", ".join(f"{a.name}={a.value!r}" for a in self.plan.positional if a.role == "constant")
                hint = (
                    f"inside tf.function, custom_gradient converts the Python constant {constants} to a "
                    "tensor before the function sees it; bind it with a closure or functools.partial"
                )
            elif "symbolic" in message or "OperatorNotAllowedInGraph" in message:
                hint = "Python control flow on a tensor value does not trace: use tf.cond / tf.where"
        return Problem(
            "execution",
            problem.input,
            f"works {other} but raises {where}: {message}",
            execution=execution,
            hint=hint,
            traceback=problem.traceback,
        )

    def compare_executions(self, first: Outcome, second: Outcome) -> list[Problem]:
        """Eager and tf.function gradients of the same draw must agree."""
        assert self.plan is not None
        problems = []
        for argument in self.plan.differentiable:
            a = first.grads.get(argument.name) if first.grads else None
            b = second.grads.get(argument.name) if second.grads else None
            if a is None or b is None or a.shape != b.shape:
                continue
            finite = np.isfinite(a) & np.isfinite(b)
            tol = compare.tolerance(argument.spec.dtype, "native", self.settings.rtol, self.settings.atol)  # type: ignore[union-attr]
            result = compare.compare_elementwise(a, b, tol, mask=finite)
            if not result.ok or not np.array_equal(np.isfinite(a), np.isfinite(b)):
                problems.append(
                    Problem(
                        "execution",
                        argument.name,
                        f"eager and tf.function give different gradients of {argument.name} "
                        f"(max abs difference {result.max_abs_error:.3g})",
                        execution=second.execution,
                        max_abs_error=result.max_abs_error,
                        max_rel_error=result.max_rel_error,
                        worst_index=result.worst_index,
                        hint="the backward function depends on Python state or randomness that "
                        "tf.function freezes at trace time",
                    )
                )
        return problems

    # -- values ----------------------------------------------------------------

    def value_checks(self, primary: Outcome, skip: set[str]) -> None:
        """Judge each input's gradient against the references, redrawing where only FD disagrees."""
        assert self.plan is not None and self.harness is not None
        pending = [a for a in self.plan.differentiable if a.name not in skip]
        verdicts: dict[str, _InputVerdict] = {}
        redrawn: set[str] = set()
        for index in range(MAX_DRAWS):
            if not pending:
                break
            values, upstreams = self.draw(index)
            custom = primary if index == 0 else self.harness.custom(values, upstreams, primary.execution)
            if not custom.ok:
                break
            native = None
            if self.settings.reference in ("both", "native"):
                native = self.harness.native(values, upstreams)
                if not native.ok and index == 0:
                    self.notes.append(
                        "native autodiff of the forward pass raised "
                        f"({describe_exception(native.error, self.subject.path)}); "
                        "finite differences decide"
                    )
            still = []
            for argument in pending:
                verdict = self.judge_input(argument, index, values, upstreams, custom, native)
                verdicts[argument.name] = verdict
                if not verdict.final:
                    still.append(argument)
            redrawn.update(a.name for a in still)
            pending = still
        if redrawn & {name for name, v in verdicts.items() if not v.problems}:
            self.notes.append(
                "finite differences disagreed at the first draw but not on a fresh one "
                "(a kink within the step); passed on redraw"
            )
        found: list[Problem] = []
        for argument in self.plan.differentiable:
            verdict = verdicts.get(argument.name)
            if verdict is None:
                continue
            found.extend(verdict.problems)
            self.notes.extend(n for n in verdict.notes if n not in self.notes)
        self.problems.extend(self.with_hints(found, verdicts))

    def judge_input(
        self,
        argument: Argument,
        draw: int,
        values: dict[str, Any],
        upstreams: list[np.ndarray],
        custom: Outcome,
        native: Outcome | None,
    ) -> _InputVerdict:
        """The verdict on one input's gradient at one draw."""
        assert self.harness is not None
        spec = argument.spec
        assert spec is not None
        name = argument.name
        settings = self.settings
        execution = custom.execution
        notes: list[str] = []
        raw = custom.grads.get(name) if custom.grads else None
        if raw is None:
            notes.append(f"the backward function returned None for {name}: compared as zeros")
            raw = np.zeros(spec.shape)
        got = symmetrize(raw) if spec.symmetric else raw
        if not np.all(np.isfinite(got)):
            bad = np.argwhere(~np.isfinite(got))
            index = tuple(int(i) for i in bad[0]) if got.ndim else ()
            return _InputVerdict(
                final=True,
                problems=[
                    Problem(
                        "finite",
                        name,
                        f"the gradient of {name} has NaN or Inf at {len(bad)} of {got.size} elements "
                        "where the forward output is finite",
                        execution=execution,
                        worst_index=index,
                        hint="a division by zero, log of zero, or an overflowing exp in the backward function?",
                    )
                ],
                notes=notes,
            )
        use_numeric = settings.reference in ("both", "numeric")
        tol_native = compare.tolerance(spec.dtype, "native", settings.rtol, settings.atol)
        tol_numeric = compare.tolerance(spec.dtype, "numeric", settings.rtol, settings.atol)

        # Native autodiff, element-wise, where it is finite.
        native_grad = None
        native_result = None
        if native is not None and native.ok:
            native_raw = native.grads.get(name) if native.grads else None
            native_grad = np.zeros(spec.shape) if native_raw is None else native_raw
            if spec.symmetric:
                native_grad = symmetrize(native_grad)
            finite = np.isfinite(native_grad)
            if finite.any():
                native_result = compare.compare_elementwise(got, native_grad, tol_native, mask=finite)
                if not finite.all():
                    notes.append(
                        f"native autodiff gives NaN/Inf at {int((~finite).sum())} of {finite.size} elements "
                        f"of {name}'s gradient (as it does where people need custom gradients); "
                        "finite differences judge those"
                    )
            else:
                notes.append(f"native autodiff of {name} is NaN/Inf everywhere; finite differences judge it")
                native_grad = None

        # Finite differences: whole gradient (full mode) or random projections (fast).
        step = settings.eps if settings.eps is not None else default_step(spec.dtype)
        loss = lambda moved: self.harness.loss(moved, upstreams)  # noqa: E731
        base = np.asarray(values[name], dtype=np.float64)
        scale = np.maximum(1.0, np.abs(base))
        numeric_ok: bool | None = None
        fd_gradient = None
        fd_result = None
        projections: list[compare.ProjectionComparison] = []
        native_projections_ok = None

        def full_gradient() -> tuple[np.ndarray, np.ndarray]:
            gradient, error, _ = finite_difference_gradient(loss, values, name, scale, step, spec.dtype, spec.symmetric)
            return gradient, error

        if use_numeric:
            if settings.mode == "full":
                fd_gradient, fd_error = full_gradient()
                fd_result, numeric_ok = self._judge_full(got, fd_gradient, fd_error, tol_numeric)
            else:
                rng = subject_rng(settings.seed, f"{self.subject.name}:{name}:directions", draw)
                native_hits = []
                for _ in range(PROJECTIONS):
                    direction = rng.standard_normal(size=spec.shape)
                    if spec.symmetric:
                        direction = symmetrize(direction)
                    direction = direction * scale
                    estimate = directional_derivative(loss, values, name, direction, step, spec.dtype)
                    projections.append(
                        compare.compare_projection(got, direction, estimate.value, estimate.error, tol_numeric)
                    )
                    if native_grad is not None and np.all(np.isfinite(native_grad)):
                        native_hits.append(
                            compare.compare_projection(
                                native_grad, direction, estimate.value, estimate.error, tol_numeric
                            ).ok
                        )
                native_projections_ok = all(native_hits) if native_hits else None
                if any(p.conclusive and not p.ok for p in projections):
                    numeric_ok = False
                elif all(p.conclusive for p in projections):
                    numeric_ok = True
                else:
                    numeric_ok = None
        native_ok = native_result.ok if native_result is not None else None
        # Native disagreeing where finite differences agree: settle it element-wise
        # when affordable, since a projection can miss a difference in a few elements.
        if numeric_ok and native_ok is False and settings.mode == "fast":
            if native_projections_ok is False:
                notes.append(
                    f"native autodiff of {name} disagrees with finite differences (the forward pass is not "
                    "differentiable by TensorFlow, e.g. stop_gradient or integer ops); the custom gradient "
                    "agrees with finite differences"
                )
                native_ok = None
            elif spec.size <= LOCALISE_MAX_ELEMENTS:
                fd_gradient, fd_error = full_gradient()
                fd_result, numeric_ok = self._judge_full(got, fd_gradient, fd_error, tol_numeric)
                if numeric_ok:
                    notes.append(
                        f"native autodiff of {name} differs from the custom gradient, but finite differences "
                        "agree with the custom gradient element by element"
                    )
                    native_ok = None
        elif numeric_ok is False and settings.mode == "fast" and spec.size <= LOCALISE_MAX_ELEMENTS:
            fd_gradient, fd_error = full_gradient()
            fd_result, full_ok = self._judge_full(got, fd_gradient, fd_error, tol_numeric)
            if full_ok:
                # The element-wise check is the finer one: the projection was a kink.
                numeric_ok = None

        problems: list[Problem] = []
        reference = None
        if native_ok is False:
            problems.append(self._native_problem(name, got, native_grad, native_result, execution))
            reference = native_grad
        if numeric_ok is False:
            problems.append(
                self._numeric_problem(
                    name,
                    got,
                    fd_gradient,
                    fd_result,
                    projections,
                    execution,
                    native_grad if native_projections_ok else None,
                )
            )
            if fd_gradient is not None:
                reference = fd_gradient
            elif native_projections_ok:
                reference = native_grad
        only_numeric_disagrees = numeric_ok is False and native_ok is True
        inconclusive = numeric_ok is None and use_numeric
        if only_numeric_disagrees or inconclusive:
            # Possibly a kink inside the finite-difference step: redraw before judging.
            if draw + 1 < MAX_DRAWS:
                return _InputVerdict(final=False, problems=problems, notes=notes)
            if inconclusive and native_ok is not False:
                if native_ok:
                    notes.append(
                        f"finite differences were unreliable for {name} at every draw (a kink or jump "
                        "near the inputs); native autodiff agrees with the custom gradient"
                    )
                    return _InputVerdict(final=True, problems=problems, notes=notes)
                problems.append(
                    Problem(
                        "numeric",
                        name,
                        f"finite differences were unreliable for {name} at every draw (a kink or jump "
                        "within the step) and no other reference was usable",
                        execution=execution,
                        hint='check with reference = "native", or draw inputs away from the kink',
                    )
                )
            elif only_numeric_disagrees:
                problems = [
                    replace(
                        p,
                        hint="the custom gradient agrees with native autodiff but not with finite "
                        "differences at any draw: is the forward pass differentiable (kinks, "
                        "stop_gradient, rounding)?",
                    )
                    if p.check == "numeric"
                    else p
                    for p in problems
                ]
        if settings.reference == "native" and native_grad is None and native is not None:
            problems.append(
                Problem(
                    "native",
                    name,
                    f"native autodiff gives no finite gradient of {name} to compare with",
                    execution=execution,
                    hint='use reference = "numeric" or "both"',
                )
            )
        return _InputVerdict(final=True, problems=problems, notes=notes, custom=got, reference=reference)

    @staticmethod
    def _judge_full(
        got: np.ndarray, gradient: np.ndarray, error: np.ndarray, tol: compare.Tolerance
    ) -> tuple[compare.Comparison, bool | None]:
        """Element-wise against a finite-difference gradient; None where only unreliable elements fail."""
        result = compare.compare_elementwise(got, gradient, tol, expected_error=error)
        if result.ok:
            return result, True
        # An element's finite difference is trusted when its own error is small
        # next to the values being compared (either side), as for projections.
        size = np.maximum(np.abs(gradient), np.abs(got))
        magnitude = float(np.max(size, initial=0.0))
        reliable = error <= compare.UNRELIABLE * (size + compare.NOISE_FLOOR * magnitude + tol.atol)
        strict = compare.compare_elementwise(got, gradient, tol, expected_error=error, mask=reliable)
        return result, (None if strict.ok else False)

    def _native_problem(
        self,
        name: str,
        got: np.ndarray,
        native_grad: np.ndarray | None,
        result: compare.Comparison | None,
        execution: str,
    ) -> Problem:
        assert result is not None and native_grad is not None
        return Problem(
            "native",
            name,
            f"the gradient of {name} differs from native autodiff at {result.mismatched} of {result.total} "
            f"elements (max abs error {result.max_abs_error:.3g} at {_fmt_index(result.worst_index)})",
            execution=execution,
            max_abs_error=result.max_abs_error,
            max_rel_error=result.max_rel_error,
            worst_index=result.worst_index,
            heatmap=compare.heat_map(got, np.nan_to_num(native_grad)),
        )

    def _numeric_problem(
        self,
        name: str,
        got: np.ndarray,
        fd_gradient: np.ndarray | None,
        fd_result: compare.Comparison | None,
        projections: list[compare.ProjectionComparison],
        execution: str,
        localiser: np.ndarray | None,
    ) -> Problem:
        if fd_gradient is not None and fd_result is not None:
            return Problem(
                "numeric",
                name,
                f"the gradient of {name} differs from finite differences at {fd_result.mismatched} of "
                f"{fd_result.total} elements (max abs error {fd_result.max_abs_error:.3g} at "
                f"{_fmt_index(fd_result.worst_index)})",
                execution=execution,
                max_abs_error=fd_result.max_abs_error,
                max_rel_error=fd_result.max_rel_error,
                worst_index=fd_result.worst_index,
                heatmap=compare.heat_map(got, fd_gradient),
            )
        failing = [p for p in projections if p.conclusive and not p.ok] or projections
        worst = max(failing, key=lambda p: p.abs_error)
        located = None
        if localiser is not None:
            located = compare.compare_elementwise(got, localiser, compare.Tolerance(0.0, 0.0))
        return Problem(
            "numeric",
            name,
            f"the gradient of {name} differs from finite differences along a random direction: "
            f"<gradient, u> = {worst.projected:.6g}, finite differences give {worst.estimate:.6g}",
            execution=execution,
            max_abs_error=worst.abs_error,
            max_rel_error=worst.rel_error,
            worst_index=located.worst_index if located is not None else None,
            heatmap=compare.heat_map(got, localiser) if localiser is not None else None,
        )

    def with_hints(self, problems: list[Problem], verdicts: dict[str, _InputVerdict]) -> list[Problem]:
        """Attach the likely bug to each value problem where the pattern is recognisable."""
        assert self.harness is not None
        customs = {n: v.custom for n, v in verdicts.items() if v.custom is not None and v.reference is not None}
        references = {n: v.reference for n, v in verdicts.items() if v.custom is not None and v.reference is not None}
        swaps = compare.swap_hint(customs, references)  # type: ignore[arg-type]
        ones_reference: dict[str, np.ndarray] | None = None
        hinted = []
        for problem in problems:
            name = problem.input
            if problem.hint is None and problem.check in ("native", "numeric") and name in references:
                hint = swaps.get(name)
                if hint is None:
                    if ones_reference is None:
                        ones_reference = self._ones_reference()
                    hint = compare.value_hint(customs[name], references[name], ones_reference.get(name))
                if hint is None:
                    hint = self._transposed_operand_hint(name, references[name])
                if hint is not None:
                    problem = replace(problem, hint=hint)
            hinted.append(problem)
        return hinted

    def _transposed_operand_hint(self, name: str, reference: np.ndarray) -> str | None:
        """Recognise a missing transpose inside the backward function.

        For each square matrix input, rerun the custom gradient with that
        input transposed: if the gradient of ``name`` then equals the
        reference, the backward function uses the operand the wrong way round.
        """
        assert self.harness is not None and self.plan is not None
        values, upstreams = self.draw(0)
        for argument in self.plan.arguments:
            spec = argument.spec
            if spec is None or len(spec.shape) < 2 or spec.shape[-1] != spec.shape[-2] or spec.symmetric:
                continue
            moved = dict(values)
            moved[argument.name] = np.swapaxes(values[argument.name], -1, -2)
            outcome = self.harness.custom(moved, upstreams, "eager")
            if not outcome.ok or outcome.grads is None or outcome.grads.get(name) is None:
                continue
            if compare.close(outcome.grads[name], reference):
                return (
                    f"the gradient of {name} comes out right when {argument.name} is transposed: "
                    f"a missing or extra transpose of {argument.name} in the backward function"
                )
        return None

    def _ones_reference(self) -> dict[str, np.ndarray]:
        """Native gradients for an all-ones upstream, to recognise an ignored dy."""
        assert self.harness is not None
        values, upstreams = self.draw(0)
        outcome = self.harness.native(values, [np.ones_like(u) for u in upstreams])
        if not outcome.ok or outcome.grads is None:
            return {}
        return {n: g for n, g in outcome.grads.items() if g is not None and np.all(np.isfinite(g))}


def _broadcasts(shape: tuple[int | None, ...], target: tuple[int, ...]) -> bool:
    if None in shape:
        return False
    try:
        return np.broadcast_shapes(tuple(shape), target) == target  # type: ignore[arg-type]
    except ValueError:
        return False


def draw_values(plan: CallPlan, rng: np.random.Generator) -> dict[str, Any]:
    """One set of argument values: tensors drawn from ``rng``, constants as they are."""
    values: dict[str, Any] = {}
    for argument in plan.arguments:
        if argument.spec is None:
            values[argument.name] = argument.value
            continue
        array = draw_tensor(argument.spec, rng)
        if argument.spec.differentiable and argument.spec.dtype != "float64":
            # Keep the base point exactly representable, so perturbations are exact too.
            array = _round_to(array, argument.spec.dtype)
        values[argument.name] = array
    return values


def _round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        from gradcheck import _tf

        tf = _tf.tensorflow()
        return np.asarray(tf.cast(tf.cast(array, tf.bfloat16), tf.float64))
    return array.astype(dtype).astype(np.float64)


def input_records(plan: CallPlan | None) -> tuple[InputRecord, ...]:
    """The arguments as fed, for the report."""
    if plan is None:
        return ()
    records = []
    for argument in plan.arguments:
        if argument.spec is not None:
            records.append(
                InputRecord(
                    name=argument.name,
                    shape=argument.spec.shape,
                    dtype=argument.spec.dtype,
                    role=argument.role,
                    guessed=argument.guessed,
                )
            )
        elif argument.role == "constant":
            records.append(
                InputRecord(name=argument.name, shape=None, dtype=type(argument.value).__name__, role="constant")
            )
        else:
            records.append(InputRecord(name=argument.name, shape=None, dtype="unknown", role=argument.role))
    return tuple(records)


@dataclass(frozen=True)
class ShapeGuess:
    """What probing found for one function's inputs (``gradcheck init``)."""

    plan: CallPlan | None
    """The call plan with configured and guessed shapes (guessed arguments say so); None where probing failed."""
    failure: str | None = None
    """Why no shapes could be found (forward pass raising, no candidate accepted)."""


def guess_shapes(request: CheckRequest) -> ShapeGuess:
    """Probe small candidate shapes for the inputs the config leaves open, as a check would.

    The same prober as :func:`check_subject` uses, so the shapes ``gradcheck
    init`` writes are the ones a run would have guessed.
    """
    check = _Check(request)
    with _tf.quiet_logs():
        try:
            forward = check.forward_callable()
            plan = check.plan_for(forward)
            if not plan.unknown:
                return ShapeGuess(plan=plan)
            probed = check.probe(plan, forward)
        except UserCodeError as error:
            return ShapeGuess(plan=None, failure=str(error))
    if probed is None:
        return ShapeGuess(plan=None, failure=check.probe_failure or check.skip_reason)
    return ShapeGuess(plan=probed)


def check_subject(request: CheckRequest) -> Result:
    """Check one function; the user's exceptions become ``error`` results, never escape."""
    start = time.perf_counter()
    check = _Check(request)
    with _tf.quiet_logs():
        status = check.run()
    subject = request.subject
    return Result(
        id=subject.id,
        name=subject.name,
        kind=subject.kind,
        status=status,
        dtype=request.settings.dtype,
        inputs=input_records(check.plan),
        problems=tuple(check.problems),
        seconds=time.perf_counter() - start,
        notes=tuple(check.notes),
        skip_reason=check.skip_reason,
        path=subject.path,
        line=subject.line,
        backward_line=check.backward_line,
        reproduce=request.reproduce if status in ("failed", "error") else None,
    )
