"""Property-based tests (issue 6, point 7): the config loader and the checker on generated input.

* Random TOML documents, built from random dicts of plausible and implausible
  keys and values (wrong types, unknown keys, bad sizes, dates), and random
  text: the loader returns a valid config or raises a one-line
  :class:`ConfigError` naming the file, never anything else.
* Random compositions of elementwise ops and reductions over two (3, 3)
  inputs, made into a ``@tf.custom_gradient`` function whose backward function
  chains each op's derivative rule, written by hand (no tape): the check
  passes. The same with one fault injected into the backward function (a
  sign, a factor 2, the upstream gradient dropped, the two inputs' gradients
  swapped, a transpose): the check fails, blaming the input the fault is in,
  and only it.

* Random wrong shapes (fewer, more, or as many elements as the input) for
  the gradient a backward function returns, on every path a gradient takes
  (a module-level custom gradient, one nested in a function before or after
  other ops, a layer's input and its weight), in fast and full mode: the
  check fails with a ``shape`` (or ``variables``) problem and nothing else,
  never an error of gradcheck's own in the value comparisons.

The example counts are small, and the examples fixed (``derandomize``), so CI
stays fast and a failure reproduces; raise ``max_examples`` locally to search
further.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import gradcheck
from gradcheck.config_files import read_config_file
from gradcheck.errors import ConfigError

# -- the config loader ------------------------------------------------------------------------

_NAMES = st.sampled_from(["x", "A", "W", "N", "in_dim", "batch", "square", "custom_op", "Scaler.apply", "é", "a b"])
_SCALARS = st.one_of(
    st.integers(min_value=-5, max_value=70),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.booleans(),
    st.sampled_from(
        [
            "float64",
            "float32",
            "int32",
            "float8",
            "fast",
            "full",
            "slow",
            "both",
            "eager",
            "none",
            "numeric",
            "normal",
            "uniform",
            "positive",
            "spd",
            "integer",
            "gaussian",
            "cpu",
            "gpu",
            "tpu",
            "auto",
            "json",
            "text",
            "failed",
            "N",
            "in_dim",
            "",
            "x",
        ]
    ),
    st.just(datetime.date(2024, 1, 2)),
)
_SIZES = st.lists(
    st.one_of(st.integers(min_value=-2, max_value=6), st.sampled_from(["N", "batch", "nope"]), _SCALARS), max_size=3
)
_INPUT_TABLE = st.fixed_dictionaries(
    {},
    optional={
        "shape": _SIZES,
        "dtype": _SCALARS,
        "distribution": _SCALARS,
        "low": _SCALARS,
        "high": _SCALARS,
        "items": st.lists(_SIZES, max_size=2),
        "shap": _SIZES,
    },
)
_INPUT = st.one_of(_SIZES, _INPUT_TABLE, _SCALARS)
_SUBJECT = st.fixed_dictionaries(
    {},
    optional={
        "inputs": st.one_of(st.dictionaries(_NAMES, _INPUT, max_size=2), _SCALARS),
        "constants": st.one_of(st.dictionaries(_NAMES, _SCALARS, max_size=2), _SCALARS),
        "init": st.dictionaries(_NAMES, _SCALARS, max_size=2),
        "mode": _SCALARS,
        "dtype": _SCALARS,
        "order": _SCALARS,
        "timeout": _SCALARS,
        "atol": _SCALARS,
        "input": st.dictionaries(_NAMES, _INPUT, max_size=1),
        "reference": _SCALARS,
    },
)
_DOCUMENT = st.fixed_dictionaries(
    {},
    optional={
        "dtype": _SCALARS,
        "seed": _SCALARS,
        "mode": _SCALARS,
        "execution": _SCALARS,
        "order": _SCALARS,
        "atol": _SCALARS,
        "eps": _SCALARS,
        "timeout": _SCALARS,
        "device": _SCALARS,
        "shape_only": _SCALARS,
        "strict": _SCALARS,
        "format": _SCALARS,
        "output": _SCALARS,
        "fail_on": st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3)),
        "maxfail": _SCALARS,
        "max_memory": _SCALARS,
        "sed": _SCALARS,
        "dims": st.one_of(st.dictionaries(_NAMES, _SCALARS, max_size=3), _SCALARS),
        "functions": st.one_of(st.dictionaries(_NAMES, _SUBJECT, max_size=2), _SCALARS),
        "layers": st.dictionaries(_NAMES, _SUBJECT, max_size=1),
    },
)


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else json.dumps(key)


def _toml_value(value: Any) -> str:
    """A value as TOML text: inline tables for dicts, so every document is ``key = value`` lines."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise AssertionError(type(value))


