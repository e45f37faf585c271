"""One custom-gradient function or layer -> one :class:`Result`; the user's exceptions become results.

The order of work for one subject:

1. build the call target (a function, a bound method, a gradient wrapper, or
   a Keras layer whose custom-gradient functions are swapped in and out),
   plan the call (config, input signature, or probing small shapes) and
   draw seeded inputs; code written for float32 is detected and rerun in
   float32;
2. one forward pass, which also finds the variables it reads, then the
   custom vector-Jacobian product in each execution mode through an
   instrumented backward function;
3. audit what each backward function returned: count, shapes, dtypes, and
   its variable gradients;
4. unless ``--shape-only``: compare eager with ``tf.function``, and each
   input's and variable's gradient with native autodiff (element-wise) and
   with finite differences (random projections in ``fast`` mode, whole
   gradients in ``full`` mode or to localise a fast-mode failure), evaluated
   in float64 where the function allows it, redrawing the inputs where only
   finite differences disagree, since a kink inside the step fools them and
   nothing else; with ``--order 2`` the same for the gradient of the
   gradient;
5. name the likely bug where the pattern is recognisable;
6. put the user's variables back as they were.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gradcheck import _tf, compare, state
from gradcheck.config import Settings, SubjectConfig
from gradcheck.discovery import Subject, import_root
from gradcheck.inputs import (
    CallPlan,
    candidate_shapes,
    draw_tensor,
    plan_call,
    subject_rng,
    symmetrize,
)
from gradcheck.numerics import (
    BackwardRecord,
    BatchedLoss,
    FunctionTarget,
    Harness,
    LayerTarget,
    Outcome,
    Patch,
    Source,
    WrapperTarget,
    default_step,
    directional_derivative,
    finite_difference_gradient,
    one_at_a_time,
    raised_by_gradcheck,
)
from gradcheck.results import InputRecord, Problem, Result, format_shape

#: Random directions per input and draw in fast mode.
PROJECTIONS = 3
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
#: Exceptions that mean "these shapes do not fit" while probing.
_SHAPE_ERRORS = ("InvalidArgumentError", "ValueError", "TypeError", "IndexError")
#: How TensorFlow says that float64 inputs met float32 code.
_DTYPE_CLASH = re.compile(
    r"(double|float64).*(float32|\bfloat\b)|(float32|\bfloat\b).*(double|float64)", re.IGNORECASE | re.DOTALL
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VARIABLES_REFUSED = "must accept keyword argument 'variables'"
_VARIABLES_HINT = (
    "accept variables=None in the backward function and return (input_gradients, variable_gradients), "
    "or pass tf.convert_to_tensor(weight) into the custom-gradient function instead of the variable"
)


@dataclass(frozen=True)
class CheckRequest:
    """Everything needed to check one function or layer."""

    subject: Subject
    """What to check."""
    settings: Settings
    """The merged settings for this subject."""
    config: SubjectConfig | None = None
    """Its ``[functions.NAME]`` or ``[layers.NAME]`` table, if any."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """Named sizes."""
    shape_overrides: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    """``--shape`` from the command line."""
    config_label: str = "gradcheck.toml"
    """How messages name the config file."""
    reproduce: str | None = None
    """The command that reproduces this check."""
    dtype_given: bool = False
    """True when the user chose the dtype (then float32 code is not rerun silently)."""
    module_state: Any = None
    """The :class:`gradcheck.state.Snapshot` the module's import left, applied for the check; None:
    the caller's state as it is (``gradcheck.check``)."""


class UserCodeError(Exception):
    """The user's code raised before any gradient could be computed."""


def _message_lines(error: BaseException) -> list[str]:
    text = _ANSI.sub("", str(error))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # Keras wraps errors raised in call() in a paragraph of its own; the cause follows.
    return [
        line
        for line in lines
        if not line.startswith(("Exception encountered when calling", "Arguments received by", "•"))
    ]


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
    lines = _message_lines(error)
    message = lines[0] if lines else ""
    if len(message) > 300:
        message = message[:297] + "..."
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return f"{where}: {text}" if where else text


def user_line(error: BaseException, path: str | None) -> int | None:
    """The line of the deepest frame of ``error`` (or its causes) in the user's file."""
    if path is None:
        return None
    wanted = Path(path).resolve()
    current: BaseException | None = error
    seen: list[BaseException] = []
    while current is not None and current not in seen:
        seen.append(current)
        for frame in reversed(traceback.extract_tb(current.__traceback__)):
            try:
                if Path(frame.filename).resolve() == wanted:
                    return frame.lineno
            except OSError:  # pragma: no cover - unreadable frame paths
                continue
        current = current.__cause__ or current.__context__
    return None


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


def exception_problem(what: str, error: BaseException, path: str | None, described: bool = True) -> Problem:
    """An ``exception`` problem: ``what: file:line in func: Type: message``, with the user's traceback and line.

    With ``described=False`` the message is ``what`` alone (it already describes the error).
    """
    message = f"{what}: {describe_exception(error, path)}" if described else what
    return Problem(
        "exception",
        None,
        message,
        traceback=user_traceback(error, path),
        line=user_line(error, path),
    )


def _fmt_index(index: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, index)) + "]" if index is not None else "?"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _dtype_clash(error: BaseException) -> bool:
    return type(error).__name__ in _SHAPE_ERRORS and bool(_DTYPE_CLASH.search(str(error)))


@dataclass(frozen=True)
class Slot:
    """One argument a backward function owes a gradient for, as the audit sees it."""

    name: str
    role: str
    """``input``, ``integer``, ``constant`` or ``variable`` (a variable passed as an argument)."""
    shape: tuple[int | None, ...] | None = None
    dtype: str | None = None
    value: Any = None
    """The constant's value, for messages."""


@dataclass
class _Verdict:
    """The judgement of one source's gradient at one draw."""

    final: bool
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    custom: np.ndarray | None = None
    reference: np.ndarray | None = None


@dataclass
class _Built:
    """A call target with its plan and the things needed to run and name it."""

    target: Any
    plan: CallPlan
    name_variable: Callable[[Any], str]
    layer: Any = None


