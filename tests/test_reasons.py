"""Reasons as data (issue 19, item 7): situations are recognised by a code set where they are found.

Each place that once matched a message written elsewhere now tests a
reason: rewording the message does not change what it does, and a message
that reads the same without the reason is not taken for it. The reason is
no part of any report: every format renders the same with it and without.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest

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
