"""The first forward pass of a call target: the value a :class:`~gradcheck.harness.Harness` is built from.

It runs once, eagerly and natively, under a tape that finds the variables
the forward pass reads. What it finds is what every later pass starts
from: the float outputs (their shapes, dtypes and labels, and the upstream
gradients of the draw, which need those shapes), the variables, and the
tensors it converted. Asked for native autodiff, it computes it at once
from its own tape, so native autodiff at the first draw needs no forward
pass of its own, and the tape, with every intermediate of the forward pass,
is freed before :func:`first_pass` returns: a check's peak memory stays
that of one pass, where a kept tape would add a whole forward pass's
intermediates to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcheck import _tf
from gradcheck.feed import Tensors, Variables, all_frozen, identity_key
from gradcheck.inputs import CallPlan
from gradcheck.instrument import Outcome, raised_by_gradcheck, real_float64, to_float64
from gradcheck.targets import CallTarget


@dataclass(frozen=True)
class OutputSpec:
    """One float output of the forward pass, which gets a random upstream."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class NativeAhead:
    """Native autodiff at the first draw, from the first pass's own tape."""

    key: list[Any]
    """The values it ran on, by identity (:func:`~gradcheck.feed.identity_key`)."""
    upstreams: list[np.ndarray]
    outcome: Outcome


@dataclass(frozen=True, eq=False)
class FirstPass:
    """What the first forward pass found."""

    outputs: list[np.ndarray]
    """The float outputs, as float64."""
    specs: list[OutputSpec]
    labels: list[str]
    """Where each float output sits in the result (a dict key, a tuple index), in upstream order."""
    variables: Variables
    tensors: Tensors
    """The conversions of the draw's arrays, for the later passes at the same draw."""
    key: list[Any] | None
    """The values it ran on, by identity, where identity stands for them (every array frozen); else None."""
    upstreams: list[np.ndarray] | None = None
    """The upstream gradients of the draw, where asked for."""
    native: NativeAhead | None = None
    """Native autodiff at the draw, where asked for and the tape could serve (see :func:`first_pass`)."""


def first_pass(
    target: CallTarget,
    plan: CallPlan,
    values: dict[str, Any],
    name_variable: Callable[[Any], str] | None = None,
    upstreams: Callable[[list[OutputSpec]], list[np.ndarray]] | None = None,
    native: bool = False,
) -> FirstPass:
    """Run the forward pass at ``values`` once, under a tape that finds the variables it reads.

    ``upstreams`` makes the draw's upstream gradients from the output specs
    found. With ``native`` (and ``upstreams``), native autodiff at the draw
    is computed from this pass's tape where it fits: every array frozen (so
    identity means the same values) and no variables read (a forward pass
    may change those as it reads them, so native autodiff runs at the
    values they have after it). Raises what the forward pass raises.
    """
    tf = _tf.tensorflow()
    tensors = Tensors()
    leaves = tensors.leaves(plan, values)
    with tf.GradientTape(watch_accessed_variables=True) as tape:
        watched = [leaves[a.name] for a in plan.differentiable] if native else []
        for source in watched:
            tape.watch(source)
        # Inside the tape, as in the harness's VJPs: a complex argument is built from its parts by ops.
        args, kwargs = plan.build(lambda leaf: leaves[leaf.name])
        result = target.native(args, kwargs)
        # Inside the tape: a complex output's parts are ops to differentiate.
        labelled = _tf.differentiable_outputs(result)
    variables = Variables.found(tape.watched_variables(), name_variable)
    flat = [t for _, t in labelled]
    specs = [OutputSpec(tuple(t.shape.as_list()), t.dtype.name) for t in flat]
    outputs = [real_float64(t) for t in flat]
    key = identity_key(plan, variables, values)
    made = upstreams(specs) if upstreams is not None else None
    ahead = None
    if native and made is not None and all_frozen(key) and not len(variables):
        names = [a.name for a in plan.differentiable]
        upstream_list = tensors.upstreams(made, [s.dtype for s in specs])
        ahead = NativeAhead(key, list(made), _native_from(tape, flat, watched, upstream_list, names))
    labels = [label for label, _ in labelled]
    return FirstPass(outputs, specs, labels, variables, tensors, key if all_frozen(key) else None, made, ahead)


def _native_from(tape: Any, targets: list[Any], watched: list[Any], upstreams: list[Any], names: list[str]) -> Outcome:
    """Native autodiff of ``targets`` with respect to the ``watched`` inputs (named ``names``), from ``tape``."""
    try:
        grads = tape.gradient(targets, watched, output_gradients=upstreams)
    except Exception as error:  # the user's forward raised
        if raised_by_gradcheck(error):
            raise
        return Outcome("eager", error=error)
    return Outcome("eager", grads=dense(names, grads))


def dense(names: list[str], grads: list[Any]) -> dict[str, np.ndarray | None]:
    """Gradients by source name as float64 arrays (None where TensorFlow gave none; slices made dense)."""
    tf = _tf.tensorflow()
    found: dict[str, np.ndarray | None] = {}
    for name, grad in zip(names, grads):
        if grad is None:
            found[name] = None
            continue
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.convert_to_tensor(grad)
        found[name] = to_float64(grad)
    return found
