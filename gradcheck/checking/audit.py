"""Audit what the backward functions returned: count, shapes, dtypes, ``variables``, "grad_fn called".

Pure functions from what was recorded to problems: nothing here runs the
user's code or keeps state. What a later stage needs (the inputs whose
gradient is no tensor, so no values can be compared) is returned, not stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradcheck.checking.diagnose import shape_hint
from gradcheck.checking.exceptions import exception_problem, message_of, strip_ansi
from gradcheck.inputs import CallPlan
from gradcheck.instrument import BackwardRecord, Outcome, ReturnedGradient
from gradcheck.kinds import SubjectKind
from gradcheck.results import Problem, format_shape

_VARIABLES_REFUSED = "must accept keyword argument 'variables'"
#: How ``tf.gradients`` (a ``tf.function``'s gradient) refuses a gradient whose shape its op input cannot take.
_REFUSED_SHAPE = re.compile(
    r"Incompatible shapes between op input and calculated input gradient\. Forward operation: (?P<op>.+?)\. "
    r"Input index: (?P<index>\d+)\. Original input shape: (?P<expected>\(.*?\)|<unknown>)\. "
    r"Calculated input gradient shape: (?P<got>\(.*?\)|<unknown>)"
)
_VARIABLES_HINT = (
    "accept variables=None in the backward function and return (input_gradients, variable_gradients), "
    "or pass tf.convert_to_tensor(weight) into the custom-gradient function instead of the variable"
)


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


@dataclass(frozen=True)
class Audited:
    """What one subject's backward functions owe and how they were called: the audit's whole input."""

    name: str
    """The subject's name."""
    kind: SubjectKind
    """What kind of subject it is: what its backward functions owe, how its variables reach them."""
    path: str | None
    """The user's file, for tracebacks."""
    plan: CallPlan
    variables: tuple[tuple[str, Any], ...] = ()
    """The variables the forward pass read, by name."""
    name_variable: Callable[[Any], str] = str
    wrapper: bool = False
    """True where gradcheck does not see the backward function called (a gradient wrapper's)."""


