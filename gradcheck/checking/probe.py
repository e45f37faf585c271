"""Probing: shapes for a function the config gives none, one forward call per guess."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gradcheck import probing
from gradcheck.checking.exceptions import UserCodeError, describe_exception
from gradcheck.dtypes import INTEGER_DEFAULT, complex_holding
from gradcheck.first_pass import first_pass
from gradcheck.inputs import CallPlan, TensorSpec
from gradcheck.instrument import raised_by_gradcheck
from gradcheck.results import Reason, format_shape
from gradcheck.sampling import subject_rng

if TYPE_CHECKING:
    from gradcheck.checking.request import CheckRequest
from gradcheck.checking.build import (
    SHAPE_ERRORS,
    Built,
    NeedsConfig,
    NeedsFloat32,
    build,
    dtype_clash,
    refuse_python_values,
    table_key,
)
from gradcheck.checking.conditions import check_conditions
from gradcheck.checking.draws import draw_values


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
    """The first guessed inputs the forward pass accepts, or why none did (see :mod:`gradcheck.probing`).

    A ``(*args)`` function whose config gives no inputs is probed with each of
    its kind's positional guesses in turn (one input, then two): a guess of
    the wrong number of inputs fails on every shape, with a ``TypeError``
    about its positional arguments.
    """
    guesses = request.subject.kind.positional_guesses
    tries = [plan]
    if plan.unknown in guesses:
        tries = [plan.with_open_positionals(names) for names in guesses[guesses.index(plan.unknown) :]]
    for number, candidate in enumerate(tries, start=1):
        last = number == len(tries)
        try:
            probed = _probe_plan(request, candidate, built, dtype)
        except UserCodeError as error:
            if not _arity_error(error.__cause__) or len(tries) == 1:
                raise
            if last:
                return _no_arity_fits(request, error)
            continue
        if probed.plan is not None or last:
            return probed
    raise AssertionError("unreachable: the last try returns or raises")  # pragma: no cover


def _no_arity_fits(request: CheckRequest, error: UserCodeError) -> Probed:
    """A ``(*args)`` function that takes neither one positional input nor two: the config must say how many."""
    failure = f"it takes *args, and neither one positional input nor two fitted (last try: {error})"
    where = f"{request.config_label}: {table_key(request)}"
    return Probed(
        None,
        failure=failure,
        skip_reason=f"{failure}; give its inputs in order, add to {where} inputs = {{ x = [...], y = [...], ... }}",
    )


def _arity_error(error: BaseException | None) -> bool:
    """True for the ``TypeError`` of a call with the wrong number of positional arguments."""
    return isinstance(error, TypeError) and bool(_ARITY.search(str(error)))


#: How Python says that a call had too few or too many positional arguments.
_ARITY = re.compile(r"positional argument|takes \d+ .*arguments? but \d+")


def _probe_plan(request: CheckRequest, plan: CallPlan, built: Built, dtype: str) -> Probed:
    """:func:`probe` for one plan's unknown inputs."""
    subject = request.subject
    names = plan.unknown
    search = probing.Search(names, probing.hints_for(subject.kind.described_by(subject), names))

    def forward(guess: probing.Guess) -> probing.Attempt:
        candidate = plan.with_specs(guess_specs(guess, names, dtype))
        values = draw_values(candidate, subject_rng(request.settings.seed, subject.name, 0))
        try:
            first = first_pass(built.target, candidate, values, built.name_variable)
        except Exception as error:  # the forward refused these shapes (or these values)
            if raised_by_gradcheck(error):
                raise
            return probing.Attempt(guess, error=error)
        first.variables.restore()
        outputs = first.outputs
        return probing.Attempt(guess, finite=all(np.all(np.isfinite(o)) for o in outputs), outputs=bool(outputs))

    found = search.run(forward, stop=_stop_probing)
    if found is not None:
        return Probed(plan.with_specs(guess_specs(found.guess, names, dtype)), note=probe_note(search, found, names))
    # No tensor fits a mode string, a bit width or a function: what to configure is the constant, not a shape.
    # Asked only now, since a tensor drawn for an argument annotated float may well fit (and get a gradient).
    refuse_python_values(request, subject.kind.described_by(subject), plan)
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


def guess_specs(guess: probing.Guess, names: tuple[str, ...], dtype: str) -> dict[str, TensorSpec]:
    """The tensor specs a guess stands for: float, integer (in an indexing range) or complex."""
    floats = [shape for shape, kind in zip(guess.shapes, guess.kinds) if kind == "float"]
    complex_dtype = complex_holding(dtype)
    specs = {}
    for name, shape, kind, positive in zip(names, guess.shapes, guess.kinds, guess.positive):
        if kind == "integer":
            low, high = probing.integer_range(name, floats)
            specs[name] = TensorSpec(shape, INTEGER_DEFAULT, "integer", float(low), float(high))
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
        + (f" {spec.dtype} in [{int(spec.low or 0)}, {int(spec.high or 0)})" if spec.distribution == "integer" else "")
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
    return all(type(e).__name__ not in SHAPE_ERRORS for e in errors)


@dataclass(frozen=True)
class ShapeGuess:
    """What probing found for one function's inputs (``gradcheck init``)."""

    plan: CallPlan | None
    """The call plan with configured and guessed shapes (guessed arguments say so); None where probing failed."""
    failure: str | None = None
    """Why no shapes could be found (forward pass raising, no candidate accepted)."""
    constants: tuple[tuple[str, str], ...] = ()
    """Arguments that are Python values, not tensors: each name with the TOML placeholder the config needs."""
    reason: Reason | None = None
    """Why, where building the target found it (a constructor wanting arguments, or raising)."""


def guess_shapes(request: CheckRequest) -> ShapeGuess:
    """Probe small candidate shapes for the inputs the config leaves open, as a check would.

    The same prober as :func:`check_subject` uses, so the shapes ``gradcheck
    init`` writes are the ones a run would have guessed.
    """
    with check_conditions(request):
        for dtype in dict.fromkeys((request.settings.dtype, "float32")):
            try:
                built = build(request, dtype)
                if not built.plan.unknown:
                    return ShapeGuess(plan=built.plan)
                probed = probe(request, built.plan, built, dtype)
            except NeedsConfig as error:
                return ShapeGuess(plan=None, failure=str(error), constants=error.constants, reason=error.reason)
            except UserCodeError as error:
                return ShapeGuess(plan=None, failure=str(error), reason=error.reason)
            except NeedsFloat32 as error:
                if dtype == "float32":
                    return ShapeGuess(plan=None, failure=str(error))
                continue
            return ShapeGuess(plan=probed.plan, failure=probed.failure or probed.skip_reason)
    raise AssertionError("unreachable: float32 probing never asks for float32")  # pragma: no cover
