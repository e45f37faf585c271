"""Build the call target, plan the call, probe shapes, draw and redraw inputs.

Everything here happens before any gradient is judged: a target that cannot
be built or called becomes a :class:`NeedsConfig`, :class:`UserCodeError` or
:class:`NeedsFloat32` for the checklist in :mod:`gradcheck.checking` to turn into a
result.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gradcheck import _tf, nesting, probing
from gradcheck.arrays import standard_normal
from gradcheck.checking.exceptions import UserCodeError, describe_exception, message_of
from gradcheck.config import VariableValue
from gradcheck.harness import Harness
from gradcheck.inputs import CallPlan, TensorSpec, draw_tensor, plan_call, subject_rng
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.results import InputRecord, format_shape
from gradcheck.targets import FunctionTarget, LayerTarget, Patch, ReachingTarget, WrapperTarget

if TYPE_CHECKING:
    from gradcheck.checking.request import CheckRequest

#: Exceptions that mean "these shapes do not fit" while probing.
_SHAPE_ERRORS = ("InvalidArgumentError", "ValueError", "TypeError", "IndexError")
#: How TensorFlow says that float64 inputs met float32 code.
_DTYPE_CLASH = re.compile(
    r"(double|float64).*(float32|\bfloat\b)|(float32|\bfloat\b).*(double|float64)", re.IGNORECASE | re.DOTALL
)


class NeedsConfig(Exception):
    """The config must give what gradcheck cannot make: constructor arguments, or Python-valued arguments."""

    def __init__(self, message: str, constants: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.constants = constants
        """The ``constants`` entries asked for, each a name and its TOML placeholder (for ``gradcheck init``)."""


class NeedsFloat32(Exception):
    """Float64 inputs met code written for float32: the check is rerun in float32."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(message_of(error))
        self.error = error


def dtype_clash(error: BaseException) -> bool:
    """True when ``error`` says that float64 inputs met float32 code."""
    return type(error).__name__ in _SHAPE_ERRORS and bool(_DTYPE_CLASH.search(message_of(error)))


@dataclass(frozen=True)
class Built:
    """A call target with its plan and the things needed to run and name it."""

    target: Any
    plan: CallPlan
    name_variable: Callable[[Any], str]
    layer: Any = None
    fresh_layer: bool = False
    """True when gradcheck constructed the layer (its weights are then redrawn, seeded)."""


# -- targets -------------------------------------------------------------------


def table_key(request: CheckRequest) -> str:
    """``[functions.NAME]`` or ``[layers.NAME]``: where the subject's config lives."""
    subject = request.subject
    table = "layers" if subject.kind == "layer" else "functions"
    name = subject.name if "." not in subject.name else f'"{subject.name}"'
    return f"[{table}.{name}]"


def _init_kwargs(request: CheckRequest, dtype: str = "float64") -> dict[str, Any]:
    init = dict(request.config.init) if request.config else {}
    return {name: materialize(value, dtype) for name, value in init.items()}


def materialize(value: Any, dtype: str) -> Any:
    """A config value as the code gets it: a ``{ value = ..., variable = true }`` table becomes a ``tf.Variable``."""
    if not isinstance(value, VariableValue):
        return value
    tf = _tf.tensorflow()
    array = np.asarray(value.value)
    chosen = value.dtype or (dtype if array.dtype.kind == "f" else "int32")
    return tf.Variable(array, dtype=chosen)


def _construct(request: CheckRequest, cls: type, kwargs: dict[str, Any], what: str) -> Any:
    given = sorted(request.config.init) if request.config else []
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as error:
        raise NeedsConfig(_init_hint(request, cls, given, error)) from error
    except ValueError:  # no signature to check against: let the call itself tell
        pass
    try:
        return cls(**kwargs)
    except Exception as error:  # the user's constructor raised
        described = describe_exception(error, request.subject.path)
        if not given:
            advice = f"give its arguments as init = {{...}} in {table_key(request)}"
        elif re.search(r"\bVariable\b", message_of(error)):
            advice = "give the argument it names as { value = ..., variable = true } in init"
        else:
            advice = f"it rejected the init values given ({', '.join(given)}): check them"
        raise UserCodeError(
            f"could not construct {cls.__name__}(**init) for the {what}: {described}; {advice}"
        ) from error


def _init_hint(request: CheckRequest, cls: type, given: list[str], error: TypeError) -> str:
    """What to add to ``init``: only the required arguments not given yet, never those just given."""
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    missing = [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in given
    ]
    wanted = ", ".join(f"{name} = ..." for name in missing) or "..."
    where = table_key(request)
    if request.subject.kind == "function" and "." in request.subject.name:
        where += f" (or [classes.{cls.__name__}], shared by every method)"
    already = f"; init gives {', '.join(given)}" if given else ""
    return (
        f"{cls.__name__}(...) needs constructor arguments ({message_of(error)}){already}; "
        f"add to {request.config_label}: {where} init = {{ {wanted} }}"
    )