@dataclass(frozen=True)
class Audit:
    """The audit's problems, and the inputs whose gradient is no tensor (their values cannot be compared)."""

    problems: list[Problem]
    not_tensors: frozenset[str] = frozenset()
    misshapen: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """The sources (inputs, variables) whose gradient TensorFlow handed back in another shape than
    theirs, with that shape: their values cannot be compared."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def slots_for(subject: Audited, record: BackwardRecord) -> list[Slot]:
    """What this backward function owes gradients for."""
    if not subject.kind.owes_received:
        return [
            Slot(a.name, a.role, a.spec.shape if a.spec else None, a.spec.dtype if a.spec else None, a.value)
            for a in subject.plan.slots
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


_FAILED_PHASE = {
    "start": "custom_gradient refused the call",
    "forward": "forward pass raised",
    "forward-done": "TensorFlow raised after the forward pass",
    "backward": "backward function raised",
}


def audit(subject: Audited, outcome: Outcome) -> Audit:
    """Count, shape and dtype of what the backward functions returned in one run."""
    error = outcome.error
    records = outcome.records
    if error is not None and _VARIABLES_REFUSED in message_of(error):
        return Audit([variables_refused(subject, error, records)])
    refused = refused_shape(error) if error is not None else None
    failed = next((r for r in records if r.phase != "backward-done"), None)
    if error is not None and refused is None and (failed is not None or not records):
        if failed is not None and failed.malformed and failed.returned is None:
            return Audit([Problem("exception", None, failed.malformed)])
        where = _FAILED_PHASE[failed.phase if failed is not None else "forward"]
        return Audit([exception_problem(where, error, subject.path)])
    problems: list[Problem] = []
    not_tensors: set[str] = set()
    for record in records:
        if record.returned is not None:
            returned = audit_returned(subject, record)
            problems.extend(returned.problems)
            not_tensors |= returned.not_tensors
            problems.extend(audit_variables(subject.name_variable, record))
        if record.malformed and record.returned is not None:
            problems.append(Problem("variables", None, record.malformed, hint=_VARIABLES_HINT))
    if refused is not None and not any(p.check == "shape" for p in problems):
        problems.append(refused)
    elif error is not None and not problems:
        problems.append(
            exception_problem("TensorFlow raised after the backward function returned", error, subject.path)
        )
    if outcome.ok and not subject.wrapper:
        problems.extend(grad_fn_called(subject.plan, records))
    explained = any(p.check in ("shape", "variables", "count") for p in problems)
    shaped = audit_gradient_shapes(subject, outcome.grads or {}, explained)
    return Audit(problems + shaped.problems, frozenset(not_tensors), shaped.misshapen)


def refused_shape(error: BaseException) -> Problem | None:
    """TensorFlow refusing, inside a ``tf.function``, a gradient whose shape its op input cannot take.

    Eagerly TensorFlow hands such a gradient on as it is; ``tf.gradients``, which differentiates a
    ``tf.function``, raises. Where the backward function's own record shows the shape, the audit of
    that record says more; this is for gradients no record sees (a gradient registered for an op).
    """
    found = _REFUSED_SHAPE.search(strip_ansi(message_of(error)))
    if found is None:
        return None
    return Problem(
        "shape",
        None,
        f"TensorFlow refuses the gradient of input {found['index']} of the op {found['op']}: it has shape "
        f'{found["got"]}, the input {found["expected"]} ("Incompatible shapes between op input and calculated '
        'input gradient")',
        expected=found["expected"],
        got=found["got"],
        hint="return a gradient of its input's shape: sum over broadcast axes, or tf.reshape(grad, tf.shape(input))",
    )


def audit_gradient_shapes(subject: Audited, grads: Mapping[str, Any], explained: bool) -> Audit:
    """The gradients of the subject's own inputs and variables as TensorFlow handed them back, each of its
    source's shape.

    A backward function's gradient of the wrong shape reaches the subject's input as it is where nothing
    in between reshapes it (eagerly TensorFlow hands it on): its values cannot be compared, and the
    sources it reached are returned for the value checks to skip. It is a problem of its own only where
    the audit found nothing that explains it (``explained``: a gradient registered for an op, which no
    record sees).
    """
    inputs = {a.name: a.spec.shape for a in subject.plan.differentiable if a.spec is not None}
    variables = {name: tuple(variable.shape.as_list()) for name, variable in subject.variables}
    expected = {**inputs, **variables}
    misshapen = {
        name: tuple(np.shape(gradient))
        for name, gradient in grads.items()
        if gradient is not None
        and None not in expected.get(name, (None,))
        and tuple(np.shape(gradient)) != expected[name]
    }
    problems: list[Problem] = []
    for name, shape in ({} if explained else misshapen).items():
        if name in variables:
            problems += _variable_gradient(name, "", ReturnedGradient("tensor", shape, None, "Tensor"), variables)
        else:
            problems += _slot_shape(Slot(name, "input", inputs[name]), shape, misshapen, inputs)
    return Audit(problems, misshapen=misshapen)


def grad_fn_called(plan: CallPlan, records: list[BackwardRecord]) -> list[Problem]:
    """TensorFlow never calling the backward function: native autodiff ran in its place."""
    keyword_inputs = any(a.keyword for a in plan.differentiable)
    never = [r for r in records if r.calls == 0]
    if not (never or not records) or keyword_inputs:
        return []
    return [
        Problem(
            "count",
            None,
            "TensorFlow never called the backward function, so native autodiff ran instead "
            "(keyword arguments bypass custom_gradient in eager mode, TF issue #65839)",
            expected=f"{len(plan.slots)} gradients",
            got="backward not called",
            hint="pass the tensors to the custom-gradient function positionally",
        )
    ]


def variables_refused(subject: Audited, error: BaseException, records: list[BackwardRecord]) -> Problem:
    """TensorFlow refusing a backward function that reads variables but takes no ``variables=``."""
    read = re.findall(r"<tf\.Variable '([^']+)'", strip_ansi(message_of(error)))
    names = []
    for raw in read:
        ours = [n for n, v in subject.variables if v.name == raw]
        names.append(ours[0] if ours else raw.removesuffix(":0"))
    function = records[-1].function if records else subject.name
    listed = ", ".join(dict.fromkeys(names)) or "a variable"
    plural = "variables" if len(set(names)) > 1 else "variable"
    if subject.kind.weights_on_self:
        what = f"{subject.name}.call passes the {plural} {listed} into {function}"
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


def audit_returned(subject: Audited, record: BackwardRecord) -> Audit:
    """One gradient per slot, each of its slot's shape and dtype."""
    slots = slots_for(subject, record)
    returned = record.returned or []
    if len(returned) != len(slots):
        prefix = f"{record.function}: " if subject.kind.owes_received else ""
        return Audit([_count_problem(prefix, slots, len(returned))])
    returned_shapes = {s.name: g.shape for s, g in zip(slots, returned)}
    input_shapes = {s.name: s.shape for s in slots if s.role == "input" and s.shape is not None}
    problems: list[Problem] = []
    not_tensors = set()
    for slot, gradient in zip(slots, returned):
        if slot.role not in ("constant", "integer") and gradient.kind == "other":
            not_tensors.add(slot.name)
        problems.extend(audit_slot(slot, gradient, returned_shapes, input_shapes))
    return Audit(problems, frozenset(not_tensors))


def _count_problem(prefix: str, slots: list[Slot], count: int) -> Problem:
    names = [s.name for s in slots]
    fewer = count < len(slots)
    hint = (
        f"return one gradient per positional input, in order ({', '.join(names)}); None for inputs that get no gradient"
    )
    constants = [s.name for s in slots if s.role == "constant"]
    if constants and count == len(slots) - len(constants):
        hint = f"return None for the constant{'s' if len(constants) > 1 else ''} {', '.join(constants)} too"
    return Problem(
        "count",
        None,
        f"{prefix}the backward function returned {_plural(count, 'gradient')} "
        f"for {_plural(len(slots), 'input')} ({', '.join(names)})"
        + ("; one is missing" if fewer and len(slots) - count == 1 else ""),
        expected=str(len(slots)),
        got=str(count),
        hint=hint,
    )


