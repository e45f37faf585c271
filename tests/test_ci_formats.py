"""Reports for CI: JUnit, GitHub annotations and job summary, several reports in one run, atomic files."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gradcheck.cli.options import pair_reports
from gradcheck.errors import UsageError
from gradcheck.reporting import FORMATS, RenderOptions, render
from gradcheck.reporting.github import escape_data, escape_property, workflow_command
from gradcheck.results import Problem, Result, RunReport
from tests.helpers import FIXTURES, STATUSES, invoke, write

#: A second module: one passing, one skipped.
OTHER = """
    import tensorflow as tf


    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            return 3.0 * x * x * dy
        return x * x * x, grad


    @tf.custom_gradient
    def fussy(x):
        tf.debugging.assert_equal(tf.shape(x), [7, 11])
        def grad(dy):
            return dy
        return tf.identity(x), grad
"""


def _line_of(path: Path, text: str) -> int:
    """1-based line of the first line of ``path`` that contains ``text``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# -- JUnit ---------------------------------------------------------------------


def test_junit_has_a_suite_per_module_and_a_case_per_function(project: Path) -> None:
    write(project, "ops.py", STATUSES)
    write(project, "more/other.py", OTHER)
    result = invoke("run", "ops.py", "more/other.py", "--format", "junit")
    assert result.exit_code == 1
    root = ET.fromstring(result.stdout)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "1", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["ops.py", "more/other.py"]
    ops = suites[0]
    assert (ops.get("tests"), ops.get("failures"), ops.get("errors"), ops.get("skipped")) == ("4", "1", "1", "1")
    cases = {case.get("name"): case for case in ops.findall("testcase")}
    assert list(cases) == ["good", "bad", "raises", "picky"]
    assert {case.get("classname") for case in cases.values()} == {"ops"}
    assert [s.get("classname") for s in suites[1].findall("testcase")] == ["more.other", "more.other"]
    assert [child.tag for child in cases["good"]] == ["system-out"]  # passed; its notes (guessed shapes)
    assert "guessed shapes" in (cases["good"].findtext("system-out") or "")
    failure = cases["bad"].find("failure")
    assert failure is not None and "numeric" in (failure.get("type") or "")
    assert "the gradient of x differs" in (failure.get("message") or "")
    # The failure's text is the text report's problem table.
    assert (
        "input" in failure.text and "check" in failure.text and "reproduce: gradcheck run ops.py::bad" in failure.text
    )
    error = cases["raises"].find("error")
    assert error is not None and error.get("type") == "exception"
    assert "backward is 100% broken" in error.get("message", "")
    assert "Traceback" in error.text and "ValueError" in error.text  # the user's traceback for CI logs
    skipped = cases["picky"].find("skipped")
    assert skipped is not None and "[functions.picky]" in skipped.get("message", "")
    for case in ops.iter("testcase"):
        float(case.get("time", "x"))  # every case has a time
    assert float(root.get("time", "x")) >= 0


def test_junit_is_valid_against_the_common_junit_schema(project: Path) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    write(project, "ops.py", STATUSES)
    result = invoke("run", "ops.py", "--format", "junit", "--strict")
    schema = xmlschema.XMLSchema(str(FIXTURES / "junit-10.xsd"))
    schema.validate(result.stdout)
    # With --strict a skip fails the run, so reporters must count it as a failure.
    root = ET.fromstring(result.stdout)
    assert root.get("failures") == "2"
    picky = next(case for case in root.iter("testcase") if case.get("name") == "picky")
    assert picky.find("failure") is not None and picky.find("skipped") is None


def test_junit_cannot_be_broken_by_what_a_user_exception_says() -> None:
    xmlschema = pytest.importorskip("xmlschema")
    problem = Problem("exception", None, 'forward pass raised: <a & "b"> \x1b[31m\x00', traceback="Traceback\x07")
    result = Result(id="ops.py::f", name="f", kind="function", status="error", problems=(problem,))
    document = render(RunReport(results=(result,), seed=0), "junit")
    xmlschema.XMLSchema(str(FIXTURES / "junit-10.xsd")).validate(document)
    error = ET.fromstring(document).find("testsuite/testcase/error")
    assert error is not None and '<a & "b">' in error.get("message", "")