def build(request: CheckRequest, dtype: str) -> Built:
    """The call target and its plan, with float inputs in ``dtype``."""
    subject = request.subject
    namer = variable_namer(request, None)
    if subject.kind == "layer":
        return _build_layer(request, dtype)
    forward = subject.forward
    assert forward is not None
    if subject.binding == "method":
        instance = _construct(request, subject.owner, _init_kwargs(request, dtype), "method")  # type: ignore[arg-type]
        forward = forward.__get__(instance, subject.owner)
        namer = variable_namer(request, instance)
    elif subject.binding == "classmethod":
        forward = forward.__get__(subject.owner, type(subject.owner))
    if subject.reaching:
        target: Any = ReachingTarget(forward, subject.name)
    elif subject.binding == "wrapper":
        target = WrapperTarget(subject.obj, forward)
    else:
        target = FunctionTarget(forward, subject.name.rsplit(".", 1)[-1])
    plan = _plan(request, inspect.signature(forward), dtype)
    if subject.reaching:
        _refuse_python_values(request, forward, plan)
    return Built(target, plan, namer)


def _refuse_python_values(request: CheckRequest, forward: Callable[..., Any], plan: CallPlan) -> None:
    """Required arguments the code uses as Python values (a mode string, a loop count, a function) cannot be
    drawn: ask for them all at once, each in the form the config gives it."""
    python_values = nesting.non_tensor_parameters(forward)
    wanted = [(name, python_values[name]) for name in plan.unknown if name in python_values]
    if not wanted:
        return
    placeholders = tuple((name, constant_placeholder(name, found)) for name, found in wanted)
    line = ", ".join(f"{name} = {placeholder}" for name, placeholder in placeholders)
    if len(wanted) == 1:
        name, found = wanted[0]
        what = f"argument {name} is {_python_kind(found)}, not a tensor ({found.reason})"
    else:
        described = [f"{name} ({_python_kind(found)}: {found.reason})" for name, found in wanted]
        what = f"arguments {', '.join(described[:-1])} and {described[-1]} are not tensors"
    raise NeedsConfig(
        f"{what}; add to {request.config_label}: {table_key(request)} constants = {{ {line} }}", placeholders
    )


def _python_kind(found: nesting.PythonParameter) -> str:
    return "a Python callable" if found.callable else "a Python value"


def constant_placeholder(name: str, found: nesting.PythonParameter) -> str:
    """What the config's ``constants`` should hold for a Python-valued argument: a callable is imported."""
    return f'{{ import = "your_module:{name}" }}' if found.callable else "..."


def _plan(request: CheckRequest, signature: inspect.Signature, dtype: str) -> CallPlan:
    subject = request.subject
    signature_shapes = None
    if subject.input_signature:
        parameters = [p.name for p in signature.parameters.values()]
        signature_shapes = {}
        for name, spec in zip(parameters, subject.input_signature):
            shape = getattr(spec, "shape", None)
            spec_dtype = getattr(spec, "dtype", None)
            if shape is None or spec_dtype is None or shape.rank is None:
                continue
            signature_shapes[name] = (tuple(shape.as_list()), spec_dtype.name)
    table = "layers" if subject.kind == "layer" else "functions"
    plan = plan_call(
        signature,
        request.config,
        request.dims,
        dtype,
        request.config_label,
        f"{table}.{subject.name}",
        request.shape_overrides,
        signature_shapes,
    )
    return plan.with_constants(lambda value: materialize(value, dtype))


def _build_layer(request: CheckRequest, dtype: str) -> Built:
    subject = request.subject
    if isinstance(subject.obj, type):
        cls = subject.obj
        kwargs = _init_kwargs(request, dtype)
        if "dtype" not in kwargs and _accepts_keyword(cls.__init__, "dtype"):
            kwargs["dtype"] = dtype
        layer = _construct(request, cls, kwargs, "layer")
        fresh = True
    else:
        layer = subject.obj  # the user's own instance: checked as it is, weights restored afterwards
        fresh = False
    patches = [
        Patch(namespace, name, namespace[name], parts.forward)
        for namespace, name in subject.patches
        if (parts := _tf.custom_gradient_parts(namespace[name])) is not None
    ]
    signature = inspect.signature(layer.call)
    plan = _plan(request, signature, dtype)
    target = ReachingTarget(layer, subject.name) if subject.reaching else LayerTarget(layer, patches)
    return Built(target, plan, variable_namer(request, layer), layer, fresh)