def audit_slot(
    slot: Slot,
    gradient: Any,
    returned_shapes: Mapping[str, Any],
    input_shapes: Mapping[str, tuple[int | None, ...]],
) -> list[Problem]:
    """The problems of one returned gradient: a gradient where none is due, no tensor, or its shape and dtype."""
    name = slot.name
    if gradient.kind == "none":
        return []
    if slot.role in ("constant", "integer"):
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
    if gradient.kind == "other":
        return [
            Problem(
                "dtype",
                name,
                f"the gradient of {name} is a {gradient.type_name}, not a tensor; its values were not compared",
                expected=f"{format_shape(slot.shape)} {slot.dtype}",
                got=gradient.type_name,
                hint=f"return a tensor of {name}'s shape and dtype (or None where it gets no gradient)",
            )
        ]
    return _slot_shape(slot, gradient.shape, returned_shapes, input_shapes) + _slot_dtype(slot, gradient)


def _slot_shape(
    slot: Slot, shape: Any, returned_shapes: Mapping[str, Any], input_shapes: Mapping[str, tuple[int | None, ...]]
) -> list[Problem]:
    if shape is None or slot.shape is None or None in shape or None in slot.shape or tuple(shape) == tuple(slot.shape):
        return []
    expected = _known(slot.shape)
    name = slot.name
    return [
        Problem(
            "shape",
            name,
            f"the gradient of {name} has shape {format_shape(shape)}, its input {format_shape(expected)}"
            + (" (TensorFlow broadcasts it silently)" if _broadcasts(shape, expected) else ""),
            expected=format_shape(expected),
            got=format_shape(shape),
            hint=shape_hint(name, shape, expected, dict(returned_shapes), dict(input_shapes)),
        )
    ]


def _slot_dtype(slot: Slot, gradient: Any) -> list[Problem]:
    name, expected = slot.name, slot.dtype
    if expected is None or gradient.dtype == expected:
        return []
    source = {"python": "a Python value", "array": "a numpy array"}.get(gradient.kind, "")
    return [
        Problem(
            "dtype",
            name,
            f"the gradient of {name} is {gradient.dtype}"
            + (f" ({source})" if source else "")
            + f", its input {expected}",
            expected=expected,
            got=str(gradient.dtype),
            hint=f"cast the gradient to the input's dtype: tf.cast(grad, {name.rsplit('.', 1)[-1]}.dtype)",
        )
    ]


def _known(shape: tuple[int | None, ...]) -> tuple[int, ...]:
    """A shape whose every size is known, as such (its caller has checked)."""
    return tuple(size for size in shape if size is not None)


def _broadcasts(shape: tuple[int | None, ...], target: tuple[int, ...]) -> bool:
    if None in shape:
        return False
    try:
        return np.broadcast_shapes(_known(shape), target) == target
    except ValueError:
        return False


def audit_variables(name_variable: Callable[[Any], str], record: BackwardRecord) -> list[Problem]:
    """One gradient per variable TensorFlow handed over, each of its variable's shape and dtype."""
    if not record.variables or record.variable_returned is None:
        return []
    names = [name_variable(v) for v in record.variables]
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
    shapes = {name: tuple(variable.shape.as_list()) for name, variable in zip(names, record.variables)}
    problems = []
    for name, variable, gradient in zip(names, record.variables, returned):
        if gradient.kind != "none":
            problems.extend(_variable_gradient(name, variable.dtype.name, gradient, shapes))
    return problems


def _variable_gradient(name: str, dtype: str, gradient: Any, shapes: dict[str, tuple[int, ...]]) -> list[Problem]:
    shape = shapes[name]
    if gradient.shape is not None and None not in gradient.shape and tuple(gradient.shape) != shape:
        others = [
            other for other, other_shape in shapes.items() if other != name and other_shape == tuple(gradient.shape)
        ]
        hint = (
            f"it has the shape of {others[0]}: match the variable gradients to the variables list "
            "by identity, not by position (TensorFlow orders that list differently eagerly and in "
            "tf.function)"
            if others
            else shape_hint(name, gradient.shape, shape, {}, {})
        )
        return [
            Problem(
                "variables",
                name,
                f"the gradient of the variable {name} has shape {format_shape(gradient.shape)}, "
                f"the variable {format_shape(shape)}",
                expected=format_shape(shape),
                got=format_shape(gradient.shape),
                hint=hint,
            )
        ]
    if gradient.dtype is not None and gradient.dtype != dtype:
        return [
            Problem(
                "variables",
                name,
                f"the gradient of the variable {name} is {gradient.dtype}, the variable {dtype}",
                expected=dtype,
                got=gradient.dtype,
            )
        ]
    return []


def keyword_problems(plan: CallPlan) -> list[Problem]:
    """Tensors passed by keyword: custom_gradient does not treat them as inputs."""
    return [
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
        for argument in plan.differentiable
        if argument.keyword
    ]
