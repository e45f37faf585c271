"""Named functions that reach no tf.custom_gradient: TensorFlow's own (registered) gradient, and its hint.

The fixture module is tests/fixtures/registered/registered_ops.py: gradients
registered for an op type with ``gradient_override_map`` inside a
``tf.function``, a right one, a wrong one and a straight-through surrogate.
Such a function is checked only when named, against finite differences alone,
with its code run as written (the registered gradient applies only then). A
failure is TensorFlow's own gradient differing from finite differences: the
hint says so, and gives the ``reference = "none"`` line for a surrogate on
purpose, never a hint about a backward function the user did not write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradcheck.checking import diagnose, verdict
from gradcheck.loss import Draw
from gradcheck.results import Problem
from tests.helpers import blamed, copy_fixture, invoke, reports_by_mode, run_json

CONFIG = """
[functions.square_registered]
inputs = { x = [3, 4] }

[functions.square_registered_wrong]
inputs = { x = [3, 4] }

[functions.round_straight_through]
inputs = { x = [3, 4] }
"""
NUMERIC = {("numeric", "x")}
# name -> the (check, input) pairs blamed in fast and full mode
VERDICTS: dict[str, set[tuple[str, str | None]]] = {
    "square_registered": set(),
    "square_registered_wrong": NUMERIC,
    "round_straight_through": NUMERIC,
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copied = copy_fixture("registered", tmp_path_factory.mktemp("registered"))
    (copied / "gradcheck.toml").write_text(CONFIG, encoding="utf-8")
    return copied


@pytest.fixture(scope="module")
def reports(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    module, config = str(folder / "registered_ops.py"), str(folder / "gradcheck.toml")
    return reports_by_mode(module, "-c", config)


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_the_registered_gradient_is_the_one_checked(reports: dict[str, Any], mode: str) -> None:
    # square_registered_wrong fails only if its registered gradient, not TensorFlow's own Square one, is checked.
    got = {name: blamed(result) for name, result in reports[mode].items()}
    assert got == VERDICTS
    for result in reports[mode].values():
        assert any("reaches no tf.custom_gradient" in note for note in result["notes"])
        assert "custom_gradients" not in result


def test_shape_only_audits_and_passes(reports: dict[str, Any]) -> None:
    assert {name: r["status"] for name, r in reports["shape-only"].items()} == dict.fromkeys(VERDICTS, "passed")


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("name", ["square_registered_wrong", "round_straight_through"])
def test_the_hint_says_it_is_tensorflows_own_gradient(reports: dict[str, Any], mode: str, name: str) -> None:
    (problem,) = reports[mode][name]["problems"]
    hint = problem["hint"]
    assert f"{name} reaches no tf.custom_gradient: this is TensorFlow's own gradient" in hint
    assert "gradient_override_map" in hint and "register surrogate gradients on purpose" in hint
    assert hint.endswith(f'set reference = "none": [functions.{name}] reference = "none"')
    # No hint written for custom gradients: there is no backward function of the user's to fix.
    assert "backward function" not in hint and "passed through" not in hint


def test_following_the_hint_passes_the_surrogate(folder: Path) -> None:
    config = folder / "none.toml"
    config.write_text('[functions.round_straight_through]\ninputs = { x = [3, 4] }\nreference = "none"\n')
    result = run_json(str(folder / "registered_ops.py::round_straight_through"), "-c", str(config))["results"][0]
    assert result["status"] == "passed", result["problems"]


def test_a_registered_surrogate_is_checked_against_its_proxy(folder: Path) -> None:
    # round(x) * 3 with the identity registered for Round: it stands for the derivative of 3x.
    target = str(folder / "registered_ops.py::round_straight_through")
    for proxy, status in (
        ('"gradcheck.proxies:scale"\nconstants = { scale = 3.0 }', "passed"),
        ('"gradcheck.proxies:identity"', "failed"),
    ):
        config = folder / "proxy.toml"
        config.write_text(f"[functions.round_straight_through]\ninputs = {{ x = [3, 4] }}\nproxy = {proxy}\n")
        for mode in ("fast", "full"):
            result = run_json(target, "-c", str(config), "--mode", mode)["results"][0]
            assert result["status"] == status, (proxy, mode, result["problems"])
            assert status == "passed" or blamed(result) == {("numeric", "x")}


def test_the_text_report_shows_the_hint(folder: Path) -> None:
    text = invoke(
        "run", str(folder / "registered_ops.py::round_straight_through"), "-c", str(folder / "gradcheck.toml")
    ).stdout
    assert "hint: round_straight_through reaches no tf.custom_gradient" in text
    assert '[functions.round_straight_through] reference = "none"' in text


def test_unreliable_finite_differences_of_tensorflows_own_gradient_do_not_suggest_native() -> None:
    # reference = "native" cannot help a function that reaches no custom gradient: native is the gradient judged.
    unreliable = Problem(
        "numeric", "x", "finite differences were unreliable", hint=verdict.UNRELIABLE_HINT, reason="unreliable-numeric"
    )
    rerun = diagnose.Rerun(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        Draw({}, []),
        subject_name="stepped",
        numeric_only_table="[functions.stepped]",
    )
    (hinted,) = diagnose.with_hints([unreliable], {}, rerun)
    assert 'reference = "native"' not in hinted.hint
    assert "away from the kink" in hinted.hint and '[functions.stepped] reference = "none"' in hinted.hint
    # Problems the audit found keep their own hints.
    shape = Problem("shape", "x", "wrong shape", hint="a missing transpose?")
    assert diagnose.with_hints([shape], {}, rerun) == [shape]
