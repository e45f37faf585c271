"""JUnit XML, as GitLab, Jenkins and GitHub test reporters read it.

One ``<testsuite>`` per module, one ``<testcase>`` per function or layer, in
the order they were checked, under a ``<testsuites>`` root. The elements and
attributes are those of the common JUnit schema (Jenkins' ``junit-10.xsd``,
which pytest's own JUnit output is tested against). Built with
``xml.etree.ElementTree``, so every text and attribute is escaped by the
library, never by hand. User text is first :func:`~gradcheck.reporting.safe_text.shown`:
control characters escaped as ``repr`` does, which also keeps every name and
message within what XML 1.0 can hold.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from gradcheck.reporting import RenderOptions
from gradcheck.reporting.safe_text import shown
from gradcheck.reporting.text import render_result_string
from gradcheck.results import Result, RunReport

#: Characters XML 1.0 cannot hold at all (a user's exception message may carry them).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """An element's text: several lines allowed, every other control character escaped."""
    return _NOT_XML.sub("\ufffd", shown(text, keep_newlines=True))


def _xml_attribute(text: str) -> str:
    """An attribute (a name, a message): one line, every control character escaped."""
    return _NOT_XML.sub("\ufffd", shown(text))


def _time(seconds: float) -> str:
    # The schema's SUREFIRE_TIME: plain decimal seconds, at most three decimals in pytest's copy.
    return f"{max(seconds, 0.0):.3f}"


def classname(result: Result) -> str:
    """The module as a dotted name (``examples.broken.broken_ops``), with the class for a method.

    Test reporters split ``classname`` at its dots into package and class,
    so a path with ``/`` and ``.py`` would show as a class named ``py``.
    """
    module = result.module
    if module.endswith(".py"):
        module = module[: -len(".py")]
    dotted = module.strip("/").replace("/", ".")
    owner, _, _ = result.name.rpartition(".")
    return f"{dotted}.{owner}" if owner else dotted


def _case_name(result: Result) -> str:
    return result.name.rpartition(".")[2]


def _first_message(result: Result) -> str:
    if not result.problems:
        return result.status
    problem = result.problems[0]
    more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
    return f"{problem.input or result.name} ({problem.check}): {problem.message}{more}"


def _tracebacks(result: Result) -> str:
    texts = [p.traceback for p in result.problems if p.traceback]
    return "\n".join(texts)


def _testcase(suite: ET.Element, result: Result, report: RunReport) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        classname=_xml_attribute(classname(result)),
        name=_xml_attribute(_case_name(result)),
        time=_time(result.seconds),
    )
    checks = ",".join(dict.fromkeys(p.check for p in result.problems)) or result.status
    if result.status == "failed":
        element = ET.SubElement(case, "failure", type=checks, message=_xml_attribute(_first_message(result)))
        element.text = _xml_text(render_result_string(result))
    elif result.status == "error":
        element = ET.SubElement(case, "error", type=checks, message=_xml_attribute(_first_message(result)))
        details = render_result_string(result)
        tracebacks = _tracebacks(result)
        element.text = _xml_text(details + ("\n" + tracebacks if tracebacks else ""))
    elif result.status == "skipped":
        reason = result.skip_reason or "skipped"
        if "skipped" in report.fail_on:
            # --strict / --fail-on skipped: a skip fails the run, so reporters must show it as one.
            element = ET.SubElement(case, "failure", type="skipped", message=_xml_attribute(reason))
        else:
            element = ET.SubElement(case, "skipped", message=_xml_attribute(reason))
        element.text = _xml_text(reason)
    if result.notes:
        ET.SubElement(case, "system-out").text = _xml_text("\n".join(result.notes))


def _counts(results: list[Result], report: RunReport) -> dict[str, str]:
    strict_skips = "skipped" in report.fail_on
    skipped = sum(r.status == "skipped" for r in results)
    return {
        "tests": str(len(results)),
        "failures": str(sum(r.status == "failed" for r in results) + (skipped if strict_skips else 0)),
        "errors": str(sum(r.status == "error" for r in results)),
        "skipped": str(0 if strict_skips else skipped),
    }


def render(report: RunReport, options: RenderOptions) -> str:
    """The report as a JUnit XML document, with an XML declaration and a trailing newline."""
    modules: dict[str, list[Result]] = {}
    for result in report.results:
        modules.setdefault(result.module, []).append(result)
    everything = _counts(list(report.results), report)
    root = ET.Element(
        "testsuites",
        name="gradcheck",
        tests=everything["tests"],
        failures=everything["failures"],
        errors=everything["errors"],
        time=_time(report.seconds),
    )
    for module, results in modules.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            {
                "name": _xml_attribute(module),
                "time": _time(sum(r.seconds for r in results)),
                "file": _xml_attribute(module),
                **_counts(results, report),
            },
        )
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="gradcheck", value=report.version)
        ET.SubElement(properties, "property", name="seed", value=str(report.seed))
        for result in results:
            _testcase(suite, result, report)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
