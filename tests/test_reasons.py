"""Reasons as data (issue 19, item 7): situations are recognised by a code set where they are found.

Each place that once matched a message written elsewhere now tests a
reason: rewording the message does not change what it does, and a message
that reads the same without the reason is not taken for it. The reason is
no part of any report: every format renders the same with it and without.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, get_args

import numpy as np
import pytest

from gradcheck.checking import draw_loop, verdict
from gradcheck.checking.evidence import Judged
from gradcheck.reporting import FORMATS, render
from gradcheck.results import Problem, Reason, Result, RunReport

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
    judged = Judged(SOURCE, 0, {}, np.array([np.nan, 1.0]), NO_LOSSES, "eager", 1)
    return verdict.non_finite_verdict(judged, [], None)


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
