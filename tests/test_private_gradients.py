"""Private module-level custom gradients, checked through the public functions of their module (issue 20, item 2).

The fixture module is tests/fixtures/private/private_ops.py. A private
custom gradient that a public function, method or layer of the same module
calls is checked through that caller (named after it, its arguments
blamed); on its own only when named (``::_private`` or a config table). One
that nothing public calls is checked on its own, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradcheck.subjects import find_subjects
from tests.helpers import (
    blamed,
    by_name,
    copy_fixture,
    fixture_module_alone,
    invoke,
    load_copy,
    reports_by_mode,
    run_json,
)

SHIFT = {("native", "shift"), ("numeric", "shift")}
#: name -> the (check, input) pairs blamed, with the config and with none (probed shapes).
VERDICTS: dict[str, set[tuple[str, str | None]]] = {
    "shifted_exp": set(),
    "shifted_exp_wrong": SHIFT,
    "Ops.shifted": set(),
    "Ops.shifted_wrong": SHIFT,
    "Softsign": set(),
    "SoftsignWrong": {("native", "x"), ("numeric", "x")},
    "_orphan_square": set(),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_fixture("private", tmp_path_factory.mktemp("private"))


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module alone, in a folder with no config."""
    return fixture_module_alone("private", tmp_path_factory.mktemp("private_bare"))


@pytest.fixture(scope="module")
def configured(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    return reports_by_mode(str(folder / "private_ops.py"), "-c", str(folder / "gradcheck.toml"))


@pytest.fixture(scope="module")
def probed(bare: Path) -> dict[str, dict[str, dict[str, Any]]]:
    return reports_by_mode(str(bare))


def test_the_private_ones_a_public_caller_reaches_are_not_subjects_of_their_own(bare: Path) -> None:
    subjects = {s.name: s for s in find_subjects(load_copy(bare), bare)}
    assert set(subjects) == set(VERDICTS)
    assert subjects["shifted_exp"].kind.name == "nested function"
    assert subjects["Ops.shifted"].kind.name == "nested method"
    assert subjects["Softsign"].kind.name == "layer"
    assert subjects["_orphan_square"].kind.name == "function"  # no public caller: checked alone


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("how", ["configured", "probed"])
def test_verdicts_through_the_public_caller(
    configured: dict[str, Any], probed: dict[str, Any], mode: str, how: str
) -> None:
    report = (configured if how == "configured" else probed)[mode]
    assert {name: blamed(result) for name, result in report.items()} == VERDICTS
    # The count the private function would fail alone is no problem: its public caller passes shift.
    wrong = report["shifted_exp_wrong"]
    assert {p["input"] for p in wrong["problems"]} == {"shift"}  # the public function's argument
    notes = " ".join(wrong["notes"])
    assert "custom gradient reached: _shifted_exp_wrong (backward at private_ops.py:" in notes


@pytest.mark.parametrize("how", ["configured", "probed"])
def test_shape_only(configured: dict[str, Any], probed: dict[str, Any], how: str) -> None:
    report = (configured if how == "configured" else probed)["shape-only"]
    assert {name: r["status"] for name, r in report.items()} == dict.fromkeys(VERDICTS, "passed")


@pytest.mark.parametrize("execution", ["eager", "function"])
def test_each_execution_mode_alone(folder: Path, execution: str) -> None:
    config = str(folder / "gradcheck.toml")
    report = by_name(run_json(str(folder / "private_ops.py"), "-c", config, "--execution", execution))
    assert {name: blamed(result) for name, result in report.items()} == VERDICTS


def test_named_alone_the_private_function_is_checked_as_written(bare: Path, tmp_path: Path) -> None:
    # Called alone with its default shift, its backward function returns a gradient for shift too.
    (alone,) = run_json(f"{bare}::_shifted_exp")["results"]
    assert alone["status"] == "failed" and blamed(alone) == {("count", None)}
    assert "returned 2 gradients for 1 input" in alone["problems"][0]["message"]
    config = tmp_path / "gradcheck.toml"
    config.write_text("[functions._shifted_exp_wrong]\ninputs = { x = [5], shift = { shape = [] } }\n")
    named = by_name(run_json(str(bare), "-c", str(config)))
    assert set(named) == set(VERDICTS) | {"_shifted_exp_wrong"}
    assert blamed(named["_shifted_exp_wrong"]) == SHIFT


def test_list_shows_the_public_callers_only(bare: Path) -> None:
    listed = invoke("list", str(bare)).stdout
    heads = [line.split("::", 1)[1] for line in listed.splitlines() if "::" in line]
    assert heads == [
        "shifted_exp(x, shift)  [function]",
        "shifted_exp_wrong(x, shift)  [function]",
        "Ops.shifted(x, shift)  [function]",
        "Ops.shifted_wrong(x, shift)  [function]",
        "Softsign(x)  [layer]",
        "SoftsignWrong(x)  [layer]",
        "_orphan_square(x)  [function]",
    ]


def test_init_writes_the_public_callers_tables(bare: Path, tmp_path: Path) -> None:
    written = tmp_path / "gradcheck.toml"
    invoke("init", str(bare), "-o", str(written))
    text = written.read_text()
    assert "[functions.shifted_exp]\ninputs = { x = [3, 4], shift = [3, 4] }  # guessed" in text
    assert "[functions._shifted_exp]" not in text and "[functions._orphan_square]" in text
