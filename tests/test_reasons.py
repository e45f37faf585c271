"""Reasons as data (issue 19, item 7): situations are recognised by a code set where they are found.

Each place that once matched a message written elsewhere now tests a
reason: rewording the message does not change what it does, and a message
that reads the same without the reason is not taken for it. The reason is
no part of any report: every format renders the same with it and without.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import numpy as np
import pytest

from gradcheck import starter
from gradcheck.checking import ShapeGuess, diagnose, draw_loop, verdict
from gradcheck.checking.build import NeedsConfig
from gradcheck.checking.evidence import GradientCase
from gradcheck.loss import Draw
from gradcheck.reporting import FORMATS, render
from gradcheck.results import Problem, Reason, Result, RunReport
from tests.helpers import write

# -- the reports ---------------------------------------------------------------------------------


def _report(reason: Reason | None) -> RunReport:
    problems = (
        Problem("finite", "x", "the gradient of x has NaN or Inf", worst_index=(0,), reason=reason),
        Problem("numeric", "y", "finite differences were unreliable", hint="a hint", reason=reason),
    )
    result = Result(id="ops.py::f", name="f", kind="function", status="failed", problems=problems, path="ops.py")
    return RunReport(results=(result,), seed=0)


@pytest.mark.parametrize("format_", FORMATS)
def test_every_format_renders_the_same_with_a_reason_and_without(format_: str) -> None:
    assert render(_report("non-finite-gradient"), format_) == render(_report(None), format_)


def test_the_json_entry_of_a_problem_has_no_reason_key() -> None:
    problem = Problem("numeric", "x", "unreliable", reason="unreliable-numeric")
    assert "reason" not in problem.to_dict()
    assert problem.to_dict() == replace(problem, reason=None).to_dict()


def test_reasons_are_short_codes() -> None:
    assert all(code == code.lower() and " " not in code for code in get_args(Reason))


# -- the draw loop: a NaN gradient where the forward output is NaN too -------------------------------


class _NaNForward:
    """A harness whose forward output is NaN at every draw."""

    def outputs(self, values: dict[str, Any]) -> list[np.ndarray]:
        return [np.array([np.nan, 1.0])]


#: A stand-in for the source the gradient is of (only its name is read).
SOURCE: Any = SimpleNamespace(name="x")
NAN_FORWARD: Any = _NaNForward()
NO_LOSSES: Any = None


def _non_finite() -> verdict.Verdict:
    case = GradientCase(SOURCE, 0, {}, np.array([np.nan, 1.0]), NO_LOSSES, "eager", 1)
    return verdict.non_finite_verdict(case, [], None)


def test_a_non_finite_gradient_says_so_in_its_reason() -> None:
    (problem,) = _non_finite().problems
    assert problem.check == "finite" and problem.reason == "non-finite-gradient"


def test_the_forward_being_nan_too_names_the_gradient_from_the_problems_data() -> None:
    found = draw_loop._forward_non_finite_too(_non_finite(), NAN_FORWARD, {})
    assert found.domain == "the gradient of x was NaN or Inf where the forward output is NaN or Inf too"


def test_the_forward_being_nan_too_keys_on_the_reason_not_the_message() -> None:
    reworded = verdict.Verdict(
        final=True, problems=[Problem("finite", "x", "x's gradient: NaN found", reason="non-finite-gradient")]
    )
    found = draw_loop._forward_non_finite_too(reworded, NAN_FORWARD, {})
    assert found.domain == "the gradient of x was NaN or Inf where the forward output is NaN or Inf too"
    # A finite problem that reads as the gradient's but is not one is left alone.
    lookalike = verdict.Verdict(
        final=True, problems=[Problem("finite", "x", "the gradient of x has NaN or Inf at 1 of 2 elements")]
    )
    assert draw_loop._forward_non_finite_too(lookalike, NAN_FORWARD, {}).domain is None


# -- gradcheck init: a class that needs constructor arguments -----------------------------------------

SCALERS = """
    import tensorflow as tf


    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        @tf.custom_gradient
        def apply(self, x):
            def grad(dy):
                return dy * self.factor
            return x * self.factor, grad


    class Refuser:
        def __init__(self):
            raise ValueError("no")

        @tf.custom_gradient
        def apply(self, x):
            def grad(dy):
                return dy
            return tf.identity(x), grad
"""


def _entries(project: Path) -> dict[str, starter.StarterEntry]:
    write(project, "ops.py", SCALERS)
    return {entry.name: entry for entry in starter.starter_entries(("ops.py",)).entries}


def test_a_constructor_asks_for_init_by_its_reason(project: Path) -> None:
    entries = _entries(project)
    assert entries["Scaler.apply"].needs_init and entries["Scaler.apply"].init_parameters == ("factor",)
    assert entries["Refuser.apply"].needs_init


def test_the_guess_carries_the_reason_the_build_found(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ShapeGuess] = []

    def guessed(request: Any) -> ShapeGuess:
        seen.append(starter_guess(request))
        return seen[-1]

    starter_guess = starter.guess_shapes
    monkeypatch.setattr(starter, "guess_shapes", guessed)
    _entries(project)
    assert sorted(guess.reason or "" for guess in seen) == ["init-raised", "needs-init"]


@pytest.mark.parametrize(
    ("failure", "reason", "needs_init"),
    [
        ("the class wants its arguments", "needs-init", True),
        ("building it raised", "init-raised", True),
        ("could not construct Scaler(**init) for the method", None, False),
        ("Scaler(...) needs constructor arguments", None, False),
    ],
)
def test_gradcheck_init_keys_on_the_reason_not_the_message(
    project: Path, monkeypatch: pytest.MonkeyPatch, failure: str, reason: Reason | None, needs_init: bool
) -> None:
    monkeypatch.setattr(starter, "guess_shapes", lambda request: ShapeGuess(None, failure=failure, reason=reason))
    entry = _entries(project)["Scaler.apply"]
    assert entry.failure == failure and entry.needs_init is needs_init
    assert entry.init_parameters == (("factor",) if needs_init else ())


def test_needs_config_says_which_config() -> None:
    assert NeedsConfig("add init", "needs-init").reason == "needs-init"
    assert NeedsConfig("add constants", "needs-constants", (("n", "..."),)).constants == (("n", "..."),)


# -- the hints: finite differences unreliable for TensorFlow's own gradient --------------------------------


def _numeric_only(problem: Problem) -> Problem:
    nothing: Any = None
    rerun = diagnose.Rerun(
        nothing,
        nothing,
        nothing,
        Draw({}, []),
        subject_name="stepped",
        numeric_only_table="[functions.stepped]",
    )
    (hinted,) = diagnose.with_hints([problem], {}, rerun)
    return hinted


def test_the_unreliable_problem_says_so_in_its_reason() -> None:
    problem = verdict._unreliable_problem(GradientCase(SOURCE, 0, {}, np.zeros(2), NO_LOSSES, "eager", 1))
    assert problem.reason == "unreliable-numeric" and problem.hint == verdict.UNRELIABLE_HINT


def test_the_numeric_only_hint_keys_on_the_reason_not_the_hint() -> None:
    reworded = Problem("numeric", "x", "unreliable", hint="reference native, maybe?", reason="unreliable-numeric")
    assert _numeric_only(reworded).hint == diagnose.unreliable_numeric_only_hint("stepped", "[functions.stepped]")
    # The same hint text without the reason is some other problem's hint, kept as it is.
    lookalike = Problem("numeric", "x", "differs", hint=verdict.UNRELIABLE_HINT)
    assert _numeric_only(lookalike) == lookalike
