"""SARIF 2.1.0 for GitHub code scanning: one rule per check kind, one result per problem.

Locations reuse :func:`gradcheck.reporting.github.annotation_line`, so a
problem points at the same line as its GitHub annotation. Artifact URIs are
relative to the working directory under ``uriBaseId`` ``%SRCROOT%``.
``partialFingerprints`` hash only the function id, the check and the input,
never numbers or timings, so one problem keeps its fingerprint across runs.
Text is taken as-is: JSON escaping makes it safe (non-ASCII as ``\\u``
escapes, so a lone surrogate from a file name that is not UTF-8 still
encodes). Artifact URIs are percent-encoded from the path's bytes, so a
space or a file name that is not UTF-8 still makes a valid URI.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from pathlib import Path

from gradcheck.reporting import RenderOptions
from gradcheck.reporting.github import annotation_line
from gradcheck.reporting.json_report import json_document
from gradcheck.results import CHECKS, VERSION, Problem, Result, RunReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

#: What each check kind verifies: (short description, full description).
_RULE_TEXT = {
    "count": (
        "Wrong number of gradients",
        "The backward function returned a different number of gradients than the function has inputs.",
    ),
    "shape": ("Gradient has the wrong shape", "A gradient's shape differs from its input's shape."),
    "dtype": ("Gradient has the wrong dtype", "A gradient's dtype differs from its input's dtype."),
    "finite": ("Non-finite values", "The forward output or a gradient holds NaN or infinity."),
    "native": (
        "Gradient differs from native autodiff",
        "The custom gradient differs from TensorFlow's own gradient of the forward function.",
    ),
    "numeric": (
        "Gradient differs from finite differences",
        "The custom gradient differs from a finite-difference estimate beyond its error bound.",
    ),
    "variables": (
        "Wrong variable gradients",
        "The gradients with respect to the variables the function reads are missing or wrong.",
    ),
    "execution": (
        "Eager and graph execution differ",
        "The function gives different results eagerly and inside tf.function.",
    ),
    "exception": ("The function raised", "The function or its backward function raised an exception."),
    "import": (
        "Module failed to import",
        "A module that a directory or package walk brought in could not be imported or read.",
    ),
}


def rule_id(check: str) -> str:
    """The SARIF rule id of a check kind, e.g. ``gradcheck/native``."""
    return f"gradcheck/{check}"


def _rules() -> list[dict]:
    rules = []
    for check in CHECKS:
        short, full = _RULE_TEXT.get(check, (check, check))
        rules.append(
            {
                "id": rule_id(check),
                "name": check,
                "shortDescription": {"text": short},
                "fullDescription": {"text": full},
                "help": {"text": f"{full} Run gradcheck with -v on the function to see the details."},
                "defaultConfiguration": {"level": "error"},
            }
        )
    return rules


def fingerprint(result: Result, problem: Problem) -> str:
    """A hash of what identifies a problem across runs: function id, check, input."""
    key = "\0".join((result.id, problem.check, problem.input or ""))
    # surrogatepass: a name or path that is not valid UTF-8 still hashes, and always the same way.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _uri(path: str) -> str:
    # Relative to the working directory where it can be; code scanning resolves it under %SRCROOT%.
    try:
        relative = os.path.relpath(path)
    except ValueError:
        relative = path
    posix = Path(relative).as_posix()
    try:
        raw = os.fsencode(posix)  # a file name that is not UTF-8 comes back as its own bytes
    except UnicodeEncodeError:
        raw = posix.encode("utf-8", "surrogatepass")
    return urllib.parse.quote(raw, safe="/")


def _message(result: Result, problem: Problem) -> str:
    where = f"{result.name}: {problem.input}" if problem.input else result.name
    text = f"{where} ({problem.check}): {problem.message}"
    if problem.hint:
        text += f"\nhint: {problem.hint}"
    if result.reproduce:
        text += f"\nreproduce: {result.reproduce}"
    return text


def _result(result: Result, problem: Problem) -> dict:
    record: dict = {
        "ruleId": rule_id(problem.check),
        "ruleIndex": CHECKS.index(problem.check) if problem.check in CHECKS else 0,
        "level": "error",
        "message": {"text": _message(result, problem)},
        "partialFingerprints": {"gradcheckProblem/v1": fingerprint(result, problem)},
    }
    if result.path:
        physical: dict = {"artifactLocation": {"uri": _uri(result.path), "uriBaseId": "%SRCROOT%"}}
        line = annotation_line(result, problem)
        if line:
            physical["region"] = {"startLine": line}
        record["locations"] = [{"physicalLocation": physical}]
    return record


def sarif(report: RunReport) -> dict:
    """The report as a SARIF 2.1.0 log (a JSON-ready dict)."""
    results = [_result(result, problem) for result in report.results for problem in result.problems]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "gradcheck", "version": VERSION, "rules": _rules()}},
                "results": results,
                "columnKind": "unicodeCodePoints",
            }
        ],
    }


def render(report: RunReport, options: RenderOptions) -> str:
    """The SARIF log as indented JSON."""
    return json_document(sarif(report))