# -- GitHub --------------------------------------------------------------------


def test_github_annotations_line_by_line(project: Path) -> None:
    module = write(project, "ops.py", STATUSES)
    result = invoke("run", "ops.py", "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines, result.output
    assert all(line.startswith("::") for line in lines)  # standard output holds the commands alone
    bad = [line for line in lines if "::bad: " in line]
    assert len(bad) == 2  # one per problem: native and numeric
    backward_of_bad = _line_of(module, "return 3.0 * x * dy") - 1
    for line in bad:
        assert line.startswith(f"::error file=ops.py,line={backward_of_bad},title=gradcheck::bad: x (")
        assert "%0Areproduce: gradcheck run ops.py::bad --seed 0" in line  # newlines escaped
        assert "\n" not in line
    (raised,) = [line for line in lines if "::raises" in line]
    # An exception is annotated at the user's line that raised; its message is escaped: % -> %25.
    raising_line = _line_of(module, 'raise ValueError("backward is 100% broken: a, b")')
    assert raised.startswith(f"::error file=ops.py,line={raising_line},title=gradcheck::raises (")
    assert "backward is 100%25 broken: a, b" in raised
    (skipped,) = [line for line in lines if "picky" in line]
    assert skipped.startswith(f"::warning file=ops.py,line={_line_of(module, 'def picky')},title=gradcheck::")
    assert not any("::good" in line for line in lines)
    assert result.stderr.strip().splitlines()[-1].startswith("1 passed, 1 failed, 1 error, 1 skipped in ")


def test_github_escapes_properties_and_data() -> None:
    assert escape_data("100%\r\nnext: a, b") == "100%25%0D%0Anext: a, b"
    assert escape_property("dir:x/a,b%.py") == "dir%3Ax/a%2Cb%25.py"
    command = workflow_command("error", "a: b\nc", file="x:y,z.py", line=3, title="gradcheck")
    assert command == "::error file=x%3Ay%2Cz.py,line=3,title=gradcheck::a: b%0Ac"
    problem = Problem("shape", "A", "bad, very: bad", expected="(2,)", got="(3,)")
    result = Result(
        id="a,b.py::f", name="f", kind="function", status="failed", problems=(problem,), path="a,b.py", line=3
    )
    (line,) = render(RunReport(results=(result,), seed=0), "github").splitlines()
    # No backward line known: the function's def.
    assert line == "::error file=a%2Cb.py,line=3,title=gradcheck::f: A (shape): bad, very: bad"


def test_github_job_summary_is_appended_when_asked_for(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(project, "ops.py", STATUSES)
    summary = project / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    result = invoke("run", "ops.py", "--format", "github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1
    text = summary.read_text()
    assert text.startswith("earlier step\n## gradcheck: 1 passed, 1 failed, 1 error, 1 skipped in ")
    assert "| ❌ failed | `ops.py::bad` | x | numeric |" in text
    assert "Passed: `ops.py::good`" in text
    assert "gradcheck run ops.py::bad --seed 0" in text
    # Other formats leave the summary alone.
    before = summary.read_text()
    invoke("run", "ops.py", "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text() == before


# -- several reports, atomic files ---------------------------------------------


def test_pairs_follow_the_order_written() -> None:
    xml, html = Path("r.xml"), Path("r.html")
    assert pair_reports(["format_", "output", "format_"], ("junit", "text"), (xml,)) == [("junit", xml), ("text", None)]
    assert pair_reports(["format_", "format_", "output"], ("text", "junit"), (xml,)) == [("text", None), ("junit", xml)]
    assert pair_reports(["output", "format_"], ("junit",), (xml,)) == [("junit", xml)]
    assert pair_reports(["output"], (), (xml,)) == [(None, xml)]
    assert pair_reports(["format_", "output", "format_", "output"], ("junit", "html"), (xml, html)) == [
        ("junit", xml),
        ("html", html),
    ]
    with pytest.raises(UsageError, match="one -o after each --format"):
        pair_reports(["format_", "output", "output"], ("junit",), (xml, html))


def test_several_reports_in_one_run(project: Path) -> None:
    write(project, "ops.py", STATUSES)
    result = invoke(
        "run", "ops.py", "--format", "junit", "-o", "report.xml", "--format", "json", "-o", "out/report.json"
    )
    assert result.exit_code == 1
    assert ET.parse(project / "report.xml").getroot().tag == "testsuites"
    assert json.loads((project / "out" / "report.json").read_text())["summary"]["failed"] == 1
    # Every report has a file: the text report goes to the terminal.
    assert "FAILED  ops.py::bad" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("1 passed, 1 failed, 1 error, 1 skipped")


def test_format_without_output_takes_standard_output(project: Path) -> None:
    write(project, "ops.py", STATUSES)
    result = invoke("run", "ops.py", "--format", "junit", "-o", "report.xml", "--format", "json")
    assert json.loads(result.stdout)["summary"]["error"] == 1  # stdout holds the JSON alone
    assert (project / "report.xml").is_file()
    text_first = invoke("run", "ops.py", "--format", "text", "--format", "junit", "-o", "second.xml")
    assert "FAILED  ops.py::bad" in text_first.stdout
    assert ET.parse(project / "second.xml").getroot().tag == "testsuites"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--format", "json", "--format", "junit"], "only one report can go to standard output"),
        (["--format", "junit", "-o", "a.xml", "-o", "b.xml"], "one -o after each --format"),
        (["--format", "junit", "-o", "a.xml", "--format", "json", "-o", "a.xml"], "the same file"),
        (["--format", "json", "-o", "ops.py"], "refusing to write the report over a module"),
    ],
)
def test_bad_report_options_are_usage_errors(project: Path, args: list[str], fragment: str) -> None:
    module = write(project, "ops.py", STATUSES)
    before = module.read_text()
    result = invoke("run", "ops.py", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert module.read_text() == before


def test_a_reporter_that_fails_leaves_earlier_report_files_intact(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(project, "ops.py", STATUSES)
    assert (
        invoke("run", "ops.py", "--format", "json", "-o", "report.json", "--format", "junit", "-o", "r.xml").exit_code
        == 1
    )
    earlier_json = (project / "report.json").read_bytes()
    earlier_xml = (project / "r.xml").read_bytes()

    import gradcheck.reporting.junit

    def broken_render(report: RunReport, options: RenderOptions) -> str:
        raise RuntimeError("the reporter broke half-way")

    monkeypatch.setattr(gradcheck.reporting.junit, "render", broken_render)
    # --seed 1 would change the JSON report; it must not reach the file.
    result = invoke(
        "run", "ops.py", "--seed", "1", "--format", "json", "-o", "report.json", "--format", "junit", "-o", "r.xml"
    )
    assert result.exit_code == 3
    assert "the reporter broke half-way" in result.stderr
    assert (project / "report.json").read_bytes() == earlier_json
    assert (project / "r.xml").read_bytes() == earlier_xml
    assert sorted(p.name for p in project.iterdir() if p.name.endswith(".tmp")) == []


def test_an_interrupted_write_leaves_the_earlier_file_intact(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(project, "ops.py", STATUSES)
    report = project / "report.json"
    report.write_text('{"earlier": true}\n', encoding="utf-8")
    import os

    def interrupted_replace(source: str, destination: str) -> None:
        raise KeyboardInterrupt  # Ctrl-C between writing the temporary file and the rename

    monkeypatch.setattr(os, "replace", interrupted_replace)
    result = invoke("run", "ops.py", "--format", "json", "-o", "report.json")
    assert result.exit_code == 130
    assert report.read_text() == '{"earlier": true}\n'
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []


def test_every_format_renders_a_hand_built_report() -> None:
    problem = Problem("numeric", "x", "differs", max_abs_error=1.0, worst_index=(1,))
    failed = Result(id="a.py::f", name="f", kind="function", status="failed", problems=(problem,), path="a.py", line=2)
    report = RunReport(results=(failed,), seed=0)
    for format_ in FORMATS:
        assert "f" in render(report, format_)
    with pytest.raises(ValueError, match="unknown report format"):
        render(report, "yaml")
