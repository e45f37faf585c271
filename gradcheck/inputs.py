"""Shapes, dims and distributions -> a call plan and seeded numpy arrays.

Planning and drawing need no TensorFlow: arrays are drawn with numpy's own
generator, seeded per function, so the user's global random state is never
touched and one function's draws do not depend on which others ran. Only
building a call's arguments from a complex input's two real parts
(``_complex_value``) asks :mod:`gradcheck._tf` for TensorFlow, when it runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gradcheck import probing
from gradcheck.config import InputConfig, SubjectConfig, closest
from gradcheck.dtypes import COMPLEX_PARTS, FLOAT_DTYPES, INTEGER_DEFAULT
from gradcheck.errors import ConfigError


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
    pinned_dtype: bool = False
    """True when the config (or an input signature) fixed this input's dtype."""
    domain_chosen: bool = False
    """True when the config chose the draw (distribution, low or high): a domain retry leaves it as it is."""

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
    """One argument of the call gradcheck makes (or one tensor inside a list argument)."""

    name: str
    """Parameter name; ``xs[1]`` for an item of a list argument, ``args[i]`` for ``*args``."""
    role: str
    """``input`` (float tensor, differentiated), ``integer`` (a tensor not differentiated: int, or
    a guessed complex one), ``complex`` (a configured complex input: its two real parts, differentiated),
    ``constant`` or ``list``."""
    spec: TensorSpec | None = None
    """How to draw it; None for constants and lists."""
    value: Any = None
    """The constant's value."""
    keyword: bool = False
    """Passed by keyword rather than by position."""
    guessed: bool = False
    """The shape was found by probing."""
    items: tuple[Argument, ...] = ()
    """The tensors of a list argument (role ``list``), in order; a complex input's (role ``complex``)
    real and imaginary parts."""
    has_default: bool = False
    """The parameter has a default value (so callers may leave it out or name it)."""

    def leaves(self) -> tuple[Argument, ...]:
        """This argument's tensors and constants, flattened as ``tf.nest.flatten`` does."""
        if self.role in ("list", "complex"):
            return tuple(leaf for item in self.items for leaf in item.leaves())
        return (self,)


