"""The terminal: -q, -v, colour (--color, NO_COLOR), progress, --fail-on and --maxfail."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from gradcheck import progress
from gradcheck.results import Result
from tests.helpers import MIXED, PICKY, invoke, run_json, write, wrong_factors

#: Colour escape codes (foreground or background), as opposed to bold or dim.
_COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-8]|4[0-8]|9[0-7])[;m]")


def _mixed(project: Path) -> None:
    write(project, "ops.py", MIXED)
    write(project, "gradcheck.toml", "[functions.good]\ninputs = { x = [3] }\n[functions.bad]\ninputs = { x = [3] }\n")


def test_quiet_prints_only_failures_and_the_summary(project: Path) -> None:
    _mixed(project)
    result = invoke("run", "ops.py", "-q")
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("FAILED  ops.py::bad")
    assert "ops.py::good" not in result.stdout and "gradcheck 0.1.0" not in result.stdout
    assert any(line.startswith("ERROR   ops.py::raises") for line in lines)
    assert "|custom -" not in result.stdout  # no heat maps with -q
    assert lines[-1].startswith("1 passed, 1 failed, 1 error in ")


def test_default_output_has_heat_maps_but_no_tracebacks(project: Path) -> None:
    _mixed(project)
    result = invoke("run", "ops.py")
    assert "x (3,): |custom - native autodiff|, one row" in result.stdout
    assert "Traceback" not in result.output
    assert "(3,)" not in result.stdout.split("PASSED  ops.py::good")[1].split("\n")[1]  # no inputs of passing ones


def test_verbose_adds_inputs_of_passing_functions_and_tracebacks(project: Path) -> None:
    _mixed(project)
    result = invoke("run", "ops.py", "-v")
    passing = result.stdout.split("PASSED  ops.py::good")[1].split("FAILED")[0]
    assert "input" in passing and "(3,)" in passing
    error = result.stdout.split("ERROR   ops.py::raises")[1]
    assert "| Traceback (most recent call last):" in error
    assert 'raise ValueError("backward is 100% broken: a, b")' in error  # from the user's own frame
    assert "| ValueError: backward is 100% broken: a, b" in error
    assert result.stdout.strip().splitlines()[-1].startswith("1 passed, 1 failed, 1 error in ")


def test_colour_is_off_in_pipes_and_under_no_color(project: Path) -> None:
    _mixed(project)
    piped = invoke("run", "ops.py")
    assert "\x1b[" not in piped.stdout
    forced = invoke("run", "ops.py", env={"FORCE_COLOR": "1", "NO_COLOR": None})
    assert _COLOUR.search(forced.stdout) and "██" in forced.stdout
    no_color = invoke("run", "ops.py", env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert not _COLOUR.search(no_color.stdout)
    assert "██" not in no_color.stdout and "scale: ' .:-=+*#%@'" in no_color.stdout  # the plain heat map


def test_color_option_wins_over_the_environment(project: Path) -> None:
    _mixed(project)
    always = invoke("run", "ops.py", "--color", "always", env={"NO_COLOR": "1"})
    assert _COLOUR.search(always.stdout)
    never = invoke("run", "ops.py", "--color", "never", env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in never.stdout and "scale: ' .:-=+*#%@'" in never.stdout
    assert invoke("run", "ops.py", "--color", "sometimes").exit_code == 2


def test_no_progress_bar_when_standard_error_is_no_terminal(project: Path) -> None:
    _mixed(project)
    result = invoke("run", "ops.py")
    assert "checking" not in result.stderr and "\r" not in result.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal_outside_ci() -> None:
    assert progress.wanted(_Terminal(), {}) is True
    assert progress.wanted(io.StringIO(), {}) is False
    assert progress.wanted(_Terminal(), {"CI": "true"}) is False
    assert progress.wanted(_Terminal(), {"CI": "false"}) is True


def test_progress_bar_shows_the_function_and_the_count() -> None:
    stream = _Terminal()
    with progress.ProgressBar(Console(file=stream, force_terminal=True, width=100)) as bar:
        bar.on_start("ops.py::bad", 0, 3)
        bar.on_result(Result(id="ops.py::bad", name="bad", kind="function", status="failed"), 0, 3)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "checking ops.py::bad" in drawn and "1/3" in drawn


def test_progress_bar_says_which_module_is_imported_before_the_count_is_known() -> None:
    stream = _Terminal()
    with progress.ProgressBar(Console(file=stream, force_terminal=True, width=100)) as bar:
        bar.on_import("pkg/ops.py")
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "importing pkg/ops.py" in drawn


# -- --fail-on and --maxfail ---------------------------------------------------


def test_fail_on_chooses_the_statuses_that_fail_the_run(project: Path) -> None:
    write(project, "ops.py", PICKY)
    assert invoke("run", "ops.py").exit_code == 0  # skipped does not fail by default
    assert invoke("run", "ops.py", "--fail-on", "skipped").exit_code == 1
    assert invoke("run", "ops.py", "--fail-on", "error,failed").exit_code == 0
    assert invoke("run", "ops.py", "--fail-on", "error", "--fail-on", "skipped").exit_code == 1
    _mixed(project)
    assert invoke("run", "ops.py", "-k", "bad", "--fail-on", "error").exit_code == 0
    assert invoke("run", "ops.py", "-k", "bad").exit_code == 1


def test_fail_on_from_the_config(project: Path) -> None:
    write(project, "ops.py", PICKY)
    write(project, "gradcheck.toml", 'fail_on = ["failed", "error", "skipped"]\n')
    assert invoke("run", "ops.py").exit_code == 1
    assert invoke("run", "ops.py", "--fail-on", "failed").exit_code == 0  # the command line wins
    write(project, "gradcheck.toml", 'fail_on = ["skiped"]\n')
    bad = invoke("run", "ops.py")
    assert bad.exit_code == 2 and "fail_on" in bad.stderr and "did you mean 'skipped'" in bad.stderr


def test_bad_fail_on_value(project: Path) -> None:
    write(project, "ops.py", PICKY)
    result = invoke("run", "ops.py", "--fail-on", "faild")
    assert result.exit_code == 2
    assert "--fail-on" in result.stderr and "did you mean 'failed'" in result.stderr


def test_maxfail_stops_after_n_failures(project: Path) -> None:
    write(project, "ops.py", wrong_factors(3))
    result = invoke("run", "ops.py", "--maxfail", "1")
    assert result.exit_code == 1
    assert "ops.py::bad0" in result.stdout and "FAILED  ops.py::bad1" not in result.stdout
    assert result.stdout.strip().splitlines()[-1].endswith("(stopped after 1 failure: 2 not checked)")
    document = run_json("ops.py", "--maxfail", "2")
    assert [r["name"] for r in document["results"]] == ["bad0", "bad1"]
    assert document["not_checked"] == ["ops.py::bad2"]


def test_maxfail_not_reached_checks_everything(project: Path) -> None:
    write(project, "ops.py", wrong_factors(3))
    document = run_json("ops.py", "--maxfail", "3")
    assert len(document["results"]) == 3 and "not_checked" not in document
    write(project, "gradcheck.toml", "maxfail = 1\n")
    assert len(run_json("ops.py")["results"]) == 1  # maxfail from the config


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_bad_maxfail(project: Path, value: str) -> None:
    write(project, "ops.py", wrong_factors(3))
    assert invoke("run", "ops.py", "--maxfail", value).exit_code == 2


def test_json_report_keeps_its_contract_with_the_new_keys(project: Path) -> None:
    _mixed(project)
    document = json.loads(invoke("run", "ops.py", "--format", "json").stdout)
    assert set(document) == {"gradcheck", "seed", "exit_code", "summary", "results", "collection"}
    error = next(r for r in document["results"] if r["name"] == "raises")
    assert "traceback" not in error["problems"][0]  # tracebacks are for -v and JUnit, not JSON
