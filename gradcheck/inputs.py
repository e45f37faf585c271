"""Shapes, dims and distributions -> a call plan and seeded numpy arrays.

Nothing here imports TensorFlow: arrays are drawn with numpy's own
generator, seeded per function, so the user's global random state is never
touched and one function's draws do not depend on which others ran.
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gradcheck.config import InputConfig, SubjectConfig, closest
from gradcheck.errors import ConfigError

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
INTEGER_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class TensorSpec:
    """How to draw one tensor argument."""

    shape: tuple[int, ...]
    """Concrete shape."""
    dtype: str
    """A float dtype (differentiated) or an integer dtype (not)."""
    distribution: str = "normal"
    """``normal``, ``uniform``, ``positive``, ``spd`` or ``integer``."""
    low: float | None = None
    """Lower bound of uniform/integer draws."""
    high: float | None = None
    """Upper bound (exclusive) of uniform/integer draws."""

    @property
    def differentiable(self) -> bool:
        """True for float tensors: those that get gradients."""
        return self.dtype in FLOAT_DTYPES

    @property
    def symmetric(self) -> bool:
        """True when only symmetric perturbations are meaningful (spd inputs)."""
        return self.distribution == "spd"

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class Argument:
    """One argument of the call gradcheck makes."""

    name: str
    """Parameter name (``args[i]`` for the i-th of ``*args``)."""
    role: str
    """``input`` (float tensor, differentiated), ``integer`` (int tensor) or ``constant``."""
    spec: TensorSpec | None = None
    """How to draw it; None for constants."""
    value: Any = None
    """The constant's value."""
    keyword: bool = False
    """Passed by keyword (keyword-only parameters) rather than by position."""
    guessed: bool = False
    """The shape was found by probing."""

    @property
    def is_tensor(self) -> bool:
        """True for drawn tensors (float or integer)."""
        return self.spec is not None


@dataclass(frozen=True)
class CallPlan:
    """The arguments of one function call, in the order they are passed."""

    arguments: tuple[Argument, ...]
    """Positional arguments first, then keyword ones."""
    unknown: tuple[str, ...] = ()
    """Required parameters without a configured shape: to be probed."""
    bound_constants: frozenset[str] = field(default_factory=frozenset)
    """Constants closed over rather than passed to the custom-gradient call."""

    @property
    def positional(self) -> tuple[Argument, ...]:
        """Arguments the custom-gradient call receives by position."""
        return tuple(a for a in self.arguments if not a.keyword and a.name not in self.bound_constants)

    @property
    def differentiable(self) -> tuple[Argument, ...]:
        """Float tensor arguments: the ones whose gradients are checked."""
        return tuple(a for a in self.arguments if a.role == "input")

    def with_shapes(self, shapes: Mapping[str, tuple[int, ...]], dtype: str) -> CallPlan:
        """Fill the unknown parameters with probed shapes."""
        filled = []
        for argument in self.arguments:
            if argument.name in shapes and argument.spec is None and argument.role == "input":
                argument = replace(argument, spec=TensorSpec(shape=shapes[argument.name], dtype=dtype), guessed=True)
            filled.append(argument)
        return replace(self, arguments=tuple(filled), unknown=())

    def with_distribution(self, distribution: str) -> CallPlan:
        """The same plan with every guessed input drawn from another distribution."""
        return replace(
            self,
            arguments=tuple(
                replace(a, spec=replace(a.spec, distribution=distribution)) if a.guessed and a.spec is not None else a
                for a in self.arguments
            ),
        )


def resolve_shape(shape: tuple[int | str, ...], dims: Mapping[str, int], label: str, key: str) -> tuple[int, ...]:
    """Replace dim names by their sizes."""
    sizes = []
    for size in shape:
        if isinstance(size, str):
            if size not in dims:
                raise ConfigError(f"{label}: {key}: unknown dim name '{size}'{closest(size, dims)}")
            sizes.append(dims[size])
        else:
            sizes.append(size)
    return tuple(sizes)


def tensor_spec(config: InputConfig, dims: Mapping[str, int], dtype: str, label: str, key: str) -> TensorSpec:
    """A drawable spec from a configured input."""
    resolved_dtype = config.dtype or ("int32" if config.distribution == "integer" else dtype)
    return TensorSpec(
        shape=resolve_shape(config.shape, dims, label, key),
        dtype=resolved_dtype,
        distribution=config.distribution,
        low=config.low,
        high=config.high,
    )