def _toml(document: dict[str, Any]) -> str:
    return "".join(f"{_toml_key(key)} = {_toml_value(value)}\n" for key, value in document.items())


def _loads_or_one_line_error(path: Path) -> None:
    try:
        config = read_config_file(path)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message, message
        assert message.startswith(f"{path}: "), message
        return
    assert config.path == path


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(document=_DOCUMENT)
def test_any_config_document_loads_or_is_one_line_error(tmp_path_factory: Any, document: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("config") / "gradcheck.toml"
    path.write_text(_toml(document), encoding="utf-8")
    _loads_or_one_line_error(path)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(document=_DOCUMENT, garbage=st.text(alphabet="[]{}=\"',.=#\n abcx0123", max_size=30), cut=st.integers(0, 200))
def test_broken_toml_is_a_one_line_error_naming_the_line(
    tmp_path_factory: Any, document: dict[str, Any], garbage: str, cut: int
) -> None:
    text = _toml(document)
    path = tmp_path_factory.mktemp("config") / "gradcheck.toml"
    path.write_text(text[:cut] + garbage + text[cut:], encoding="utf-8")
    _loads_or_one_line_error(path)


# -- the checker ------------------------------------------------------------------------------

SHAPE = (3, 3)


@dataclass(frozen=True, eq=False)
class Node:
    """One op of a composition: a leaf (``x``/``y``), an elementwise op, or a reduction."""

    op: str
    children: tuple[Node, ...] = ()
    axis: int | None = None

    def leaves(self) -> set[str]:
        if not self.children:
            return {self.op}
        return set().union(*(child.leaves() for child in self.children))

    def __repr__(self) -> str:
        if not self.children:
            return self.op
        inner = ", ".join(map(repr, self.children))
        return f"{self.op}({inner}{'' if self.axis is None else f', axis={self.axis}'})"


_LEAF = st.sampled_from(["x", "y"]).map(Node)


def _extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    unary = st.tuples(st.sampled_from(["sin", "tanh", "square", "exp_tanh"]), children).map(
        lambda t: Node(t[0], (t[1],))
    )
    binary = st.tuples(st.sampled_from(["add", "mul"]), children, children).map(lambda t: Node(t[0], (t[1], t[2])))
    reduce = st.tuples(st.sampled_from(["sum", "mean"]), st.sampled_from([0, 1]), children).map(
        lambda t: Node(t[0], (t[2],), axis=t[1])
    )
    return st.one_of(unary, binary, reduce)


_TREES = st.recursive(_LEAF, _extend, max_leaves=5)


@st.composite
def compositions(draw: st.DrawFn) -> Node:
    """A composition that uses both inputs, optionally ending in a mean over everything."""
    tree = Node(draw(st.sampled_from(["add", "mul"])), (draw(_TREES), draw(_TREES)))
    assume(tree.leaves() == {"x", "y"})
    if draw(st.booleans()):
        tree = Node("mean_all", (tree,))
    return tree


def forward(node: Node, inputs: dict[str, Any], values: dict[int, Any]) -> Any:
    """Evaluate the composition with TensorFlow ops, keeping every node's value for the backward pass."""
    if not node.children:
        value = inputs[node.op]
    else:
        args = [forward(child, inputs, values) for child in node.children]
        a = args[0]
        value = {
            "sin": lambda: tf.sin(a),
            "tanh": lambda: tf.tanh(a),
            "square": lambda: tf.square(a),
            "exp_tanh": lambda: tf.exp(tf.tanh(a)),  # exp of a bounded input: no overflow
            "add": lambda: a + args[1],
            "mul": lambda: a * args[1],
            "sum": lambda: tf.reduce_sum(a, axis=node.axis, keepdims=True),
            "mean": lambda: tf.reduce_mean(a, axis=node.axis, keepdims=True),
            "mean_all": lambda: tf.reduce_mean(a),
        }[node.op]()
    values[id(node)] = value
    return value


def _unbroadcast(gradient: Any, shape: Any) -> Any:
    """Sum a gradient over the axes along which an operand of ``shape`` was broadcast."""
    axes = [axis for axis, size in enumerate(shape) if size == 1 and gradient.shape[axis] != 1]
    return tf.reduce_sum(gradient, axis=axes, keepdims=True) if axes else gradient


def backward(node: Node, upstream: Any, values: dict[int, Any], grads: dict[str, Any]) -> None:
    """Each op's derivative rule, chained by hand: the vector-Jacobian product of the composition."""
    if not node.children:
        grads[node.op] = grads[node.op] + _unbroadcast(upstream, values[id(node)].shape)
        return
    a = node.children[0]
    va = values[id(a)]
    if node.op == "sin":
        backward(a, upstream * tf.cos(va), values, grads)
    elif node.op == "tanh":
        backward(a, upstream * (1.0 - tf.square(tf.tanh(va))), values, grads)
    elif node.op == "square":
        backward(a, upstream * 2.0 * va, values, grads)
    elif node.op == "exp_tanh":
        backward(a, upstream * values[id(node)] * (1.0 - tf.square(tf.tanh(va))), values, grads)
    elif node.op in ("add", "mul"):
        b = node.children[1]
        vb = values[id(b)]
        to_a, to_b = (upstream, upstream) if node.op == "add" else (upstream * vb, upstream * va)
        backward(a, _unbroadcast(to_a, va.shape), values, grads)
        backward(b, _unbroadcast(to_b, vb.shape), values, grads)
    elif node.op == "sum":
        backward(a, tf.broadcast_to(upstream, tf.shape(va)), values, grads)
    elif node.op == "mean":
        backward(a, tf.broadcast_to(upstream, tf.shape(va)) / float(va.shape[node.axis]), values, grads)
    elif node.op == "mean_all":
        backward(a, tf.broadcast_to(upstream, tf.shape(va)) / float(np.prod(va.shape)), values, grads)
    else:  # pragma: no cover
        raise AssertionError(node.op)


FAULTS = ("sign", "factor", "dropped upstream", "swapped", "transpose")


def gradients(tree: Node, x: Any, y: Any, dy: Any, values: dict[int, Any], fault: str | None, faulty: str) -> Any:
    """The hand-derived gradients of x and y, with ``fault`` injected into ``faulty``'s."""
    grads = {"x": tf.zeros_like(x), "y": tf.zeros_like(y)}
    backward(tree, dy, values, grads)
    if fault == "dropped upstream":
        ones = {"x": tf.zeros_like(x), "y": tf.zeros_like(y)}
        backward(tree, tf.ones_like(dy), values, ones)
        grads[faulty] = ones[faulty]
    elif fault == "sign":
        grads[faulty] = -grads[faulty]
    elif fault == "factor":
        grads[faulty] = 2.0 * grads[faulty]
    elif fault == "transpose":
        grads[faulty] = tf.transpose(grads[faulty])
    elif fault == "swapped":
        grads = {"x": grads["y"], "y": grads["x"]}
    return grads["x"], grads["y"]


def custom_gradient_function(tree: Node, fault: str | None = None, faulty: str = "x") -> Callable[..., Any]:
    """The composition as a ``@tf.custom_gradient`` function with the hand-chained backward function."""

    @tf.custom_gradient
    def composed(x: Any, y: Any) -> Any:
        values: dict[int, Any] = {}
        result = forward(tree, {"x": x, "y": y}, values)

        def grad(dy: Any) -> Any:
            return gradients(tree, x, y, dy, values, fault, faulty)

        return result, grad

    return composed


def _fault_shows(tree: Node, fault: str, faulty: str) -> bool:
    """True when the fault changes the gradients at a random point (a sign flip of a zero does not)."""
    rng = np.random.default_rng(0)
    x, y = (tf.constant(rng.standard_normal(SHAPE)) for _ in range(2))
    values: dict[int, Any] = {}
    result = forward(tree, {"x": x, "y": y}, values)
    dy = tf.constant(rng.standard_normal(result.shape) + 0.5)
    right = gradients(tree, x, y, dy, values, None, faulty)
    wrong = gradients(tree, x, y, dy, values, fault, faulty)
    return any(not np.allclose(r.numpy(), w.numpy(), rtol=1e-3, atol=1e-6) for r, w in zip(right, wrong))


def _value_blame(result: gradcheck.Result) -> set[str | None]:
    return {p.input for p in result.problems if p.check in ("native", "numeric")}


CHECK_SETTINGS = {"inputs": {"x": SHAPE, "y": SHAPE}, "execution": "eager", "seed": 3}


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.filter_too_much])
@given(tree=compositions())
def test_a_correct_hand_chained_gradient_passes(tree: Node) -> None:
    result = gradcheck.check(custom_gradient_function(tree), **CHECK_SETTINGS)
    assert result.status == "passed", (tree, [p.message for p in result.problems])


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.filter_too_much])
@given(tree=compositions(), fault=st.sampled_from(FAULTS), faulty=st.sampled_from(["x", "y"]))
def test_one_injected_fault_fails_blaming_the_right_input(tree: Node, fault: str, faulty: str) -> None:
    assume(_fault_shows(tree, fault, faulty))
    result = gradcheck.check(custom_gradient_function(tree, fault, faulty), **CHECK_SETTINGS)
    assert result.status == "failed", (tree, fault, faulty)
    expected = {"x", "y"} if fault == "swapped" else {faulty}
    assert _value_blame(result) == expected, (tree, fault, faulty, [p.message for p in result.problems])
    assert {p.input for p in result.problems} <= expected