class _Check:
    """The state of one check: settings, harnesses, and the problems found so far."""

    def __init__(self, request: CheckRequest) -> None:
        self.request = request
        self.subject = request.subject
        self.settings = request.settings
        self.dtype = request.settings.dtype
        self.notes: list[str] = []
        self.problems: list[Problem] = []
        self.plan: CallPlan | None = None
        self.harness: Harness | None = None
        self.reference: Harness | None = None
        self.backward_line: int | None = None
        self.skip_reason: str | None = None
        self.built: _Built | None = None
        self.fresh_layer = False
        self.probe_failure: str | None = None
        #: Inputs whose gradient came back as something that is no tensor (a string, an object):
        #: a dtype problem, and no values to compare.
        self.not_tensors: set[str] = set()
        self._draws: dict[int, tuple[dict[str, Any], list[np.ndarray]]] = {}

    # -- targets ---------------------------------------------------------------

    @property
    def _table_key(self) -> str:
        table = "layers" if self.subject.kind == "layer" else "functions"
        name = self.subject.name if "." not in self.subject.name else f'"{self.subject.name}"'
        return f"[{table}.{name}]"

    def _init_kwargs(self) -> dict[str, Any]:
        return dict(self.request.config.init) if self.request.config else {}

    def _construct(self, cls: type, kwargs: dict[str, Any], what: str) -> Any:
        try:
            inspect.signature(cls).bind(**kwargs)
        except TypeError as error:
            raise _NeedsConfig(
                f"{cls.__name__}(...) needs constructor arguments ({error}); add to "
                f"{self.request.config_label}: {self._table_key} init = {{ ... }}"
            ) from error
        except ValueError:  # no signature to check against: let the call itself tell
            pass
        try:
            return cls(**kwargs)
        except Exception as error:  # the user's constructor raised
            raise UserCodeError(
                f"could not construct {cls.__name__}(**init) for the {what}: "
                f"{describe_exception(error, self.subject.path)}; give its arguments as "
                f"init = {{...}} in {self._table_key}"
            ) from error

    def build(self, dtype: str) -> _Built:
        """The call target and its plan, with float inputs in ``dtype``."""
        subject = self.subject
        namer = self._variable_namer(None)
        if subject.kind == "layer":
            return self._build_layer(dtype)
        forward = subject.forward
        assert forward is not None
        if subject.binding == "method":
            instance = self._construct(subject.owner, self._init_kwargs(), "method")  # type: ignore[arg-type]
            forward = forward.__get__(instance, subject.owner)
            namer = self._variable_namer(instance)
        elif subject.binding == "classmethod":
            forward = forward.__get__(subject.owner, type(subject.owner))
        if subject.binding == "wrapper":
            target: Any = WrapperTarget(subject.obj, forward)
        else:
            target = FunctionTarget(forward, subject.name.rsplit(".", 1)[-1])
        return _Built(target, self._plan(inspect.signature(forward), dtype), namer)

    def _plan(self, signature: inspect.Signature, dtype: str) -> CallPlan:
        signature_shapes = None
        if self.subject.input_signature:
            parameters = [p.name for p in signature.parameters.values()]
            signature_shapes = {}
            for name, spec in zip(parameters, self.subject.input_signature):
                shape = getattr(spec, "shape", None)
                spec_dtype = getattr(spec, "dtype", None)
                if shape is None or spec_dtype is None or shape.rank is None:
                    continue
                signature_shapes[name] = (tuple(shape.as_list()), spec_dtype.name)
        table = "layers" if self.subject.kind == "layer" else "functions"
        return plan_call(
            signature,
            self.request.config,
            self.request.dims,
            dtype,
            self.request.config_label,
            f"{table}.{self.subject.name}",
            self.request.shape_overrides,
            signature_shapes,
        )

    def _build_layer(self, dtype: str) -> _Built:
        subject = self.subject
        if isinstance(subject.obj, type):
            cls = subject.obj
            kwargs = self._init_kwargs()
            if "dtype" not in kwargs and _accepts_keyword(cls.__init__, "dtype"):
                kwargs["dtype"] = dtype
            layer = self._construct(cls, kwargs, "layer")
            self.fresh_layer = True
        else:
            layer = subject.obj  # the user's own instance: checked as it is, weights restored afterwards
            self.fresh_layer = False
        patches = [
            Patch(namespace, name, namespace[name], parts.forward)
            for namespace, name in subject.patches
            if (parts := _tf.custom_gradient_parts(namespace[name])) is not None
        ]
        signature = inspect.signature(layer.call)
        return _Built(LayerTarget(layer, patches), self._plan(signature, dtype), self._variable_namer(layer), layer)

    def _variable_namer(self, owner: Any) -> Callable[[Any], str]:
        """Name a variable by the attribute or global that holds it, else by its own name."""
        module = self.subject.module
        forward = self.subject.forward

        def name(variable: Any) -> str:
            places: list[dict[str, Any]] = []
            if owner is not None:
                places.append(vars(owner))
            if forward is not None:
                try:
                    closure = inspect.getclosurevars(inspect.unwrap(forward))
                    places.append(dict(closure.nonlocals))
                except (TypeError, ValueError):
                    pass
            if module is not None:
                places.append(vars(module))
            code_owner = forward if forward is not None else getattr(self.subject.owner, "call", None)
            if code_owner is not None:
                places.append(getattr(inspect.unwrap(code_owner), "__globals__", {}))
            for place in places:
                for key, value in place.items():
                    if key.startswith("__"):
                        continue
                    if value is variable or (_tf.is_keras_variable(value) and value.value is variable):
                        return key
            text = getattr(variable, "name", "variable")
            return text[:-2] if text.endswith(":0") else text

        return name

    # -- draws -----------------------------------------------------------------

    def draw(self, index: int) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Input values, variable values and upstream gradients of draw ``index`` (cached).

        Draw 0 is made by :meth:`_run_in`; a redraw takes fresh inputs and
        upstream gradients and keeps the variables where draw 0 put them.
        """
        if index not in self._draws:
            assert self.plan is not None and self.harness is not None
            values = draw_values(self.plan, subject_rng(self.settings.seed, self.subject.name, index))
            first = self._draws[0][0]
            values.update({name: first[name] for name, _ in self.harness.variables})
            self._draws[index] = (values, self._upstreams(index))
        return self._draws[index]

    def _upstreams(self, index: int) -> list[np.ndarray]:
        assert self.harness is not None
        rng = subject_rng(self.settings.seed, self.subject.name + ":upstream", index)
        return [rng.standard_normal(size=spec.shape) for spec in self.harness.output_specs or []]

    def _redraw_layer_weights(self, values: dict[str, Any], layer: Any, rng: np.random.Generator) -> None:
        """Give a fresh layer's weights seeded values, so the report does not depend on Keras's seeds.

        Each weight keeps the sign and scale its initializer gave it: an
        all-positive weight (a scale) stays positive, an all-zero one (a bias)
        gets small values so that its gradient is exercised.
        """
        assert self.harness is not None
        weights = {id(_tf.underlying_variable(w)) for w in getattr(layer, "trainable_weights", [])}
        for name, variable in self.harness.variables:
            if id(variable) not in weights:
                continue
            current = np.asarray(variable.numpy(), dtype=np.float64)
            scale = float(np.std(current)) or float(np.mean(np.abs(current))) or 0.1
            drawn = rng.standard_normal(size=current.shape) * scale
            if current.size and np.all(current > 0):
                drawn = np.abs(drawn) + float(np.min(current))
            values[name] = _round_to(drawn, variable.dtype.name)

    # -- probing ---------------------------------------------------------------

    def probe(self, plan: CallPlan, built: _Built) -> CallPlan | None:
        """The first candidate shapes the forward pass accepts, or None (and a skip reason)."""
        last_error: BaseException | None = None
        errors: list[BaseException] = []
        for shapes in candidate_shapes(plan.unknown):
            for distribution in ("normal", "positive"):
                candidate = plan.with_shapes(shapes, self.dtype).with_distribution(distribution)
                harness = Harness(built.target, candidate, built.name_variable)
                values = draw_values(candidate, subject_rng(self.settings.seed, self.subject.name, 0))
                try:
                    outputs = harness.outputs(values)
                except Exception as error:  # the forward refused these shapes (or these values)
                    if raised_by_gradcheck(error):
                        raise
                    harness.restore()
                    last_error = error
                    errors.append(error)
                    continue
                finally:
                    harness.restore()
                if not outputs:
                    break
                if all(np.all(np.isfinite(o)) for o in outputs):
                    described = ", ".join(f"{n}={format_shape(s)}" for n, s in shapes.items())
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
        if errors and all(_dtype_clash(e) for e in errors) and self.dtype == "float64":
            raise _NeedsFloat32(errors[-1])
        example = ", ".join(f"{name} = [4, 5]" for name in plan.unknown)
        why = f" (last try: {describe_exception(last_error, self.subject.path)})" if last_error else ""
        self.probe_failure = f"no guessed shapes worked{why}"
        self.skip_reason = (
            f"no shapes configured for {', '.join(plan.unknown)} and no guessed shapes worked{why}; "
            f"add to {self.request.config_label}: {self._table_key} inputs = {{ {example} }}"
        )
        return None

    def _same_failure_whatever_the_shapes(self, errors: list[BaseException]) -> bool:
        """True when probing failed for a reason that has nothing to do with shapes.

        Shape errors name the shapes, so their messages change from one guess
        to the next; an error that reads the same for every guess, or that
        is no kind of shape error at all, is a bug in the forward pass.
        """
        if any(_dtype_clash(e) for e in errors):
            return False
        if len({(type(e), str(e)) for e in errors}) == 1 and len(errors) > 1:
            return True
        return all(type(e).__name__ not in _SHAPE_ERRORS for e in errors)

    # -- the run ---------------------------------------------------------------

    def run(self) -> str:
        """Check the subject; return its status. Variables are restored whatever happens."""
        try:
            return self._run_in(self.dtype, keyword_constants=set())
        except _NeedsConfig as missing:
            self.skip_reason = str(missing)
            return "skipped"
        except UserCodeError as error:
            cause = error.__cause__ or error
            self.problems.append(exception_problem(str(error), cause, self.subject.path, described=False))
            return "error"
        finally:
            for harness in (self.harness, self.reference):
                if harness is not None:
                    harness.restore()

    def _run_in(self, dtype: str, keyword_constants: set[str]) -> str:
        self.dtype = dtype
        self._draws.clear()
        built = self.build(dtype)
        plan = built.plan.with_keywords(keyword_constants) if keyword_constants else built.plan
        try:
            if plan.unknown:
                probed = self.probe(plan, built)
                if probed is None:
                    return "skipped"
                plan = probed
        except _NeedsFloat32 as clash:
            return self._rerun_in_float32(clash.error)
        self.built, self.plan = built, plan
        self.harness = Harness(built.target, plan, built.name_variable)
        try:
            values = draw_values(plan, subject_rng(self.settings.seed, self.subject.name, 0))
            outputs = self.harness.outputs(values)
            # The first forward pass found the variables: draw 0 holds their values as they are.
            values.update(self.harness.variable_values())
        except Exception as error:  # the forward pass raised
            if raised_by_gradcheck(error):
                raise
            self.harness.restore()
            if dtype == "float64" and _dtype_clash(error):
                return self._rerun_in_float32(error)
            self.problems.append(exception_problem("forward pass raised", error, self.subject.path))
            return "error"
        if built.layer is not None and self.fresh_layer:
            self._redraw_layer_weights(
                values, built.layer, subject_rng(self.settings.seed, self.subject.name + ":weights", 0)
            )
        self._draws[0] = (values, self._upstreams(0))
        if not outputs:
            self.skip_reason = "the forward pass has no float outputs: there is no gradient to check"
            return "skipped"
        values, upstreams = self.draw(0)
        if any(not np.all(np.isfinite(o)) for o in self.harness.outputs(values)):
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
        retry = self._keyword_convention(outcomes, keyword_constants)
        if retry:
            self.harness.restore()
            self.notes.append(
                f"{', '.join(sorted(retry))} passed by keyword: the backward function returns no gradient for "
                "it, as for an argument the caller names"
            )
            return self._run_in(dtype, keyword_constants | retry)
        for outcome in outcomes.values():
            for record in outcome.records:
                if record.line is not None and self.backward_line is None:
                    self.backward_line = record.line
        self.problems.extend(self.keyword_problems())
        self.problems.extend(self.merge_audits(outcomes))
        if any(p.check == "exception" for p in self.problems):
            return "error"
        if not self.harness.sources:
            self.notes.append("no float inputs or variables: only the count of returned gradients was checked")
        elif self.settings.shape_only:
            pass
        elif self.settings.reference == "none":
            self.notes.append('reference = "none": count, shapes and dtypes audited, values not compared')
        elif any(p.check == "count" and p.input is None for p in self.problems):
            self.notes.append("values not compared: the gradients cannot be matched to the inputs")
        else:
            working = [o for o in outcomes.values() if o.ok]
            if working:
                if len(working) == 2:
                    self.problems.extend(self.compare_executions(working[0], working[1]))
                skip = {p.input for p in self.problems if p.check in ("shape", "variables", "count") and p.input}
                skip |= self.not_tensors
                self.reference = self._reference_harness()
                self.value_checks(working[0], skip)
                if self.settings.order == 2 and not self.problems:
                    self.second_order_checks(skip)
        return "failed" if self.problems else "passed"

    def _rerun_in_float32(self, error: BaseException) -> str:
        if self.request.dtype_given:
            problem = exception_problem(f"forward pass raised with {self.dtype} inputs", error, self.subject.path)
            hint = 'the code mixes in float32 constants: check it with --dtype float32 (or dtype = "float32")'
            self.problems.append(replace(problem, hint=hint))
            return "error"
        self.notes.append(
            "ran in float32: with float64 inputs the forward pass raised "
            f"({describe_exception(error, self.subject.path)}), so the code is written for float32; "
            "tolerances and steps are float32's"
        )
        if self.harness is not None:
            self.harness.restore()
        self.harness = None
        return self._run_in("float32", set())

    def _keyword_convention(self, outcomes: dict[str, Outcome], already: set[str]) -> set[str]:
        """Constants with defaults that the backward function treats as named arguments.

        A backward function returning gradients for every positional argument
        but the defaulted constants is written for calls that name those
        constants (``f(x, axis=1)``), which custom_gradient does not count as
        inputs. Returns their names, to be passed by keyword instead.
        """
        assert self.plan is not None
        if already or self.subject.kind == "layer":
            return set()
        record = outcomes.get("eager", next(iter(outcomes.values()))).record
        if record.returned is None:
            return set()
        defaulted = {a.name for a in self.plan.positional if a.role == "constant" and a.has_default}
        if not defaulted:
            return set()
        named = len(self.plan.with_keywords(defaulted).slots)
        if len(record.returned) == named != len(self.plan.slots):
            return defaulted
        return set()

    def _reference_harness(self) -> Harness:
        """A harness that evaluates the references in float64 where the function allows it.

        Low-precision gradients are compared with a wider reference: in
        float16 the finite difference of a smooth function often rounds to 0.
        """
        assert self.harness is not None and self.plan is not None and self.built is not None
        if self.dtype == "float64" or self.subject.kind == "layer":
            return self.harness
        wide_plan = self.plan.with_dtype("float64")
        wide = Harness(self.built.target, wide_plan, self.built.name_variable)
        values, _ = self.draw(0)
        try:
            outputs = wide.outputs(values)
        except Exception as error:  # the code is written for its dtype: references stay in it
            if raised_by_gradcheck(error):
                raise
            wide.restore()
            return self.harness
        if not all(np.all(np.isfinite(o)) for o in outputs):
            wide.restore()
            return self.harness
        self.notes.append(
            f"references (native autodiff, finite differences) evaluated in float64 for {self.dtype} inputs"
        )
        return wide

    # -- audit -----------------------------------------------------------------

    def slots_for(self, record: BackwardRecord) -> list[Slot]:
        """What this backward function owes gradients for."""
        assert self.plan is not None
        if self.subject.kind != "layer":
            return [
                Slot(a.name, a.role, a.spec.shape if a.spec else None, a.spec.dtype if a.spec else None, a.value)
                for a in self.plan.slots
            ]
        slots = []
        for name, received in record.received:
            if received.kind == "variable":
                role = "variable"
            elif received.kind in ("tensor", "array"):
                role = "input" if (received.dtype or "").startswith(("float", "bfloat")) else "integer"
            else:
                role = "constant"
            slots.append(Slot(f"{record.function}.{name}", role, received.shape, received.dtype))
        return slots

    def audit(self, outcome: Outcome) -> list[Problem]:
        """Count, shape and dtype of what the backward functions returned in one run."""
        error = outcome.error
        path = self.subject.path
        records = outcome.records
        if error is not None and _VARIABLES_REFUSED in str(error):
            return [self._variables_refused(error, records)]
        problems: list[Problem] = []
        failed = next((r for r in records if r.phase != "backward-done"), None)
        if error is not None and (failed is not None or not records):
            if failed is not None and failed.malformed and failed.returned is None:
                return [Problem("exception", None, failed.malformed)]
            phase = failed.phase if failed is not None else "forward"
            where = {
                "start": "custom_gradient refused the call",
                "forward": "forward pass raised",
                "forward-done": "TensorFlow raised after the forward pass",
                "backward": "backward function raised",
            }[phase]
            return [exception_problem(where, error, path)]
        for record in records:
            if record.returned is not None:
                problems.extend(self._audit_returned(record))
                problems.extend(self._audit_variables(record))
            if record.malformed and record.returned is not None:
                problems.append(Problem("variables", None, record.malformed, hint=_VARIABLES_HINT))
        if error is not None and not problems:
            problems.append(exception_problem("TensorFlow raised after the backward function returned", error, path))
        keyword_inputs = any(a.keyword for a in self.plan.differentiable) if self.plan else False
        if outcome.ok and not isinstance(self.built.target if self.built else None, WrapperTarget):
            never = [r for r in records if r.calls == 0]
            if (never or not records) and not keyword_inputs:
                expected = len(self.plan.slots) if self.plan else 0
                problems.append(
                    Problem(
                        "count",
                        None,
                        "TensorFlow never called the backward function, so native autodiff ran instead "
                        "(keyword arguments bypass custom_gradient in eager mode, TF issue #65839)",
                        expected=f"{expected} gradients",
                        got="backward not called",
                        hint="pass the tensors to the custom-gradient function positionally",
                    )
                )
        return problems

    def _variables_refused(self, error: BaseException, records: list[BackwardRecord]) -> Problem:
        read = re.findall(r"<tf\.Variable '([^']+)'", _ANSI.sub("", str(error)))
        names = []
        for raw in read:
            ours = [n for n, v in (self.harness.variables if self.harness else []) if v.name == raw]
            names.append(ours[0] if ours else raw.removesuffix(":0"))
        function = records[-1].function if records else self.subject.name
        listed = ", ".join(dict.fromkeys(names)) or "a variable"
        plural = "variables" if len(set(names)) > 1 else "variable"
        if self.subject.kind == "layer":
            what = f"{self.subject.name}.call passes the {plural} {listed} into {function}"
            way_out = f"tf.convert_to_tensor(self.{names[0]})" if names else "tf.convert_to_tensor(weight)"
        else:
            what = f"{function} reads the {plural} {listed}"
            way_out = "a tensor (tf.convert_to_tensor(variable)) as an argument"
        return Problem(
            "variables",
            None,
            f"{what}, but its backward function does not take variables=: TensorFlow raises "
            "\"grad_fn must accept keyword argument 'variables'\"",
            hint="accept variables=None in the backward function and return (input_gradients, "
            f"variable_gradients), or pass {way_out} into {function} instead",
        )

    def _audit_returned(self, record: BackwardRecord) -> list[Problem]:
        slots = self.slots_for(record)
        returned = record.returned or []
        problems: list[Problem] = []
        names = [s.name for s in slots]
        prefix = f"{record.function}: " if self.subject.kind == "layer" else ""
        if len(returned) != len(slots):
            fewer = len(returned) < len(slots)
            hint = (
                f"return one gradient per positional input, in order ({', '.join(names)}); "
                "None for inputs that get no gradient"
            )
            constants = [s.name for s in slots if s.role == "constant"]
            if constants and len(returned) == len(slots) - len(constants):
                hint = f"return None for the constant{'s' if len(constants) > 1 else ''} {', '.join(constants)} too"
            problems.append(
                Problem(
                    "count",
                    None,
                    f"{prefix}the backward function returned {_plural(len(returned), 'gradient')} "
                    f"for {_plural(len(slots), 'input')} ({', '.join(names)})"
                    + ("; one is missing" if fewer and len(slots) - len(returned) == 1 else ""),
                    expected=str(len(slots)),
                    got=str(len(returned)),
                    hint=hint,
                )
            )
            return problems
        returned_shapes = {s.name: g.shape for s, g in zip(slots, returned)}
        input_shapes = {s.name: s.shape for s in slots if s.role == "input" and s.shape is not None}
        for slot, gradient in zip(slots, returned):
            problems.extend(self._audit_slot(slot, gradient, returned_shapes, input_shapes))  # type: ignore[arg-type]
        return problems

    def _audit_slot(
        self,
        slot: Slot,
        gradient: Any,
        returned_shapes: dict[str, Any],
        input_shapes: dict[str, tuple[int, ...]],
    ) -> list[Problem]:
        name = slot.name
        if slot.role in ("constant", "integer"):
            if gradient.kind == "none":
                return []
            what = "constant" if slot.role == "constant" else f"integer ({slot.dtype}) input"
            return [
                Problem(
                    "count" if slot.role == "constant" else "dtype",
                    name,
                    f"the backward function returned a gradient for the {what} {name}, which is not differentiable",
                    expected="None",
                    got=f"{gradient.type_name} {format_shape(gradient.shape)}",
                    hint=f"return None in {name}'s place",
                )
            ]
        expected_shape, expected_dtype = slot.shape, slot.dtype
        expected_text = f"{format_shape(expected_shape)} {expected_dtype}"
        if gradient.kind == "none":
            return []
        if gradient.kind == "other":
            self.not_tensors.add(name)
            return [
                Problem(
                    "dtype",
                    name,
                    f"the gradient of {name} is a {gradient.type_name}, not a tensor; its values were not compared",
                    expected=expected_text,
                    got=gradient.type_name,
                    hint=f"return a tensor of {name}'s shape and dtype (or None where it gets no gradient)",
                )
            ]
        problems = []
        shape = gradient.shape
        if (
            shape is not None
            and expected_shape is not None
            and None not in shape
            and None not in expected_shape
            and tuple(shape) != tuple(expected_shape)
        ):
            problems.append(
                Problem(
                    "shape",
                    name,
                    f"the gradient of {name} has shape {format_shape(shape)}, its input {format_shape(expected_shape)}"
                    + (" (TensorFlow broadcasts it silently)" if _broadcasts(shape, expected_shape) else ""),  # type: ignore[arg-type]
                    expected=format_shape(expected_shape),
                    got=format_shape(shape),
                    hint=compare.shape_hint(name, shape, expected_shape, returned_shapes, input_shapes),  # type: ignore[arg-type]
                )
            )
        if expected_dtype is not None and gradient.dtype != expected_dtype:
            source = {"python": "a Python value", "array": "a numpy array"}.get(gradient.kind, "")
            problems.append(
                Problem(
                    "dtype",
                    name,
                    f"the gradient of {name} is {gradient.dtype}"
                    + (f" ({source})" if source else "")
                    + f", its input {expected_dtype}",
                    expected=expected_dtype,
                    got=str(gradient.dtype),
                    hint=f"cast the gradient to the input's dtype: tf.cast(grad, {name.rsplit('.', 1)[-1]}.dtype)",
                )
            )
        return problems

    def _audit_variables(self, record: BackwardRecord) -> list[Problem]:
        """One gradient per variable TensorFlow handed over, each of its variable's shape and dtype."""
        if not record.variables or record.variable_returned is None:
            return []
        namer = self.built.name_variable if self.built else (lambda v: str(v))
        names = [namer(v) for v in record.variables]
        returned = record.variable_returned
        if len(returned) != len(record.variables):
            return [
                Problem(
                    "variables",
                    None,
                    f"the backward function returned {_plural(len(returned), 'variable gradient')} for "
                    f"{_plural(len(names), 'variable')} ({', '.join(names)})",
                    expected=str(len(names)),
                    got=str(len(returned)),
                    hint="return one gradient per entry of variables, in the order of that list "
                    "(TensorFlow hands it unordered eagerly and sorted by name in tf.function)",
                )
            ]
        problems = []
        shapes = {name: tuple(variable.shape.as_list()) for name, variable in zip(names, record.variables)}
        for name, variable, gradient in zip(names, record.variables, returned):
            shape = shapes[name]
            dtype = variable.dtype.name
            if gradient.kind == "none":
                continue
            if gradient.shape is not None and None not in gradient.shape and tuple(gradient.shape) != shape:
                others = [
                    other
                    for other, other_shape in shapes.items()
                    if other != name and other_shape == tuple(gradient.shape)
                ]
                hint = (
                    f"it has the shape of {others[0]}: match the variable gradients to the variables list "
                    "by identity, not by position (TensorFlow orders that list differently eagerly and in "
                    "tf.function)"
                    if others
                    else compare.shape_hint(name, gradient.shape, shape, {}, {})
                )
                problems.append(
                    Problem(
                        "variables",
                        name,
                        f"the gradient of the variable {name} has shape {format_shape(gradient.shape)}, "
                        f"the variable {format_shape(shape)}",
                        expected=format_shape(shape),
                        got=format_shape(gradient.shape),
                        hint=hint,
                    )
                )
            elif gradient.dtype is not None and gradient.dtype != dtype:
                problems.append(
                    Problem(
                        "variables",
                        name,
                        f"the gradient of the variable {name} is {gradient.dtype}, the variable {dtype}",
                        expected=dtype,
                        got=gradient.dtype,
                    )
                )
        return problems

    def keyword_problems(self) -> list[Problem]:
        """Tensors passed by keyword: custom_gradient does not treat them as inputs."""
        assert self.plan is not None
        problems = []
        for argument in self.plan.differentiable:
            if argument.keyword:
                problems.append(
                    Problem(
                        "count",
                        argument.name,
                        f"{argument.name} is passed by keyword, which custom_gradient does not count as an input: "
                        "eagerly it silently gets no gradient (TF issue #65839), and tf.function refuses "
                        "keyword arguments",
                        expected="a positional argument",
                        got="keyword argument",
                        hint=f"make {argument.name} a positional parameter of the custom-gradient function",
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
                elif problem.check == "variables" and problem.input is None:
                    other = "inside tf.function" if execution == "eager" else "eagerly"
                    merged.append(
                        replace(
                            problem,
                            execution=execution,
                            message=problem.message + f" (the same code runs {other}, where the variable "
                            "arrives as a tensor)",
                        )
                    )
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
            constants = [a for a in self.plan.positional if a.role == "constant"]
            keywords = [a for a in self.plan.arguments if a.keyword]
            if "keywords arguments only when eager" in message or (keywords and "keyword" in message):
                names = ", ".join(a.name for a in keywords) or "them"
                hint = (
                    f"inside tf.function, custom_gradient refuses keyword arguments: pass {names} positionally "
                    "(returning None for it), or bind it with functools.partial"
                )
            elif constants:
                described = ", ".join(f"{a.name}={a.value!r} (becomes {_graph_dtype(a.value)})" for a in constants)
                hint = (
                    f"inside tf.function, custom_gradient converts the Python constant {described} to a "
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
        assert self.harness is not None
        problems = []
        for source in self.harness.sources:
            a = first.grads.get(source.name) if first.grads else None
            b = second.grads.get(source.name) if second.grads else None
            if a is None or b is None or a.shape != b.shape:
                continue
            finite = np.isfinite(a) & np.isfinite(b)
            tol = compare.tolerance(source.dtype, "native", self.settings.rtol, self.settings.atol)
            result = compare.compare_elementwise(a, b, tol, mask=finite)
            if not result.ok or not np.array_equal(np.isfinite(a), np.isfinite(b)):
                problems.append(
                    Problem(
                        "execution",
                        source.name,
                        f"eager and tf.function give different gradients of {source.name} "
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
        """Judge each source's gradient against the references, redrawing where only FD disagrees."""
        assert self.harness is not None and self.reference is not None
        pending = [s for s in self.harness.sources if s.name not in skip]
        verdicts: dict[str, _Verdict] = {}
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
                native = self.reference.native(values, upstreams)
                if not native.ok and index == 0:
                    self.notes.append(
                        "native autodiff of the forward pass raised "
                        f"({describe_exception(native.error, self.subject.path)}); finite differences decide"  # type: ignore[arg-type]
                    )

            losses = self.reference.losses(values, upstreams)
            still = []
            for source in pending:
                verdict = self.judge(source, index, values, custom, native, losses, order=1)
                verdicts[source.name] = verdict
                if not verdict.final:
                    still.append(source)
            redrawn.update(s.name for s in still)
            pending = still
        if redrawn & {name for name, v in verdicts.items() if not v.problems}:
            self.notes.append(
                "finite differences disagreed at the first draw but not on a fresh one "
                "(a kink within the step); passed on redraw"
            )
        found: list[Problem] = []
        for source in self.harness.sources:
            verdict = verdicts.get(source.name)
            if verdict is None:
                continue
            found.extend(verdict.problems)
            self.notes.extend(n for n in verdict.notes if n not in self.notes)
        self.problems.extend(self.with_hints(found, verdicts))

    def judge(
        self,
        source: Source,
        draw: int,
        values: dict[str, Any],
        custom: Outcome,
        native: Outcome | None,
        losses: BatchedLoss,
        order: int,
    ) -> _Verdict:
        """The verdict on one source's gradient at one draw."""
        settings = self.settings
        name = source.name
        execution = custom.execution
        what = f"{'second-order ' if order == 2 else ''}gradient of {name}"
        notes: list[str] = []
        raw = custom.grads.get(name) if custom.grads else None
        if raw is None:
            notes.append(
                f"the backward function returned None for {name}: compared as zeros"
                if order == 1
                else f"the gradient of {name} does not depend on the inputs through TF ops (None): compared as zeros"
            )
            raw = np.zeros(source.shape)
        got = symmetrize(raw) if source.symmetric else raw
        if not np.all(np.isfinite(got)):
            bad = np.argwhere(~np.isfinite(got))
            index = tuple(int(i) for i in bad[0]) if got.ndim else ()
            return _Verdict(
                final=True,
                problems=[
                    Problem(
                        "finite",
                        name,
                        f"the {what} has NaN or Inf at {len(bad)} of {got.size} elements "
                        "where the forward output is finite",
                        execution=execution,
                        worst_index=index,
                        hint="a division by zero, log of zero, or an overflowing exp in the backward function?",
                        order=order,
                    )
                ],
                notes=notes,
            )
        use_numeric = settings.reference in ("both", "numeric")
        tol_native = compare.tolerance(source.dtype, "native", settings.rtol, settings.atol)
        tol_numeric = compare.tolerance(source.dtype, "numeric", settings.rtol, settings.atol)
        reference_dtype = self._reference_dtype(source)

        # Native autodiff, element-wise, where it is finite.
        native_grad = None
        native_result = None
        if native is not None and native.ok:
            native_raw = native.grads.get(name) if native.grads else None
            native_grad = np.zeros(source.shape) if native_raw is None else native_raw
            if source.symmetric:
                native_grad = symmetrize(native_grad)
            finite = np.isfinite(native_grad)
            if finite.any():
                native_result = compare.compare_elementwise(got, native_grad, tol_native, mask=finite)
                if not finite.all():
                    notes.append(
                        f"native autodiff gives NaN/Inf at {int((~finite).sum())} of {finite.size} elements "
                        f"of the {what} (as it does where people need custom gradients); finite differences judge those"
                    )
            else:
                notes.append(f"native autodiff of the {what} is NaN/Inf everywhere; finite differences judge it")
                native_grad = None

        # Finite differences: whole gradient (full mode) or random projections (fast).
        step = settings.eps if settings.eps is not None else default_step(reference_dtype)
        base = np.asarray(values[name], dtype=np.float64)
        scale = np.maximum(1.0, np.abs(base))
        numeric_ok: bool | None = None
        fd_gradient = None
        fd_result = None
        projections: list[compare.ProjectionComparison] = []
        native_projections_ok = None

        def acceptable(gradient: np.ndarray, error: np.ndarray) -> np.ndarray:
            # Elements that plain central differences already confirm need no second step.
            difference = np.abs(got - gradient)
            magnitude = float(np.max(np.abs(np.nan_to_num(gradient)), initial=0.0))
            bound = tol_numeric.atol + tol_numeric.rtol * (np.abs(gradient) + compare.NOISE_FLOOR * magnitude) + error
            return np.isfinite(gradient) & (difference <= 0.5 * bound)

        def full_gradient() -> tuple[np.ndarray, np.ndarray]:
            gradient, error, _ = finite_difference_gradient(
                losses, base, name, scale, step, reference_dtype, source.symmetric, accept=acceptable
            )
            strategy, why = self.reference.batching.get(name, ("", "")) if self.reference else ("", "")
            if strategy == "loop" and source.kind == "input":
                notes.append(
                    f"finite differences of {name} were evaluated one perturbation at a time: "
                    f"the function cannot be batched ({why})"
                )
            return gradient, error

        full = settings.mode == "full"
        jacobian = source.size * self._output_size()
        if full and jacobian > JACOBIAN_MAX_ENTRIES:
            full = False
            notes.append(
                f"full mode would compare a {jacobian:.2g}-entry Jacobian for {name}; "
                "checked with random projections (fast mode) instead"
            )
        if use_numeric:
            if full:
                fd_gradient, fd_error = full_gradient()
                fd_result, numeric_ok = self._judge_full(got, fd_gradient, fd_error, tol_numeric)
            else:
                rng = subject_rng(settings.seed, f"{self.subject.name}:{name}:directions:{order}", draw)
                native_hits = []
                for _ in range(PROJECTIONS):
                    direction = rng.standard_normal(size=source.shape)
                    if source.symmetric:
                        direction = symmetrize(direction)
                    direction = direction * scale
                    estimate = directional_derivative(losses, name, direction, step, reference_dtype)
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
            elif source.size <= LOCALISE_MAX_ELEMENTS:
                fd_gradient, fd_error = full_gradient()
                fd_result, numeric_ok = self._judge_full(got, fd_gradient, fd_error, tol_numeric)
                if numeric_ok:
                    notes.append(
                        f"native autodiff of {name} differs from the custom gradient, but finite differences "
                        "agree with the custom gradient element by element"
                    )
                    native_ok = None
        elif numeric_ok is False and settings.mode == "fast" and source.size <= LOCALISE_MAX_ELEMENTS:
            fd_gradient, fd_error = full_gradient()
            fd_result, full_ok = self._judge_full(got, fd_gradient, fd_error, tol_numeric)
            if full_ok:
                # The element-wise check is the finer one: the projection was a kink.
                numeric_ok = None

        problems: list[Problem] = []
        reference = None
        if native_ok is False:
            problems.append(self._native_problem(name, what, got, native_grad, native_result, execution, order))
            reference = native_grad
        if numeric_ok is False:
            problems.append(
                self._numeric_problem(
                    name,
                    what,
                    got,
                    fd_gradient,
                    fd_result,
                    projections,
                    execution,
                    native_grad if native_projections_ok else None,
                    order,
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
                return _Verdict(final=False, problems=problems, notes=notes)
            if inconclusive and native_ok is not False:
                if native_ok:
                    notes.append(
                        f"finite differences were unreliable for {name} at every draw (a kink or jump "
                        "near the inputs); native autodiff agrees with the custom gradient"
                    )
                    return _Verdict(final=True, problems=problems, notes=notes)
                problems.append(
                    Problem(
                        "numeric",
                        name,
                        f"finite differences were unreliable for the {what} at every draw (a kink or jump "
                        "within the step) and no other reference was usable",
                        execution=execution,
                        hint='check with reference = "native", or draw inputs away from the kink',
                        order=order,
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
                    f"native autodiff gives no finite {what} to compare with",
                    execution=execution,
                    hint='use reference = "numeric" or "both"',
                    order=order,
                )
            )
        return _Verdict(final=True, problems=problems, notes=notes, custom=got, reference=reference)

    def _output_size(self) -> int:
        assert self.harness is not None
        return sum(int(np.prod(spec.shape, dtype=np.int64)) for spec in self.harness.output_specs or [])

    def _reference_dtype(self, source: Source) -> str:
        if source.kind == "variable":
            return source.dtype
        if self.reference is not None and self.reference is not self.harness:
            return "float64"
        return source.dtype

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
        what: str,
        got: np.ndarray,
        native_grad: np.ndarray | None,
        result: compare.Comparison | None,
        execution: str,
        order: int,
    ) -> Problem:
        assert result is not None and native_grad is not None
        return Problem(
            "native",
            name,
            f"the {what} differs from native autodiff at {result.mismatched} of {result.total} "
            f"elements (max abs error {result.max_abs_error:.3g} at {_fmt_index(result.worst_index)})",
            execution=execution,
            max_abs_error=result.max_abs_error,
            max_rel_error=result.max_rel_error,
            worst_index=result.worst_index,
            heatmap=compare.heat_map(got, np.nan_to_num(native_grad)),
            order=order,
        )

    def _numeric_problem(
        self,
        name: str,
        what: str,
        got: np.ndarray,
        fd_gradient: np.ndarray | None,
        fd_result: compare.Comparison | None,
        projections: list[compare.ProjectionComparison],
        execution: str,
        localiser: np.ndarray | None,
        order: int,
    ) -> Problem:
        if fd_gradient is not None and fd_result is not None:
            return Problem(
                "numeric",
                name,
                f"the {what} differs from finite differences at {fd_result.mismatched} of "
                f"{fd_result.total} elements (max abs error {fd_result.max_abs_error:.3g} at "
                f"{_fmt_index(fd_result.worst_index)})",
                execution=execution,
                max_abs_error=fd_result.max_abs_error,
                max_rel_error=fd_result.max_rel_error,
                worst_index=fd_result.worst_index,
                heatmap=compare.heat_map(got, fd_gradient),
                order=order,
            )
        failing = [p for p in projections if p.conclusive and not p.ok] or projections
        worst = max(failing, key=lambda p: p.abs_error)
        located = None
        if localiser is not None:
            located = compare.compare_elementwise(got, localiser, compare.Tolerance(0.0, 0.0))
        return Problem(
            "numeric",
            name,
            f"the {what} differs from finite differences along a random direction: "
            f"<gradient, u> = {worst.projected:.6g}, finite differences give {worst.estimate:.6g}",
            execution=execution,
            max_abs_error=worst.abs_error,
            max_rel_error=worst.rel_error,
            worst_index=located.worst_index if located is not None else None,
            order=order,
        )

    def with_hints(self, problems: list[Problem], verdicts: dict[str, _Verdict]) -> list[Problem]:
        """Attach the likely bug to each value problem where the pattern is recognisable."""
        customs = {n: v.custom for n, v in verdicts.items() if v.custom is not None and v.reference is not None}
        references = {n: v.reference for n, v in verdicts.items() if v.custom is not None and v.reference is not None}
        swaps = compare.swap_hint(customs, references)  # type: ignore[arg-type]
        ones_reference: dict[str, np.ndarray] | None = None
        hinted = []
        for problem in problems:
            name = problem.input
            if problem.hint is None and problem.check in ("native", "numeric") and name in references:
                hint = swaps.get(name)  # type: ignore[arg-type]
                if hint is None:
                    if ones_reference is None:
                        ones_reference = self._ones_reference()
                    hint = compare.value_hint(customs[name], references[name], ones_reference.get(name))  # type: ignore[index,arg-type]
                if hint is None and problem.order == 1:
                    hint = self._upstream_hint(name, customs[name])  # type: ignore[index,arg-type]
                if hint is None and problem.order == 1:
                    hint = self._transposed_operand_hint(name, references[name])  # type: ignore[arg-type]
                if hint is not None:
                    problem = replace(problem, hint=hint)
            hinted.append(problem)
        return hinted

    def _upstream_hint(self, name: str, got: np.ndarray) -> str | None:
        """Recognise a backward function that drops or mixes up the upstream gradients of several outputs.

        Reruns native autodiff with one upstream zeroed, or two same-shaped
        upstreams exchanged: if that is what the custom gradient computed, the
        backward function ignores that output's upstream or takes them in
        another order than TensorFlow passes them.
        """
        assert self.reference is not None
        labels = self.reference.output_labels
        if len(labels) < 2:
            return None
        values, upstreams = self.draw(0)

        def native_with(changed: list[np.ndarray]) -> np.ndarray | None:
            outcome = self.reference.native(values, changed)  # type: ignore[union-attr]
            return outcome.grads.get(name) if outcome.ok and outcome.grads else None

        for j, label in enumerate(labels):
            changed = [np.zeros_like(u) if i == j else u for i, u in enumerate(upstreams)]
            expected = native_with(changed)
            if expected is not None and compare.close(got, expected):
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
                expected = native_with(changed)
                if expected is not None and compare.close(got, expected):
                    return (
                        f"the backward function takes the upstream gradients of outputs {labels[i]} and "
                        f"{labels[j]} in swapped order: TensorFlow passes one per output in tf.nest.flatten "
                        "order (a dict's keys sorted)"
                    )
        return None

    def _transposed_operand_hint(self, name: str, reference: np.ndarray) -> str | None:
        """Recognise a missing transpose inside the backward function.

        For each square matrix input, rerun the custom gradient with that
        input transposed: if the gradient of ``name`` then equals the
        reference, the backward function uses the operand the wrong way round.
        """
        assert self.harness is not None and self.plan is not None
        values, upstreams = self.draw(0)
        for argument in self.plan.tensors:
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
        assert self.reference is not None
        values, upstreams = self.draw(0)
        outcome = self.reference.native(values, [np.ones_like(u) for u in upstreams])
        if not outcome.ok or outcome.grads is None:
            return {}
        return {n: g for n, g in outcome.grads.items() if g is not None and np.all(np.isfinite(g))}

    # -- second order ----------------------------------------------------------

    def second_order_checks(self, skip: set[str]) -> None:
        """The gradient of the custom gradient against finite differences of the gradient (and native)."""
        assert self.harness is not None and self.reference is not None
        values, upstreams = self.draw(0)
        sources = [s for s in self.harness.sources if s.name not in skip]
        rng = subject_rng(self.settings.seed, self.subject.name + ":second-order", 0)
        weights = {s.name: rng.standard_normal(size=s.shape) for s in sources}
        custom = self.harness.second_order(values, upstreams, weights, "custom")
        if not custom.ok:
            self.problems.append(
                Problem(
                    "numeric",
                    None,
                    "second order: the gradient of the custom gradient could not be computed: "
                    + describe_exception(custom.error, self.subject.path),  # type: ignore[arg-type]
                    execution="eager",
                    hint="the backward function must be built from differentiable TensorFlow ops "
                    "(or carry a @tf.custom_gradient of its own)",
                    order=2,
                )
            )
            return
        native = None
        if self.settings.reference in ("both", "native"):
            native = self.reference.second_order(values, upstreams, weights, "native")

        losses = one_at_a_time(
            lambda moved: self.reference.first_order_loss(moved, upstreams, weights),  # type: ignore[union-attr]
            values,
        )
        verdicts = {}
        found: list[Problem] = []
        for source in sources:
            verdict = self.judge(source, 0, values, custom, native, losses, order=2)
            verdicts[source.name] = verdict
            found.extend(verdict.problems)
            self.notes.extend(n for n in verdict.notes if n not in self.notes)
        self.problems.extend(self.with_hints(found, verdicts))
        if not found:
            self.notes.append("second order: the gradient of the custom gradient agrees with the references")


class _NeedsConfig(Exception):
    """A class cannot be built without constructor arguments from the config."""


class _NeedsFloat32(Exception):
    """Probing found only float64-versus-float32 clashes: the code is written for float32."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _graph_dtype(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool tensor"
    if isinstance(value, int):
        return "an int32 tensor"
    if isinstance(value, float):
        return "a float32 tensor"
    return "a tensor"


def _accepts_keyword(function: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


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
    for leaf in plan.leaves:
        if leaf.spec is None:
            values[leaf.name] = leaf.value
            continue
        array = draw_tensor(leaf.spec, rng)
        if leaf.spec.differentiable and leaf.spec.dtype != "float64":
            # Keep the base point exactly representable, so perturbations are exact too.
            array = _round_to(array, leaf.spec.dtype)
        values[leaf.name] = array
    return values


def _round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        tf = _tf.tensorflow()
        return np.asarray(tf.cast(tf.cast(array, tf.bfloat16), tf.float64))
    return np.asarray(array).astype(dtype).astype(np.float64)


def input_records(plan: CallPlan | None, harness: Harness | None) -> tuple[InputRecord, ...]:
    """The arguments and variables as fed, for the report."""
    records = []
    for argument in plan.leaves if plan is not None else ():
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
    if harness is not None:
        for name, variable in harness.variables:
            records.append(
                InputRecord(
                    name=name, shape=tuple(variable.shape.as_list()), dtype=variable.dtype.name, role="variable"
                )
            )
    return tuple(records)


def _fed_dtype(check: _Check) -> str:
    """The dtype the float inputs were fed in (an input signature or the config can fix it)."""
    if check.plan is not None:
        dtypes = {a.spec.dtype for a in check.plan.differentiable if a.spec is not None}
        if len(dtypes) == 1:
            return dtypes.pop()
    return check.dtype


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
    with _checking(request):
        try:
            built = check.build(request.settings.dtype)
            if not built.plan.unknown:
                return ShapeGuess(plan=built.plan)
            probed = check.probe(built.plan, built)
        except (UserCodeError, _NeedsConfig) as error:
            return ShapeGuess(plan=None, failure=str(error))
        except _NeedsFloat32:
            check.dtype = "float32"
            try:
                built = check.build("float32")
                probed = check.probe(built.plan, built)
            except (UserCodeError, _NeedsConfig, _NeedsFloat32) as error:
                return ShapeGuess(plan=None, failure=str(error))
    if probed is None:
        return ShapeGuess(plan=None, failure=check.probe_failure or check.skip_reason)
    return ShapeGuess(plan=probed)


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
            _tf.quiet_logs(),
            tf.device(_tf.device_name(request.settings.device)),
        ):
            yield


def check_subject(request: CheckRequest) -> Result:
    """Check one function or layer; the user's exceptions become ``error`` results, never escape."""
    start = time.perf_counter()
    check = _Check(request)
    with _checking(request):
        try:
            status = check.run()
        except SystemExit as exit_:  # the user's code called sys.exit(): not a reason to end the run
            status = "error"
            check.problems.append(
                exception_problem(
                    f"the function called sys.exit({exit_.code!r})", exit_, request.subject.path, described=False
                )
            )
    subject = request.subject
    return Result(
        id=subject.id,
        name=subject.name,
        kind=subject.kind,
        status=status,
        dtype=_fed_dtype(check),
        inputs=input_records(check.plan, check.harness),
        problems=tuple(check.problems),
        seconds=time.perf_counter() - start,
        notes=tuple(check.notes),
        skip_reason=check.skip_reason,
        path=subject.path,
        line=subject.line,
        backward_line=check.backward_line,
        reproduce=request.reproduce if status in ("failed", "error") else None,
    )
