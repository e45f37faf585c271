"""Building the call target and its call plan: the keyword convention and the reference harness too.

A target that cannot be built or called becomes a :class:`NeedsConfig`,
:class:`UserCodeError` or :class:`NeedsFloat32` for the checklist in
:mod:`gradcheck.checking` to turn into a result.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gradcheck import _tf, source_reading
from gradcheck.checking.exceptions import UserCodeError, describe_exception, message_of
from gradcheck.config import VariableValue
from gradcheck.dtypes import INTEGER_DEFAULT
from gradcheck.feed import default_variable_name
from gradcheck.first_pass import first_pass
from gradcheck.harness import Harness
from gradcheck.inputs import CallPlan, plan_call
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.kinds import SubjectKind
from gradcheck.loss import Draw
from gradcheck.results import Reason

if TYPE_CHECKING:
    from gradcheck.checking.request import CheckRequest

#: Exceptions that mean "these shapes do not fit" while probing.
SHAPE_ERRORS = ("InvalidArgumentError", "ValueError", "TypeError", "IndexError")
#: How TensorFlow says that float64 inputs met float32 code.
_DTYPE_CLASH = re.compile(
    r"(double|float64).*(float32|\bfloat\b)|(float32|\bfloat\b).*(double|float64)", re.IGNORECASE | re.DOTALL
)


class NeedsConfig(Exception):
    """The config must give what gradcheck cannot make: constructor arguments, or Python-valued arguments."""

    def __init__(self, message: str, reason: Reason, constants: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.reason = reason
        """Which the config must give: ``needs-init`` or ``needs-constants``."""
        self.constants = constants
        """The ``constants`` entries asked for, each a name and its TOML placeholder (for ``gradcheck init``)."""


class NeedsFloat32(Exception):
    """Float64 inputs met code written for float32: the check is rerun in float32."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(message_of(error))
        self.error = error


def dtype_clash(error: BaseException) -> bool:
    """True when ``error`` says that float64 inputs met float32 code."""
    return type(error).__name__ in SHAPE_ERRORS and bool(_DTYPE_CLASH.search(message_of(error)))


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
    name = subject.name if "." not in subject.name else f'"{subject.name}"'
    return f"[{subject.kind.table}.{name}]"


def _init_kwargs(request: CheckRequest, dtype: str = "float64") -> dict[str, Any]:
    init = dict(request.config.init) if request.config else {}
    return {name: materialize(value, dtype) for name, value in init.items()}


def materialize(value: Any, dtype: str) -> Any:
    """A config value as the code gets it: a ``{ value = ..., variable = true }`` table becomes a ``tf.Variable``."""
    if not isinstance(value, VariableValue):
        return value
    tf = _tf.tensorflow()
    array = np.asarray(value.value)
    chosen = value.dtype or (dtype if array.dtype.kind == "f" else INTEGER_DEFAULT)
    return tf.Variable(array, dtype=chosen)


def _construct(request: CheckRequest, cls: type, kwargs: dict[str, Any], what: str) -> Any:
    given = sorted(request.config.init) if request.config else []
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as error:
        raise NeedsConfig(_init_hint(request, cls, given, error), "needs-init") from error
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
            f"could not construct {cls.__name__}(**init) for the {what}: {described}; {advice}", "init-raised"
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
    if request.subject.kind.shares_class_table:
        where += f" (or [classes.{cls.__name__}], shared by every method)"
    already = f"; init gives {', '.join(given)}" if given else ""
    return (
        f"{cls.__name__}(...) needs constructor arguments ({message_of(error)}){already}; "
        f"add to {request.config_label}: {where} init = {{ {wanted} }}"
    )


def build(request: CheckRequest, dtype: str) -> Built:
    """The call target and its plan, with float inputs in ``dtype``: made as the subject's kind says."""
    subject = request.subject
    bound = subject.kind.bind(subject, _Constructor(request, dtype))
    target = subject.kind.target(subject, bound)
    plan = _plan(request, inspect.signature(bound.planned), dtype)
    python_valued = subject.kind.python_valued(bound)
    if python_valued is not None:
        refuse_python_values(request, python_valued, plan)
    return Built(target, plan, variable_namer(request, bound.owner), bound.layer, bound.fresh_layer)


