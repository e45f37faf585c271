"""Eager against ``tf.function``: the two executions' audits merged into one list, a failure in one
of them explained (a Python constant that becomes a graph tensor), and their gradients compared."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from gradcheck.compare import compare_elementwise, tolerance
from gradcheck.harness import Source
from gradcheck.inputs import CallPlan
from gradcheck.instrument import Outcome
from gradcheck.results import Problem


def merge_audits(plan: CallPlan, audits: Mapping[str, list[Problem]], table: str) -> list[Problem]:
    """One list of audit problems over the execution modes.

    A problem seen in every mode is reported once with no execution; one
    seen in some modes only carries the mode. Where a mode raised and
    another did not, that is an ``execution`` problem, not an error
    (``table``: where the subject's config goes, ``gradcheck.toml: [functions.NAME]``, for its hint).
    """
    if len(audits) == 1:
        return next(iter(audits.values()))
    keyed = {execution: {(p.check, p.input, p.message): p for p in problems} for execution, problems in audits.items()}
    common = set.intersection(*(set(k) for k in keyed.values()))
    merged = [p for key, p in keyed[next(iter(keyed))].items() if key in common]
    raised = {e for e, problems in audits.items() if any(p.check == "exception" for p in problems)}
    for execution, problems in keyed.items():
        for key, problem in problems.items():
            if key in common:
                continue
            if problem.check == "exception" and raised != set(audits):
                merged.append(execution_failure(plan, execution, problem, table))
            elif problem.check == "variables" and problem.input is None:
                other = "inside tf.function" if execution == "eager" else "eagerly"
                message = problem.message + f" (the same code runs {other}, where the variable arrives as a tensor)"
                merged.append(replace(problem, execution=execution, message=message))
            else:
                merged.append(replace(problem, execution=execution))
    return merged


def execution_failure(plan: CallPlan, execution: str, problem: Problem, table: str) -> Problem:
    """An exception seen in one execution mode only, as an ``execution`` problem with the likely cause
    (``table``: where the subject's config goes, for a hint that names a key to set there)."""
    where = "inside tf.function" if execution == "function" else "eagerly"
    other = "eagerly" if execution == "function" else "inside tf.function"
    hint = None
    message = problem.message
    if execution == "function":
        constants = [a for a in plan.positional if a.role == "constant"]
        keywords = [a for a in plan.arguments if a.keyword]
        if "keywords arguments only when eager" in message or (keywords and "keyword" in message):
            names = ", ".join(a.name for a in keywords) or "them"
            hint = (
                f"inside tf.function, custom_gradient refuses keyword arguments: pass {names} positionally "
                "(returning None for it), or bind it with functools.partial"
            )
        elif problem.reason == "eager-only":
            hint = (
                "the code runs eagerly only (it reads tensor values: .numpy(), numpy calls, or asserts "
                f'tf.executing_eagerly()); where that is meant, check it eagerly: add to {table} execution = "eager"'
            )
        elif constants:
            hint = constant_hint(constants)
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


def constant_hint(constants: list[Any]) -> str:
    """What to set in the config when tf.function's custom_gradient turns Python constants into tensors.

    A Python float becomes a float32 tensor, which clashes with float64
    inputs: declared as a scalar input it is a tensor of the checked dtype
    (and its gradient is checked too); or the whole check runs in float32.
    Other constants (ints, strings) can only be left to eager execution.
    """
    described = ", ".join(f"{a.name}={a.value!r} (becomes {_graph_dtype(a.value)})" for a in constants)
    floats = [a.name for a in constants if isinstance(a.value, float)]
    if floats:
        declared = ", ".join(f"{name} = {{ shape = [] }}" for name in floats)
        fix = (
            'in the config, check in float32 (dtype = "float32"), or declare it an input '
            f"(inputs = {{ {declared} }}: a tensor of the checked dtype, whose gradient is then checked too)"
        )
    else:
        fix = 'bind it with a closure or functools.partial, or in the config check eagerly only (execution = "eager")'
    return f"inside tf.function, custom_gradient converts the Python constant {described} to a tensor: {fix}"


def _graph_dtype(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool tensor"
    if isinstance(value, int):
        return "an int32 tensor"
    if isinstance(value, float):
        return "a float32 tensor"
    return "a tensor"


def compare_executions(
    sources: list[Source], first: Outcome, second: Outcome, rtol: float | None, atol: float | None
) -> list[Problem]:
    """Eager and tf.function gradients of the same draw must agree."""
    problems = []
    for source in sources:
        a = first.grads.get(source.name) if first.grads else None
        b = second.grads.get(source.name) if second.grads else None
        if a is None or b is None or a.shape != b.shape or np.array_equal(a, b):  # equal: NaN never is
            continue
        finite_a, finite_b = np.isfinite(a), np.isfinite(b)
        result = compare_elementwise(a, b, tolerance(source.dtype, "native", rtol, atol), mask=finite_a & finite_b)
        if not result.ok or not np.array_equal(finite_a, finite_b):
            problems.append(
                Problem(
                    "execution",
                    source.name,
                    f"eager and tf.function give different gradients of {source.name} "
                    f"(max abs difference {result.max_abs_error:.3g})",
                    execution=second.execution,
                    **result.errors(),
                    hint="the backward function depends on Python state or randomness that "
                    "tf.function freezes at trace time",
                )
            )
    return problems