def test_the_fuzzed_faults_are_all_caught_on_a_known_composition() -> None:
    # x * sin(y) + mean over rows of tanh(x): every fault shows, on each input.
    x, y = Node("x"), Node("y")
    tree = Node("add", (Node("mul", (x, Node("sin", (y,)))), Node("mean", (Node("tanh", (x,)),), axis=0)))
    assert gradcheck.check(custom_gradient_function(tree), **CHECK_SETTINGS).status == "passed"
    for fault in FAULTS:
        for faulty in ("x", "y"):
            result = gradcheck.check(custom_gradient_function(tree, fault, faulty), **CHECK_SETTINGS)
            expected = {"x", "y"} if fault == "swapped" else {faulty}
            assert result.status == "failed" and _value_blame(result) == expected, (fault, faulty)


# -- gradients of the wrong shape ---------------------------------------------------------------

MISSHAPEN_INPUT = (3, 4)
#: As many elements as the input, in another shape.
_SAME_SIZE = st.sampled_from([(12,), (4, 3), (2, 6), (1, 12), (12, 1), (3, 4, 1), (1, 3, 4), (2, 2, 3)])
_ANY_SIZE = st.lists(st.integers(min_value=0, max_value=6), max_size=3).map(tuple)
WRONG_SHAPES = st.one_of(_SAME_SIZE, _ANY_SIZE).filter(lambda shape: shape != MISSHAPEN_INPUT)


