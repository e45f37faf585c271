"""Domains: guessed draws that leave the function's domain are narrowed, with a note (issue 10, item 5).

With no config, a normal draw can leave a function's domain without the
forward pass raising or giving NaN at the first draw: a guarded forward pass
whose backward function (and native autodiff, through ``tf.where``'s
gradient) is NaN outside the guard, or an iteration that is chaotic rather
than NaN there, so that finite differences cannot judge it. The check is then
redrawn positive, with a note; a backward function NaN where native autodiff
is finite is the function's own bug and still fails on ``finite``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import gradcheck
from gradcheck.inputs import Argument, CallPlan, TensorSpec
from tests.helpers import FIXTURES, blamed, by_name, load_copy, run_json

DOMAINS = FIXTURES / "domains" / "domains.py"

#: name -> (status, blamed (check, input) pairs, whether the draws were narrowed positive).
EXPECTED: dict[str, tuple[str, set[tuple[str, str | None]], bool]] = {
    "entropy_term": ("passed", set(), True),
    "entropy_term_wrong": ("failed", {("native", "p"), ("numeric", "p")}, True),
    "signed_power": ("failed", {("finite", "x")}, False),
    "newton_sqrt": ("passed", set(), True),
    "newton_sqrt_wrong": ("failed", {("native", "x"), ("numeric", "x")}, True),
}


def _redrawn(notes: Any) -> list[str]:
    return [note for note in notes if "drawn positive" in note]


# -- narrowing a plan (no TensorFlow) --------------------------------------------


def _plan(**specs: TensorSpec) -> CallPlan:
    return CallPlan(tuple(Argument(name, "input", spec, guessed=True) for name, spec in specs.items()))


def test_default_draws_narrow_to_positive_then_the_unit_interval_then_stop() -> None:
    plan = _plan(x=TensorSpec((3,), "float64"), y=TensorSpec((3,), "float64", "positive"))
    first = plan.narrowed()
    assert first is not None and first.step == "positive" and first.names == ("x",)
    assert [a.spec.distribution for a in first.plan.arguments] == ["positive", "positive"]
    second = first.plan.narrowed()
    assert second is not None and second.step == "unit" and second.names == ("x", "y")
    assert {(a.spec.distribution, a.spec.low, a.spec.high) for a in second.plan.arguments} == {("uniform", 0.1, 0.9)}
    assert second.plan.narrowed() is None


def test_draws_the_config_chose_are_never_narrowed() -> None:
    chosen = TensorSpec((3,), "float64", "normal", domain_chosen=True)
    bounded = TensorSpec((3,), "float64", "uniform", -1.0, 1.0)
    integers = TensorSpec((3,), "int32", "integer", 0.0, 3.0)
    assert _plan(x=chosen, y=bounded, i=integers).narrowed() is None


def test_the_config_says_when_it_chose_the_draw() -> None:
    plan = gradcheck.config.parse_input  # the parser, as the config file and gradcheck.check use it
    assert not plan("t", "x", [3, 4], {}).distribution_given
    assert not plan("t", "x", {"shape": [3, 4]}, {}).distribution_given
    assert plan("t", "x", {"shape": [3, 4], "distribution": "normal"}, {}).distribution_given
    assert plan("t", "x", {"shape": [3, 4], "low": -1.0, "high": 1.0}, {}).distribution_given


# -- the fixtures, through the command line and the API --------------------------


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("domains")
    (folder / "gradcheck.toml").write_text("", encoding="utf-8")
    shutil.copy(DOMAINS, folder / "domains.py")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        return {mode: by_name(run_json("domains.py", "--mode", mode)) for mode in ("fast", "full")}


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdicts_with_no_config(reports: dict[str, dict[str, Any]], mode: str, name: str) -> None:
    status, problems, narrowed = EXPECTED[name]
    result = reports[mode][name]
    assert (result["status"], blamed(result)) == (status, problems), result
    notes = _redrawn(result["notes"])
    assert bool(notes) == narrowed, result["notes"]
    if narrowed:
        assert "with normal draws" in notes[0] and "set distribution, low and high in the config" in notes[0]
    assert all(i.get("guessed") for i in result["inputs"])


def test_the_note_says_why(reports: dict[str, dict[str, Any]]) -> None:
    fast = reports["fast"]
    nan = _redrawn(fast["entropy_term"]["notes"])[0]
    assert nan.startswith("p drawn positive: with normal draws the gradient of p was NaN or Inf at ")
    assert "where native autodiff is NaN or Inf too" in nan
    assert "does not vary smoothly" in _redrawn(fast["newton_sqrt"]["notes"])[0]
    assert "does not vary smoothly" in _redrawn(reports["full"]["newton_sqrt"]["notes"])[0]


def test_a_backward_function_nan_where_native_autodiff_is_finite_is_not_redrawn(
    reports: dict[str, dict[str, Any]],
) -> None:
    for mode in ("fast", "full"):
        result = reports[mode]["signed_power"]
        problem = next(p for p in result["problems"] if p["check"] == "finite")
        assert "NaN or Inf" in problem["message"] and "division by zero" in problem["hint"]
        assert not any("drawn" in note for note in result["notes"] if "guessed shapes" not in note)


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_the_api_gives_the_same_verdicts(reports: dict[str, dict[str, Any]], mode: str) -> None:
    module = load_copy(DOMAINS)
    for name in sorted(EXPECTED):
        result = gradcheck.check(getattr(module, name), mode=mode)
        cli = reports[mode][name]
        assert result.status == cli["status"] == EXPECTED[name][0], (name, result.problems)
        assert {(p.check, p.input) for p in result.problems} == blamed(cli), name
        assert list(result.notes) == cli["notes"], name


def test_shape_only_compares_no_values_and_redraws_nothing(project: Path) -> None:
    shutil.copy(DOMAINS, project / "domains.py")
    results = by_name(run_json("domains.py", "--shape-only"))
    assert {name: r["status"] for name, r in results.items()} == dict.fromkeys(EXPECTED, "passed")
    assert not any(_redrawn(r["notes"]) for r in results.values())


# -- configured inputs -----------------------------------------------------------


def test_a_shape_alone_leaves_the_default_draw_to_be_narrowed() -> None:
    module = load_copy(DOMAINS)
    result = gradcheck.check(module.entropy_term, inputs={"p": (3, 4)})
    assert result.status == "passed", result.problems
    assert _redrawn(result.notes)


@pytest.mark.parametrize(
    "draw",
    [{"distribution": "normal"}, {"low": -1.0, "high": 1.0}, {"distribution": "uniform", "low": -2.0, "high": 2.0}],
)
def test_a_configured_draw_is_never_narrowed(draw: dict[str, Any]) -> None:
    module = load_copy(DOMAINS)
    result = gradcheck.check(module.entropy_term, inputs={"p": {"shape": [3, 4], **draw}})
    assert result.status == "failed"
    assert {(p.check, p.input) for p in result.problems} == {("finite", "p")}
    assert not _redrawn(result.notes)


def test_the_config_file_draw_is_never_narrowed(project: Path) -> None:
    shutil.copy(DOMAINS, project / "domains.py")
    (project / "gradcheck.toml").write_text(
        '[functions.newton_sqrt]\ninputs = { x = { shape = [3, 4], distribution = "normal" } }\n', encoding="utf-8"
    )
    result = by_name(run_json("domains.py::newton_sqrt"))["newton_sqrt"]
    assert result["status"] == "failed"
    assert ("native", "x") in blamed(result)
    assert not _redrawn(result.get("notes", []))
