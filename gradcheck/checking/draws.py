"""The draws: seeded input values, variable values and upstream gradients, rounded to their dtype;
layer weights redrawn; the inputs as fed, for the report."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gradcheck import _tf
from gradcheck.arrays import standard_normal
from gradcheck.first_pass import OutputSpec
from gradcheck.harness import Harness
from gradcheck.inputs import CallPlan
from gradcheck.loss import Draw
from gradcheck.results import InputRecord, format_shape
from gradcheck.sampling import draw_tensor, subject_rng

if TYPE_CHECKING:
    pass


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
    _made: dict[int, Draw] = field(default_factory=dict)

    def first(self, values: dict[str, Any], upstreams: list[np.ndarray]) -> None:
        """Record draw 0: the values the first forward pass ran on, the upstream gradients it made."""
        self._made[0] = _frozen(values, upstreams)

    def __call__(self, index: int) -> Draw:
        if index not in self._made:
            values = draw_values(self.plan, subject_rng(self.seed, self.name, index))
            first = self._made[0].values
            values.update({name: first[name] for name, _ in self.harness.variables})
            self._made[index] = _frozen(values, self.upstreams(index))
        return self._made[index]

    def upstreams(self, index: int) -> list[np.ndarray]:
        """The seeded upstream gradients of draw ``index``, one per output."""
        return seeded_upstreams(self.seed, self.name, index, self.harness.output_specs)


def seeded_upstreams(seed: int, name: str, index: int, specs: list[OutputSpec]) -> list[np.ndarray]:
    """The seeded upstream gradients of draw ``index`` for outputs ``specs``, read-only."""
    rng = subject_rng(seed, name + ":upstream", index)
    upstreams = [standard_normal(rng, spec.shape) for spec in specs]
    freeze(upstreams)
    return upstreams


def freeze(arrays: Iterable[Any]) -> None:
    """Make the arrays among ``arrays`` read-only: the harness then converts each to a tensor only once."""
    for array in arrays:
        if isinstance(array, np.ndarray):
            array.flags.writeable = False


def _frozen(values: dict[str, Any], upstreams: list[np.ndarray]) -> Draw:
    freeze([*values.values(), *upstreams])
    return Draw(values, upstreams)


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