def reshaped(gradient: Any, shape: tuple[int, ...]) -> Any:
    """``gradient``'s elements, repeated or cut to fill ``shape``."""
    flat = tf.reshape(gradient, [-1])
    size = math.prod(shape)
    repeats = max(1, -(-size // int(flat.shape[0])))
    return tf.reshape(tf.tile(flat, [repeats])[:size], shape)


def misshapen_subject(path: str, shape: tuple[int, ...]) -> Any:
    """A subject on ``path`` whose backward function returns the gradient of x * x in ``shape``."""

    @tf.custom_gradient
    def squared(x: Any) -> Any:
        def grad(dy: Any) -> Any:
            return reshaped(2.0 * x * dy, shape)

        return x * x, grad

    def nested_after(x: Any) -> Any:
        @tf.custom_gradient
        def inner(t: Any) -> Any:
            return t * t, lambda dy: reshaped(2.0 * t * dy, shape)

        return inner(x) * 3.0

    def nested_before(x: Any) -> Any:
        @tf.custom_gradient
        def inner(t: Any) -> Any:
            return t * t, lambda dy: reshaped(2.0 * t * dy, shape)

        return inner(2.0 * x)

    class Counts(keras.layers.Layer):
        def build(self, input_shape: Any) -> None:
            self.prior = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        def call(self, x: Any) -> Any:
            @tf.custom_gradient
            def counts(t: Any) -> Any:
                return t * t, lambda dy: reshaped(2.0 * t * dy, shape)

            return counts(x) * tf.convert_to_tensor(self.prior)

    class Scaled(keras.layers.Layer):
        def build(self, input_shape: Any) -> None:
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        def call(self, x: Any) -> Any:
            @tf.custom_gradient
            def scaled(t: Any) -> Any:
                scale = tf.convert_to_tensor(self.scale)

                def grad(dy: Any, variables: Any = None) -> Any:
                    return dy * scale, [reshaped(tf.reduce_sum(dy * t, axis=0), shape)]

                return t * scale, grad

            return scaled(x)

    subjects = {
        "module-level": squared,
        "nested after": nested_after,
        "nested before": nested_before,
        "layer input": Counts,
        "layer weight": Scaled,
    }
    return subjects[path]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    shape=WRONG_SHAPES,
    path=st.sampled_from(["module-level", "nested after", "nested before", "layer input", "layer weight"]),
    mode=st.sampled_from(["fast", "full"]),
)
def test_a_gradient_of_any_wrong_shape_is_a_shape_problem(shape: tuple[int, ...], path: str, mode: str) -> None:
    assume(not (path == "layer weight" and shape == (MISSHAPEN_INPUT[-1],)))  # the weight's own shape
    subject = misshapen_subject(path, shape)
    result = gradcheck.check(subject, inputs={"x": MISSHAPEN_INPUT}, mode=mode)
    described = (path, shape, mode, [(p.check, p.input, p.message) for p in result.problems])
    assert result.status == "failed", described
    assert {p.check for p in result.problems} <= {"shape", "variables"}, described