@dataclass(frozen=True)
class CallPlan:
    """The arguments of one function call, in the order they are passed."""

    arguments: tuple[Argument, ...]
    """Positional arguments first, then keyword ones."""
    unknown: tuple[str, ...] = ()
    """Required parameters without a configured shape: to be probed."""

    @property
    def leaves(self) -> tuple[Argument, ...]:
        """Every tensor and constant, list arguments flattened."""
        return tuple(leaf for argument in self.arguments for leaf in argument.leaves())

    @property
    def positional(self) -> tuple[Argument, ...]:
        """Top-level arguments passed by position."""
        return tuple(a for a in self.arguments if not a.keyword)

    @property
    def slots(self) -> tuple[Argument, ...]:
        """What the backward function owes a gradient for, in order.

        TensorFlow flattens the positional arguments (lists, and constants
        that are lists, included) and expects one gradient per leaf; keyword
        arguments are not counted.
        """
        slots: list[Argument] = []
        for argument in self.positional:
            if argument.role == "complex":  # one complex gradient for both parts
                slots.append(replace(argument, role="input"))
                continue
            for leaf in argument.leaves():
                if leaf.role == "constant" and isinstance(leaf.value, (list, tuple, dict)):
                    count = len(_flatten_python(leaf.value))
                    slots.extend([leaf] * count)
                else:
                    slots.append(leaf)
        return tuple(slots)

    @property
    def differentiable(self) -> tuple[Argument, ...]:
        """Float tensors: the ones whose gradients are checked."""
        return tuple(a for a in self.leaves if a.role == "input")

    @property
    def tensors(self) -> tuple[Argument, ...]:
        """Every drawn tensor, float or integer."""
        return tuple(a for a in self.leaves if a.spec is not None)

    def with_specs(self, specs: Mapping[str, TensorSpec]) -> CallPlan:
        """Fill the unknown parameters with probed specs (float, integer or complex), marked guessed."""
        filled = []
        for argument in self.arguments:
            if argument.name in specs and argument.spec is None and argument.role == "input":
                # A guessed complex input is checked as a configured one is: as its two real parts.
                drawn = tensor_argument(argument.name, specs[argument.name], argument.keyword)
                items = tuple(replace(item, guessed=True) for item in drawn.items)
                argument = replace(argument, spec=drawn.spec, role=drawn.role, items=items, guessed=True)
            filled.append(argument)
        return replace(self, arguments=tuple(filled), unknown=())

    def narrowed(self) -> Narrowed | None:
        """The next narrower draw of the float inputs whose draw nobody chose, after a domain problem.

        As probing narrows after NaN or a domain error: normal draws become
        positive ones, positive ones the interval (0.1, 0.9). Inputs whose
        config sets ``distribution``, ``low`` or ``high`` keep their draws.
        None where nothing is left to narrow.
        """
        leaves = [leaf for leaf in self.leaves if _redrawable(leaf)]
        spec_change: dict[str, Any]
        kinds = {leaf.spec.distribution for leaf in leaves if leaf.spec is not None}
        if "normal" in kinds:
            step, spec_change = "positive", {"distribution": "positive"}
            chosen = "normal"
        elif "positive" in kinds:
            step, spec_change = "unit", {"distribution": "uniform", "low": 0.1, "high": 0.9}
            chosen = "positive"
        else:
            return None
        names: list[str] = []

        def narrow(argument: Argument) -> Argument:
            if argument.role == "list":
                return replace(argument, items=tuple(narrow(item) for item in argument.items))
            if not _redrawable(argument) or argument.spec is None or argument.spec.distribution != chosen:
                return argument
            names.append(argument.name)
            return replace(argument, spec=replace(argument.spec, **spec_change))

        plan = replace(self, arguments=tuple(narrow(a) for a in self.arguments))
        return Narrowed(plan, step, tuple(names))

    def with_dtype(self, dtype: str) -> CallPlan:
        """The same plan with every float input whose dtype the config did not fix in ``dtype``."""

        def convert(argument: Argument) -> Argument:
            if argument.role == "list":
                return replace(argument, items=tuple(convert(item) for item in argument.items))
            spec = argument.spec
            if spec is None or not spec.differentiable or spec.pinned_dtype:
                return argument
            return replace(argument, spec=replace(spec, dtype=dtype))

        return replace(self, arguments=tuple(convert(a) for a in self.arguments))

    def with_constants(self, convert: Callable[[Any], Any]) -> CallPlan:
        """The same plan with every constant's value passed through ``convert`` (config tables to variables)."""

        def constant(argument: Argument) -> Argument:
            if argument.role == "list":
                return replace(argument, items=tuple(constant(item) for item in argument.items))
            if argument.role != "constant":
                return argument
            return replace(argument, value=convert(argument.value))

        return replace(self, arguments=tuple(constant(a) for a in self.arguments))

    def with_keywords(self, names: set[str]) -> CallPlan:
        """The same plan passing the named arguments by keyword."""
        moved = [replace(a, keyword=True) if a.name in names else a for a in self.arguments]
        return replace(self, arguments=tuple([a for a in moved if not a.keyword] + [a for a in moved if a.keyword]))

    def with_open_positionals(self, names: tuple[str, ...]) -> CallPlan:
        """The plan of a ``(*args)`` function given ``names`` as its positional inputs, to be probed, in place
        of the open ones it has."""
        opened = [Argument(name=name, role="input") for name in names]
        kept = [a for a in self.arguments if a.name not in self.unknown]
        return CallPlan(arguments=tuple(sorted([*opened, *kept], key=lambda a: a.keyword)), unknown=names)

    def build(self, lookup: Callable[[Argument], Any]) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments, each leaf given by ``lookup``."""

        args = [_argument_value(a, lookup) for a in self.arguments if not a.keyword]
        kwargs = {a.name: _argument_value(a, lookup) for a in self.arguments if a.keyword}
        return args, kwargs


@dataclass(frozen=True)
class Narrowed:
    """A plan redrawn after a domain problem: which draw it now uses, and for which inputs."""

    plan: CallPlan
    step: str
    """``positive`` (in [0.5, 2)) or ``unit`` (in [0.1, 0.9))."""
    names: tuple[str, ...]
    """The inputs drawn anew."""

    @property
    def described(self) -> str:
        """The new draw in words, for notes."""
        return "drawn positive" if self.step == "positive" else "drawn in [0.1, 0.9)"


def _redrawable(argument: Argument) -> bool:
    """A float input drawn normal or positive by default (not by the config's choice): a domain retry may narrow it."""
    spec = argument.spec
    return (
        argument.role == "input"
        and spec is not None
        and spec.differentiable
        and not spec.domain_chosen
        and spec.distribution in ("normal", "positive")
        and spec.low is None
        and spec.high is None
    )


def _argument_value(argument: Argument, lookup: Callable[[Argument], Any]) -> Any:
    # A module-level function, not a closure that calls itself: such a closure is a
    # reference cycle, and it kept every batch of perturbed inputs alive until the
    # cyclic garbage collector happened to run (gigabytes, in full mode).
    if argument.role == "list":
        return [_argument_value(item, lookup) for item in argument.items]
    if argument.role == "complex":
        return _complex_value(lookup(argument.items[0]), lookup(argument.items[1]))
    return lookup(argument)


def _complex_value(real: Any, imaginary: Any) -> Any:
    """``real + i imaginary`` as one tensor; either part may carry a stacked leading axis (batched perturbations)."""
    from gradcheck import _tf

    tf = _tf.tensorflow()
    real, imaginary = tf.convert_to_tensor(real), tf.convert_to_tensor(imaginary)
    shape = tf.broadcast_dynamic_shape(tf.shape(real), tf.shape(imaginary))
    return tf.complex(tf.broadcast_to(real, shape), tf.broadcast_to(imaginary, shape))


def _flatten_python(value: Any) -> list[Any]:
    """``tf.nest.flatten`` for plain Python containers, without TensorFlow."""
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _flatten_python(value[key])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _flatten_python(item)]
    return [value]


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
    resolved_dtype = config.dtype or (INTEGER_DEFAULT if config.distribution == "integer" else dtype)
    return TensorSpec(
        shape=resolve_shape(config.shape, dims, label, key),
        dtype=resolved_dtype,
        distribution=config.distribution,
        low=config.low,
        high=config.high,
        pinned_dtype=config.dtype is not None,
        domain_chosen=config.distribution_given
        or config.distribution != "normal"
        or config.low is not None
        or config.high is not None,
    )