class _Constructor:
    """How a check makes a method's instance or a layer: from the config's ``init``, or a skip saying what to give."""

    def __init__(self, request: CheckRequest, dtype: str) -> None:
        self.request = request
        self.dtype = dtype

    def instance(self, cls: type) -> Any:
        """An instance of a method's class."""
        return _construct(self.request, cls, _init_kwargs(self.request, self.dtype), "method")

    def layer(self, cls: type) -> Any:
        """A layer, in the check's dtype where its constructor takes one and ``init`` gives none."""
        kwargs = _init_kwargs(self.request, self.dtype)
        initializer = getattr(cls, "__init__")  # noqa: B009 (mypy refuses cls.__init__ on a type)
        if "dtype" not in kwargs and _accepts_keyword(initializer, "dtype"):
            kwargs["dtype"] = self.dtype
        return _construct(self.request, cls, kwargs, "layer")


def refuse_python_values(request: CheckRequest, forward: Callable[..., Any] | None, plan: CallPlan) -> None:
    """Required arguments the code uses as Python values (a mode string, a loop count, a function) cannot be
    drawn: ask for them all at once, each in the form the config gives it."""
    if forward is None:
        return
    python_values = source_reading.non_tensor_parameters(forward)
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
        f"{what}; add to {request.config_label}: {table_key(request)} constants = {{ {line} }}",
        "needs-constants",
        placeholders,
    )


def _python_kind(found: source_reading.PythonParameter) -> str:
    return "a Python callable" if found.callable else "a Python value"


def constant_placeholder(name: str, found: source_reading.PythonParameter) -> str:
    """What the config's ``constants`` should hold for a Python-valued argument: a callable is imported."""
    return f'{{ import = "your_module:{name}" }}' if found.callable else "..."


def _plan(request: CheckRequest, signature: inspect.Signature, dtype: str) -> CallPlan:
    return declared_plan(request, signature, dtype).with_constants(lambda value: materialize(value, dtype))


def declared_plan(request: CheckRequest, signature: inspect.Signature, dtype: str) -> CallPlan:
    """The call plan the config, the command line and an ``input_signature`` give ``signature``, before probing:
    the one way a plan is made, for a check (its constants then made) and for ``gradcheck list`` alike."""
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
    plan = plan_call(
        signature,
        request.config,
        request.dims,
        dtype,
        request.config_label,
        f"{subject.kind.table}.{subject.name}",
        request.shape_overrides,
        signature_shapes,
    )
    # A (*args) function the config gives no inputs: its kind's first guess of them, to probe; never none.
    guesses = subject.kind.positional_guesses
    return plan.with_open_positionals(guesses[0]) if guesses and not plan.positional else plan


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
        return default_variable_name(variable)

    return name


def _accepts_keyword(function: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def keyword_convention(
    plan: CallPlan, kind: SubjectKind, outcomes: Mapping[str, Outcome], already: frozenset[str]
) -> frozenset[str]:
    """Constants with defaults that the backward function treats as named arguments.

    A backward function returning gradients for every positional argument
    but the defaulted constants is written for calls that name those
    constants (``f(x, axis=1)``), which custom_gradient does not count as
    inputs. Returns their names, to be passed by keyword instead.
    """
    if already or not kind.keywords_by_convention:
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


def choose_reference_harness(
    kind: SubjectKind, dtype: str, built: Built, plan: CallPlan, harness: Harness, draw: Draw, native: bool
) -> tuple[Harness, str | None]:
    """A harness that evaluates the references in float64 where the function allows it, and a note saying so.

    Low-precision gradients are compared with a wider reference: in
    float16 the finite difference of a smooth function often rounds to 0.
    With ``native``, its first forward pass also computes native autodiff at
    ``draw`` (:func:`~gradcheck.first_pass.first_pass`).
    """
    if dtype == "float64" or not kind.references_in_float64:
        return harness, None
    float64_plan = plan.with_dtype("float64")
    try:
        first = first_pass(
            built.target, float64_plan, draw.values, built.name_variable, lambda _: draw.upstreams, native
        )
    except Exception as error:  # the code is written for its dtype: references stay in it
        if raised_by_gradcheck(error):
            raise
        return harness, None
    float64_harness = Harness(built.target, float64_plan, first)
    if not all(np.all(np.isfinite(o)) for o in first.outputs):
        float64_harness.restore()
        return harness, None
    return float64_harness, f"references (native autodiff, finite differences) evaluated in float64 for {dtype} inputs"
