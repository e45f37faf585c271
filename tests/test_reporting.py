"""Reporters render hand-built results: records in, text out (no TensorFlow)."""

from __future__ import annotations

import importlib.metadata
import io
import json

from rich.console import Console

from gradcheck.reporting.json_report import render_json
from gradcheck.reporting.text import render_text, summary_line
from gradcheck.results import ExitCode, InputRecord, Problem, Result, RunReport, most_severe

FAILED = Result(
    id="ops.py::custom_op",
    name="custom_op",
    kind="function",
    status="failed",
    dtype="float64",
    inputs=(InputRecord("A", (32, 16), "float64"), InputRecord("W", (16, 8), "float64")),
    problems=(
        Problem(
            "numeric",
            "W",
            "the gradient of W differs from finite differences",
            execution="eager",
            max_abs_error=3.1,
            max_rel_error=1.0,
            worst_index=(3, 1),
            hint="wrong sign: the gradient is the negative of the expected one",
        ),
        Problem("shape", "A", "the gradient of A has shape (16, 32)", expected="(32, 16)", got="(16, 32)"),
    ),
    seconds=0.21,
    reproduce="gradcheck run ops.py::custom_op --seed 0",
)
PASSED = Result(
    id="ops.py::ok",
    name="ok",
    kind="function",
    status="passed",
    dtype="float64",
    seconds=0.05,
    inputs=(InputRecord("x", (5,), "float64", guessed=True),),
    notes=("a note",),
)
SKIPPED = Result(
    id="ops.py::picky",
    name="picky",
    kind="function",
    status="skipped",
    skip_reason="no shapes configured for x; add to gradcheck.toml: [functions.picky] inputs = { x = [4, 5] }",
)
REPORT = RunReport(results=(FAILED, PASSED, SKIPPED), seed=0, seconds=2.41)


def _render(report: RunReport, verbosity: int = 0) -> str:
    buffer = io.StringIO()
    render_text(report, Console(file=buffer, width=100, color_system=None), verbosity)
    return buffer.getvalue()


def test_text_report_lines_tables_hints_and_summary() -> None:
    text = _render(REPORT)
    lines = text.splitlines()
    assert lines[0] == "gradcheck 0.1.0, seed 0, 3 checked"
    assert lines[1] == "FAILED  ops.py::custom_op (0.21s)"
    header = lines[2].split()
    assert header == ["input", "check", "execution", "expected", "got", "max", "abs", "max", "rel", "worst", "index"]
    assert " ".join(lines[3].split()) == "W numeric eager 3.1 1 [3, 1]"
    assert " ".join(lines[4].split()) == "A shape (32, 16) (16, 32)"
    assert "      hint: wrong sign: the gradient is the negative of the expected one" in lines
    assert "    reproduce: gradcheck run ops.py::custom_op --seed 0" in lines
    assert "PASSED  ops.py::ok (0.05s)" in lines
    assert "a note" not in text  # notes of passing functions only with -v
    assert "SKIPPED ops.py::picky" in text and "[functions.picky] inputs = { x = [4, 5] }" in text
    assert lines[-1] == "1 passed, 1 failed, 1 skipped in 2.41s"


def test_quiet_and_verbose() -> None:
    quiet = _render(REPORT, -1)
    assert "ops.py::ok" not in quiet and "ops.py::picky" not in quiet and "ops.py::custom_op" in quiet
    assert not quiet.startswith("gradcheck ")
    verbose = _render(REPORT, 1)
    assert "note: a note" in verbose
    assert "(5,) guessed" in verbose


def test_summary_line_forms() -> None:
    assert summary_line(RunReport(results=(), seed=0, seconds=0.5)) == "nothing checked in 0.50s"
    errors = tuple(Result(id=f"a::f{i}", name=f"f{i}", kind="function", status="error") for i in range(2))
    assert summary_line(RunReport(results=errors, seed=0, seconds=1.0)) == "2 errors in 1.00s"
    assert summary_line(RunReport(results=errors[:1], seed=0, seconds=1.0)) == "1 error in 1.00s"
    stopped = RunReport(results=(FAILED,), seed=0, seconds=1.0, maxfail=1, not_checked=("a::g", "a::h"))
    assert summary_line(stopped) == "1 failed in 1.00s (stopped after 1 failure: 2 not checked)"
    halted = RunReport(results=(FAILED,), seed=0, seconds=1.0, interrupted=True, not_checked=("a::g",))
    assert summary_line(halted) == "1 failed in 1.00s (interrupted: 1 not checked)"
    interrupted = RunReport(results=(PASSED,), seed=0, seconds=1.0, interrupted=True)
    assert summary_line(interrupted) == "1 passed in 1.00s (interrupted)"


def test_json_report_matches_the_contract() -> None:
    document = json.loads(render_json(REPORT))
    assert document["gradcheck"] == importlib.metadata.version("gradcheck")
    assert document["exit_code"] == 1
    assert document["summary"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}
    failed = document["results"][0]
    assert failed["inputs"] == [
        {"name": "A", "shape": [32, 16], "dtype": "float64"},
        {"name": "W", "shape": [16, 8], "dtype": "float64"},
    ]
    numeric = failed["problems"][0]
    assert numeric["check"] == "numeric" and numeric["input"] == "W" and numeric["execution"] == "eager"
    assert (numeric["max_abs_error"], numeric["max_rel_error"], numeric["worst_index"]) == (3.1, 1.0, [3, 1])
    assert document["results"][2]["skip_reason"].startswith("no shapes configured")


def test_json_has_no_infinities() -> None:
    result = Result(
        id="a::f",
        name="f",
        kind="function",
        status="failed",
        problems=(Problem("numeric", "x", "m", max_abs_error=float("inf")),),
    )
    document = render_json(RunReport(results=(result,), seed=0))
    assert "Infinity" not in document
    assert json.loads(document)["results"][0]["problems"][0]["max_abs_error"] is None


def test_exit_code_precedence() -> None:
    assert RunReport(results=(), seed=0).exit_code == ExitCode.NO_TESTS
    assert RunReport(results=(PASSED,), seed=0).exit_code == ExitCode.OK
    assert RunReport(results=(PASSED, FAILED), seed=0).exit_code == ExitCode.FAILED
    assert RunReport(results=(FAILED,), seed=0, interrupted=True).exit_code == ExitCode.INTERRUPTED
    assert RunReport(results=(SKIPPED,), seed=0, fail_on=("failed", "error", "skipped")).exit_code == ExitCode.FAILED
    order = [
        ExitCode.OK,
        ExitCode.NO_TESTS,
        ExitCode.FAILED,
        ExitCode.USAGE_ERROR,
        ExitCode.INTERRUPTED,
        ExitCode.INTERNAL_ERROR,
    ]
    for i in range(len(order)):
        assert most_severe(order[: i + 1]) == order[i]