#: Size of a ``None`` dimension in an ``input_signature`` when ``[dims]`` has no ``batch``.
DEFAULT_NONE_DIM = 4


def signature_spec(shape: tuple[int | None, ...], dtype: str, dims: Mapping[str, int]) -> TensorSpec:
    """A spec from a ``tf.TensorSpec`` of an ``input_signature``: ``None`` dims become ``[dims] batch``."""
    size = dims.get("batch", DEFAULT_NONE_DIM)
    concrete = tuple(size if d is None else d for d in shape)
    distribution = "integer" if dtype.startswith("int") else "normal"
    return TensorSpec(shape=concrete, dtype=dtype, distribution=distribution, pinned_dtype=True)


def _merged_inputs(
    subject: SubjectConfig, shape_overrides: Mapping[str, tuple[int | str, ...]] | None
) -> dict[str, InputConfig]:
    """The configured inputs with ``--shape`` overrides applied (constants keep their values)."""
    inputs: dict[str, InputConfig] = dict(subject.inputs)
    for name, shape in (shape_overrides or {}).items():
        if name in subject.constants:
            continue
        previous = inputs.get(name)
        inputs[name] = replace(previous, shape=shape, items=()) if previous else InputConfig(shape=shape)
    return inputs


def _check_names(
    parameters: list[inspect.Parameter],
    subject: SubjectConfig,
    inputs: dict[str, InputConfig],
    shape_overrides: Mapping[str, tuple[int | str, ...]] | None,
    label: str,
    key: str,
) -> None:
    """Configured names must be parameters (unless ``*args``/``**kwargs`` take them); ``--shape`` may miss."""
    names = {p.name for p in parameters}
    if any(p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) for p in parameters):
        return
    for name in list(inputs) + list(subject.constants):
        if name in names:
            continue
        if shape_overrides and name in shape_overrides and name not in subject.inputs:
            # --shape applies to every selected function that has the argument.
            inputs.pop(name, None)
            continue
        table = "inputs" if name in inputs else "constants"
        raise ConfigError(
            f"{label}: {key}.{table}.{name}: the function has no argument '{name}'"
            f"{closest(name, names)}; its arguments are {', '.join(sorted(names)) or 'none'}"
        )


def _configured_argument(
    name: str, config: InputConfig, keyword: bool, config_key: str, dims: Mapping[str, int], dtype: str, label: str
) -> Argument:
    """A configured tensor argument, or a list argument of configured tensors."""
    if config.items:
        items = tuple(
            _configured_argument(f"{name}[{i}]", item, keyword, f"{config_key}.items[{i}]", dims, dtype, label)
            for i, item in enumerate(config.items)
        )
        return Argument(name=name, role="list", keyword=keyword, items=items)
    return tensor_argument(name, tensor_spec(config, dims, dtype, label, config_key), keyword)


