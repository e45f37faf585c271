"""--format sarif: SARIF 2.1.0 that validates against the official schema (shipped in tests/fixtures/sarif)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gradcheck.reporting import render
from gradcheck.reporting.sarif import fingerprint, rule_id
from gradcheck.results import CHECKS, Problem, Result, RunReport
from tests.helpers import FIXTURES, REPO, invoke

SCHEMA = json.loads((FIXTURES / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def _validate(log: dict) -> None:
    """Strict: the schema's own draft (04) and Draft 7, both checking formats (uri, date-time)."""
    declared = jsonschema.validators.validator_for(SCHEMA)
    assert declared is jsonschema.Draft4Validator
    for validator in (declared, jsonschema.Draft7Validator):
        validator.check_schema(SCHEMA)
        errors = list(validator(SCHEMA, format_checker=validator.FORMAT_CHECKER).iter_errors(log))
        assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def test_the_schema_catches_a_broken_log() -> None:
    """The validation can fail: a log without ``version`` or with a bad level is rejected."""
    with pytest.raises(AssertionError):
        _validate({"runs": []})
    log = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": []}]}
    _validate(log)
    log["runs"][0]["results"] = [{"message": {"text": "m"}, "level": "fatal"}]
    with pytest.raises(AssertionError):
        _validate(log)


@pytest.fixture(scope="module")
def core_log() -> dict:
    outcome = invoke("run", str(FIXTURES / "core"), "--format", "sarif")
    assert outcome.exit_code == 1, outcome.output
    return json.loads(outcome.stdout)  # standard output carries only the document


def test_failing_run_validates_and_points_at_the_backward_line(core_log: dict) -> None:
    _validate(core_log)
    run = core_log["runs"][0]
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == [rule_id(check) for check in CHECKS]
    assert run["results"], "the core fixtures fail"
    for result in run["results"]:
        assert result["level"] == "error"
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        uri = location["artifactLocation"]["uri"]
        assert not Path(uri).is_absolute() and (Path.cwd() / uri).is_file()
        line = location["region"]["startLine"]
        assert 1 <= line <= len((Path.cwd() / uri).read_text(encoding="utf-8").splitlines())
    fingerprints = [r["partialFingerprints"]["gradcheckProblem/v1"] for r in run["results"]]
    assert len(set(fingerprints)) == len(fingerprints)


def test_fingerprints_are_stable_across_runs(core_log: dict) -> None:
    again = json.loads(invoke("run", str(FIXTURES / "core"), "--format", "sarif").stdout)
    first = [r["partialFingerprints"] for r in core_log["runs"][0]["results"]]
    assert [r["partialFingerprints"] for r in again["runs"][0]["results"]] == first


def test_passing_run_has_no_results() -> None:
    outcome = invoke("run", str(REPO / "examples" / "matmul"), "--format", "sarif")
    assert outcome.exit_code == 0, outcome.output
    log = json.loads(outcome.stdout)
    _validate(log)
    assert log["runs"][0]["results"] == []


def test_message_hint_and_fingerprint_ignore_numbers() -> None:
    """The fingerprint hashes id, check and input only; text is carried as-is (JSON escapes it)."""
    problem = Problem(check="native", input="x", message='off by 0.5 <&"\n>', hint="scale dy", max_abs_error=0.5)
    other = Problem(check="native", input="x", message="off by 7", max_abs_error=7.0)
    result = Result(
        id="m.py::f",
        name="f",
        kind="custom_gradient",
        status="failed",
        problems=(problem,),
        path="m.py",
        line=3,
        backward_line=5,
    )
    assert fingerprint(result, problem) == fingerprint(result, other)
    log = json.loads(render(RunReport(results=(result,), seed=0), "sarif"))
    _validate(log)
    (record,) = log["runs"][0]["results"]
    assert 'off by 0.5 <&"\n>' in record["message"]["text"] and "hint: scale dy" in record["message"]["text"]
    assert record["locations"][0]["physicalLocation"]["region"]["startLine"] == 5