def plan_call(
    signature: inspect.Signature,
    subject: SubjectConfig | None,
    dims: Mapping[str, int],
    dtype: str,
    label: str,
    key: str,
    shape_overrides: Mapping[str, tuple[int | str, ...]] | None = None,
) -> CallPlan:
    """Map a function's parameters to drawn tensors, constants and unknowns.

    Parameters with a default and no config keep their default (they are
    not passed). Required parameters with no config become ``unknown``.
    Configured inputs that name no parameter fill ``*args`` in order, or
    are an error naming the closest parameter.
    """
    subject = subject or SubjectConfig()
    inputs: dict[str, InputConfig] = dict(subject.inputs)
    for name, shape in (shape_overrides or {}).items():
        if name in subject.constants:
            continue
        previous = inputs.get(name)
        inputs[name] = replace(previous, shape=shape) if previous else InputConfig(shape=shape)
    constants = subject.constants
    parameters = list(signature.parameters.values())
    names = {p.name for p in parameters}
    has_varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    has_varkw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    for name in list(inputs) + list(constants):
        if name not in names and not has_varargs and not has_varkw:
            if shape_overrides and name in shape_overrides and name not in subject.inputs:
                # --shape applies to every selected function that has the argument.
                inputs.pop(name, None)
                continue
            table = "inputs" if name in inputs else "constants"
            raise ConfigError(
                f"{label}: {key}.{table}.{name}: the function has no argument '{name}'"
                f"{closest(name, names)}; its arguments are {', '.join(sorted(names)) or 'none'}"
            )

    def make(name: str, keyword: bool) -> Argument:
        if name in constants:
            return Argument(name=name, role="constant", value=constants[name], keyword=keyword)
        spec = tensor_spec(inputs[name], dims, dtype, label, f"{key}.inputs.{name}")
        role = "input" if spec.differentiable else "integer"
        return Argument(name=name, role=role, spec=spec, keyword=keyword)

    arguments: list[Argument] = []
    unknown: list[str] = []
    pending: list[inspect.Parameter] = []  # defaulted params skipped so far
    for parameter in parameters:
        kind = parameter.kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            extra = [n for n in list(inputs) + list(constants) if n not in names]
            for name in extra:
                arguments.append(make(name, keyword=False))
            continue
        if kind is inspect.Parameter.VAR_KEYWORD:
            continue
        name = parameter.name
        configured = name in inputs or name in constants
        keyword = kind is inspect.Parameter.KEYWORD_ONLY
        if not configured:
            if parameter.default is not inspect.Parameter.empty:
                pending.append(parameter)
                continue
            unknown.append(name)
            arguments.append(Argument(name=name, role="input", keyword=keyword))
            continue
        if not keyword and pending:
            # A later positional argument is configured: the skipped defaults
            # before it must be passed as they are to keep positions right.
            for skipped in pending:
                arguments.append(Argument(name=skipped.name, role="constant", value=skipped.default))
            pending = []
        arguments.append(make(name, keyword))
    return CallPlan(arguments=tuple(arguments), unknown=tuple(unknown))


def candidate_shapes(names: tuple[str, ...]) -> Iterator[dict[str, tuple[int, ...]]]:
    """Small shapes to try for unconfigured inputs, the most telling first.

    Non-square first (they expose transposes and swaps), then a matmul
    chain, then a row-and-bias pair, then square, vector, scalar and 3-D.
    """
    count = len(names)
    chain = [(3 + i, 4 + i) for i in range(count)]
    batched_chain = [(2, 3 + i, 4 + i) for i in range(count)]
    candidates = [
        [(3, 4)] * count,
        chain,
        [(3, 4)] + [(4,)] * (count - 1),
        [(4, 4)] * count,
        [(5,)] * count,
        [()] * count,
        [(2, 3, 4)] * count,
        batched_chain,
    ]
    seen = set()
    for shapes in candidates:
        key = tuple(shapes)
        if key in seen:
            continue
        seen.add(key)
        yield dict(zip(names, shapes))


def subject_rng(seed: int, name: str, draw: int = 0) -> np.random.Generator:
    """The generator for one function's ``draw``-th set of inputs.

    Seeded from the run's seed and the function's name only, so a function
    gets the same tensors whichever other functions run before it.
    """
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8")), draw])


def draw_tensor(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """One array drawn as ``spec`` says, in float64 (or the integer dtype)."""
    shape = spec.shape
    if spec.distribution == "integer":
        low = int(spec.low) if spec.low is not None else 0
        high = int(spec.high) if spec.high is not None else 3
        return rng.integers(low, max(high, low + 1), size=shape).astype(spec.dtype)
    if spec.distribution == "uniform":
        values = rng.uniform(spec.low, spec.high, size=shape)
    elif spec.distribution == "positive":
        low = spec.low if spec.low is not None else 0.5
        high = spec.high if spec.high is not None else max(2.0, low * 4)
        values = rng.uniform(low, high, size=shape)
    elif spec.distribution == "spd":
        n = shape[-1]
        factor = rng.standard_normal(size=shape)
        values = np.matmul(factor, np.swapaxes(factor, -1, -2)) / n + np.eye(n)
    else:
        values = rng.standard_normal(size=shape)
    return np.asarray(values, dtype=np.float64)


def describe_dtype(value: Any) -> str:
    """The dtype name of a constant, for reports."""
    return type(value).__name__


def symmetrize(array: np.ndarray) -> np.ndarray:
    """The symmetric part over the last two axes."""
    return 0.5 * (array + np.swapaxes(array, -1, -2))