def tensor_argument(name: str, spec: TensorSpec, keyword: bool) -> Argument:
    """A drawn tensor argument: a float input, an integer one, or a complex one made of its two real parts."""
    if spec.dtype in COMPLEX_PARTS:
        part = replace(spec, dtype=COMPLEX_PARTS[spec.dtype])
        parts = tuple(Argument(name=f"{name}.{p}", role="input", spec=part, keyword=keyword) for p in ("real", "imag"))
        return Argument(name=name, role="complex", spec=spec, keyword=keyword, items=parts)
    return Argument(name=name, role="input" if spec.differentiable else "integer", spec=spec, keyword=keyword)


def _unconfigured(
    parameter: inspect.Parameter,
    keyword: bool,
    signature_shapes: Mapping[str, tuple[tuple[int | None, ...], str]] | None,
    dims: Mapping[str, int],
) -> Argument | None:
    """A parameter the config does not name: its ``input_signature`` shape, else an input of unknown
    shape; None for one with a default, which keeps it."""
    name = parameter.name
    if signature_shapes and name in signature_shapes:
        spec = signature_spec(*signature_shapes[name], dims)
        role = "input" if spec.differentiable else "integer"
        return Argument(name=name, role=role, spec=spec, keyword=keyword)
    if parameter.default is not inspect.Parameter.empty:
        return None
    return Argument(name=name, role="input", keyword=keyword)


def plan_call(
    signature: inspect.Signature,
    subject: SubjectConfig | None,
    dims: Mapping[str, int],
    dtype: str,
    label: str,
    key: str,
    shape_overrides: Mapping[str, tuple[int | str, ...]] | None = None,
    signature_shapes: Mapping[str, tuple[tuple[int | None, ...], str]] | None = None,
) -> CallPlan:
    """Map a function's parameters to drawn tensors, constants and unknowns.

    Parameters with a default and no config keep their default (they are
    not passed). Required parameters with no config take their shape from an
    ``input_signature`` if there is one, else become ``unknown``. Configured
    inputs that name no parameter fill ``*args`` in order, or are an error
    naming the closest parameter.
    """
    subject = subject or SubjectConfig()
    inputs = _merged_inputs(subject, shape_overrides)
    constants = subject.constants
    parameters = list(signature.parameters.values())
    _check_names(parameters, subject, inputs, shape_overrides, label, key)
    names = {p.name for p in parameters}

    def make(name: str, keyword: bool, has_default: bool = False) -> Argument:
        if name in constants:
            return Argument(name=name, role="constant", value=constants[name], keyword=keyword, has_default=has_default)
        argument = _configured_argument(name, inputs[name], keyword, f"{key}.inputs.{name}", dims, dtype, label)
        return replace(argument, has_default=has_default)

    arguments: list[Argument] = []
    unknown: list[str] = []
    pending: list[inspect.Parameter] = []  # defaulted params skipped so far
    for parameter in parameters:
        if (kind := parameter.kind) is inspect.Parameter.VAR_POSITIONAL:
            arguments += [make(n, keyword=False) for n in list(inputs) + list(constants) if n not in names]
            continue
        if kind is inspect.Parameter.VAR_KEYWORD:
            continue
        name = parameter.name
        keyword = kind is inspect.Parameter.KEYWORD_ONLY
        has_default = parameter.default is not inspect.Parameter.empty
        if name not in inputs and name not in constants:
            unconfigured = _unconfigured(parameter, keyword, signature_shapes, dims)
            if unconfigured is None:
                pending.append(parameter)
            else:
                if unconfigured.spec is None:
                    unknown.append(name)
                arguments.append(unconfigured)
            continue
        if not keyword and pending:
            # A later positional argument is configured: the skipped defaults
            # before it must be passed as they are to keep positions right.
            arguments += [Argument(name=p.name, role="constant", value=p.default, has_default=True) for p in pending]
            pending = []
        arguments.append(make(name, keyword, has_default))
    # Positional arguments first, each group in signature order (a stable sort).
    return CallPlan(arguments=tuple(sorted(arguments, key=lambda a: a.keyword)), unknown=tuple(unknown))


def candidate_shapes(names: tuple[str, ...]) -> Iterator[dict[str, tuple[int, ...]]]:
    """Small shapes to try for unconfigured inputs, the most telling first (see :mod:`gradcheck.probing`)."""
    for shapes in probing.candidate_shapes(len(names)):
        yield dict(zip(names, shapes))