def variable_namer(request: CheckRequest, owner: Any) -> Callable[[Any], str]:
    """Name a variable by the attribute or global that holds it, else by its own name."""
    subject = request.subject
    module = subject.module
    forward = subject.forward

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
        code_owner = forward if forward is not None else getattr(subject.owner, "call", None)
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


def _accepts_keyword(function: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


# -- probing -------------------------------------------------------------------


@dataclass(frozen=True)
class Probed:
    """What probing found: a plan with shapes (and a note saying so), or why there is none."""

    plan: CallPlan | None
    note: str | None = None
    failure: str | None = None
    """Why no guessed shapes worked, in a few words."""
    skip_reason: str | None = None
    """The same, with the config to add."""


def probe(request: CheckRequest, plan: CallPlan, built: Built, dtype: str) -> Probed:
    """The first guessed inputs the forward pass accepts, or why none did (see :mod:`gradcheck.probing`)."""
    subject = request.subject
    names = plan.unknown
    search = probing.Search(names, probing.hints_for(_documented(built, subject), names))

    def forward(guess: probing.Guess) -> probing.Attempt:
        candidate = plan.with_specs(guess_specs(guess, names, dtype))
        harness = Harness(built.target, candidate, built.name_variable)
        values = draw_values(candidate, subject_rng(request.settings.seed, subject.name, 0))
        try:
            outputs = harness.outputs(values)
        except Exception as error:  # the forward refused these shapes (or these values)
            if raised_by_gradcheck(error):
                raise
            return probing.Attempt(guess, error=error)
        finally:
            harness.restore()
        return probing.Attempt(guess, finite=all(np.all(np.isfinite(o)) for o in outputs), outputs=bool(outputs))

    found = search.run(forward, stop=_stop_probing)
    if found is not None:
        return Probed(plan.with_specs(guess_specs(found.guess, names, dtype)), note=probe_note(search, found, names))
    return _no_shapes(request, search, dtype)


def _stop_probing(attempts: list[probing.Attempt]) -> bool:
    """Stop early where more guesses would not help.

    Float64 inputs meeting float32 code: the check reruns in float32, which
    probes again. The same error whatever the shapes: a bug, not a shape.
    """
    if attempts and attempts[-1].error is not None and dtype_clash(attempts[-1].error):
        return True
    last = [a.error for a in attempts[-3:]]
    if len(last) < 3 or any(e is None for e in last):
        return False
    return len({(type(e), str(e)) for e in last}) == 1 and len({a.guess.shapes for a in attempts[-3:]}) > 1


def _no_shapes(request: CheckRequest, search: probing.Search, dtype: str) -> Probed:
    """Why no guess worked: the forward pass's own bug, float32 code, or a skip naming what to configure."""
    subject = request.subject
    errors = search.errors
    if errors and _same_failure_whatever_the_shapes(errors):
        raise UserCodeError(f"forward pass raised: {describe_exception(errors[-1], subject.path)}") from errors[-1]
    clash = next((e for e in reversed(errors) if dtype_clash(e)), None)
    if clash is not None and dtype == "float64":
        raise NeedsFloat32(clash)
    names = search.names
    ran = next((a for a in search.attempts if a.error is None), None)
    if ran is not None:
        # The suggestion is a shape the forward pass ran on (its values, not its shapes, failed).
        shapes = dict(zip(names, ran.guess.shapes))
        example = ", ".join(
            f"{name} = {{ shape = {list(shape)}, low = ..., high = ... }}" for name, shape in shapes.items()
        )
    else:
        # A documented list of tensors is one input per tensor: the form is not one the user would guess.
        example = ", ".join(
            f"{name} = {{ items = [[...], [...]] }}" if search.hints[name].sequence else f"{name} = [...]"
            for name in names
        )
    last_error = errors[-1] if errors else None
    why = f" (last try: {describe_exception(last_error, subject.path)})" if last_error else ""
    tried = f"{len(search.attempts)} tried"
    return Probed(
        None,
        failure=f"no guessed shapes worked ({tried}){why}",
        skip_reason=f"no shapes configured for {', '.join(names)} and no guessed shapes worked ({tried}){why}; "
        f"add to {request.config_label}: {table_key(request)} inputs = {{ {example} }}",
    )


def _documented(built: Built, subject: Any) -> Any:
    """The function whose signature and docstring describe the probed parameters."""
    if subject.kind == "layer" and built.layer is not None:
        return built.layer.call
    return subject.forward


def guess_specs(guess: probing.Guess, names: tuple[str, ...], dtype: str) -> dict[str, TensorSpec]:
    """The tensor specs a guess stands for: float, integer (in an indexing range) or complex."""
    floats = [shape for shape, kind in zip(guess.shapes, guess.kinds) if kind == "float"]
    complex_dtype = "complex128" if dtype == "float64" else "complex64"
    specs = {}
    for name, shape, kind, positive in zip(names, guess.shapes, guess.kinds, guess.positive):
        if kind == "integer":
            low, high = probing.integer_range(name, floats)
            specs[name] = TensorSpec(shape, "int32", "integer", float(low), float(high))
        elif kind == "complex":
            specs[name] = TensorSpec(shape, complex_dtype)
        else:
            square = len(shape) >= 2 and shape[-1] == shape[-2]
            if guess.unit and not square:
                specs[name] = TensorSpec(shape, dtype, "uniform", 0.1, 0.9)
                continue
            distribution = ("spd" if square else "positive") if positive else "normal"
            specs[name] = TensorSpec(shape, dtype, distribution)
    return specs


def probe_note(search: probing.Search, found: probing.Attempt, names: tuple[str, ...]) -> str:
    """What probing chose and why, for the report's notes."""
    guess = found.guess
    specs = guess_specs(guess, names, "float64")
    described = ", ".join(
        f"{name}={format_shape(spec.shape)}"
        + (f" int32 in [{int(spec.low or 0)}, {int(spec.high or 0)})" if spec.distribution == "integer" else "")
        + (" complex" if not spec.differentiable and spec.distribution != "integer" else "")
        for name, spec in specs.items()
    )
    if guess.source != "small shapes":
        described += f" ({guess.source})"
    positive = [n for n, p, k in zip(names, guess.positive, guess.kinds) if p and k == "float"]
    by_name = [n for n in positive if search.hints[n].positive]
    if (
        positive
        and len(search.attempts) > 1
        and search.attempts[-2].guess.shapes == guess.shapes
        and set(by_name) != set(positive)
    ):
        before = search.attempts[-2]
        what = "NaN or Inf" if before.error is None else f"an error ({type(before.error).__name__})"
        described += (
            f" (draws in [0.1, 0.9): positive draws gave {what})"
            if guess.unit
            else f" (positive draws: normal draws gave {what})"
        )
    elif positive and set(by_name) == set(positive):
        described += (
            f" ({', '.join(by_name)} drawn positive, as {'its name says' if len(by_name) == 1 else 'their names say'})"
        )
    elif positive:
        described += " (positive draws)"
    return f"no shapes configured: using guessed shapes {described}; set them in the config to check the shapes you use"


def _same_failure_whatever_the_shapes(errors: list[BaseException]) -> bool:
    """True when probing failed for a reason that has nothing to do with shapes.

    Shape errors name the shapes, so their messages change from one guess
    to the next; an error that reads the same for every guess, or that
    is no kind of shape error at all, is a bug in the forward pass.
    """
    if any(dtype_clash(e) for e in errors):
        return False
    if len({(type(e), str(e)) for e in errors}) == 1 and len(errors) > 1:
        return True
    return all(type(e).__name__ not in _SHAPE_ERRORS for e in errors)


# -- draws ---------------------------------------------------------------------


@dataclass(frozen=True)
class Draws:
    """Input values, variable values and upstream gradients of each draw, made once each.

    Draw 0 is given by the forward pass that found the variables; a redraw
    takes fresh inputs and upstream gradients and keeps the variables where
    draw 0 put them.
    """

    seed: int
    name: str
    plan: CallPlan
    harness: Harness
    _made: dict[int, tuple[dict[str, Any], list[np.ndarray]]] = field(default_factory=dict)

    def first(self, values: dict[str, Any]) -> None:
        """Record draw 0 (the values the first forward pass ran on)."""
        self._made[0] = frozen(values, self.upstreams(0))

    def __call__(self, index: int) -> tuple[dict[str, Any], list[np.ndarray]]:
        if index not in self._made:
            values = draw_values(self.plan, subject_rng(self.seed, self.name, index))
            first = self._made[0][0]
            values.update({name: first[name] for name, _ in self.harness.variables})
            self._made[index] = frozen(values, self.upstreams(index))
        return self._made[index]

    def upstreams(self, index: int) -> list[np.ndarray]:
        """The seeded upstream gradients of draw ``index``, one per output."""
        rng = subject_rng(self.seed, self.name + ":upstream", index)
        return [standard_normal(rng, spec.shape) for spec in self.harness.output_specs or []]


def frozen(values: dict[str, Any], upstreams: list[np.ndarray]) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A draw whose arrays cannot change: the harness then converts each to a tensor only once."""
    for array in [*values.values(), *upstreams]:
        if isinstance(array, np.ndarray):
            array.flags.writeable = False
    return values, upstreams


def redraw_layer_weights(values: dict[str, Any], layer: Any, harness: Harness, rng: np.random.Generator) -> None:
    """Give a fresh layer's weights seeded values, so the report does not depend on Keras's seeds.

    Each weight keeps the sign and scale its initializer gave it: an
    all-positive weight (a scale) stays positive, an all-zero one (a bias)
    gets small values so that its gradient is exercised.
    """
    weights = {id(_tf.underlying_variable(w)) for w in getattr(layer, "trainable_weights", [])}
    for name, variable in harness.variables:
        if id(variable) not in weights:
            continue
        current = np.asarray(variable.numpy(), dtype=np.float64)
        scale = float(np.std(current)) or float(np.mean(np.abs(current))) or 0.1
        drawn = rng.standard_normal(size=current.shape) * scale
        if current.size and np.all(current > 0):
            drawn = np.abs(drawn) + float(np.min(current))
        values[name] = round_to(drawn, variable.dtype.name)


class InputTooLarge(Exception):
    """gradcheck's own draw of a configured input did not fit in memory: the config's shape is at fault."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        size = math.prod(shape)
        super().__init__(
            f"input {name}: shape {format_shape(shape)} is {size:,} elements ({size * 8 / 1e9:.1f} GB in float64): "
            "too large to draw in this process's memory, so the function was not called"
        )
        self.name = name


def draw_values(plan: CallPlan, rng: np.random.Generator) -> dict[str, Any]:
    """One set of argument values: tensors drawn from ``rng``, constants as they are."""
    values: dict[str, Any] = {}
    for leaf in plan.leaves:
        if leaf.spec is None:
            values[leaf.name] = leaf.value
            continue
        try:
            array = draw_tensor(leaf.spec, rng)
        except MemoryError:
            raise InputTooLarge(leaf.name, leaf.spec.shape) from None
        if leaf.spec.differentiable and leaf.spec.dtype != "float64":
            # Keep the base point exactly representable, so perturbations are exact too.
            array = round_to(array, leaf.spec.dtype)
        values[leaf.name] = array
    return values


def round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` rounded to ``dtype``'s precision, kept in float64."""
    if dtype == "bfloat16":
        tf = _tf.tensorflow()
        return np.asarray(tf.cast(tf.cast(array, tf.bfloat16), tf.float64))
    return np.asarray(array).astype(dtype).astype(np.float64)


# -- the second try and the references -----------------------------------------


def keyword_convention(
    plan: CallPlan, kind: str, outcomes: Mapping[str, Outcome], already: frozenset[str]
) -> frozenset[str]:
    """Constants with defaults that the backward function treats as named arguments.

    A backward function returning gradients for every positional argument
    but the defaulted constants is written for calls that name those
    constants (``f(x, axis=1)``), which custom_gradient does not count as
    inputs. Returns their names, to be passed by keyword instead.
    """
    if already or kind == "layer":
        return frozenset()
    record = outcomes.get("eager", next(iter(outcomes.values()))).record
    if record.returned is None:
        return frozenset()
    defaulted = frozenset(a.name for a in plan.positional if a.role == "constant" and a.has_default)
    if not defaulted:
        return frozenset()
    named = len(plan.with_keywords(set(defaulted)).slots)
    if len(record.returned) == named != len(plan.slots):
        return defaulted
    return frozenset()


def reference_harness(
    kind: str, dtype: str, built: Built, plan: CallPlan, harness: Harness, values: dict[str, Any], keep_tape: bool
) -> tuple[Harness, str | None]:
    """A harness that evaluates the references in float64 where the function allows it, and a note saying so.

    Low-precision gradients are compared with a wider reference: in
    float16 the finite difference of a smooth function often rounds to 0.
    ``keep_tape`` keeps its first forward pass for native autodiff (:meth:`Harness.outputs`).
    """
    if dtype == "float64" or kind == "layer":
        return harness, None
    wide = Harness(built.target, plan.with_dtype("float64"), built.name_variable)
    try:
        outputs = wide.outputs(values, keep_tape=keep_tape)
    except Exception as error:  # the code is written for its dtype: references stay in it
        if raised_by_gradcheck(error):
            raise
        wide.restore()
        return harness, None
    if not all(np.all(np.isfinite(o)) for o in outputs):
        wide.restore()
        return harness, None
    return wide, f"references (native autodiff, finite differences) evaluated in float64 for {dtype} inputs"


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
