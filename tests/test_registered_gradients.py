"""Gradients registered with tf.RegisterGradient and applied with gradient_override_map (issue 20, item 3).

The fixture module is tests/fixtures/registered/registered_ops.py. Functions
and layers that enter a ``gradient_override_map`` are found as custom-gradient
ones are, run as written, and judged by where TensorFlow 2 applies the
override in each execution mode: in every mode (a map inside a tf.function of
the module's own: the gradient is checked against finite differences), inside
tf.function only (an ``execution`` problem saying why, and the tf.function
gradient checked), or in none (a ``count`` problem: the registered gradient
never runs, as a backward function TensorFlow never calls). A failure is
TensorFlow's gradient differing from finite differences: the hint says so,
and gives the ``reference = "none"`` line for a surrogate on purpose, never a
hint about a backward function the user did not write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gradcheck
from gradcheck.checking import diagnose, verdict
from gradcheck.loss import Draw
from gradcheck.results import Problem
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
    write,
)

LAYERS = ("Reversal", "ReversalWrong", "CapturedReversal")
CONFIG = "".join(
    f"[{'layers' if name in LAYERS else 'functions'}.{name}]\ninputs = {{ x = [3, 4] }}\n\n"
    for name in (
        "square_registered",
        "square_registered_wrong",
        "round_straight_through",
        "square_at_call",
        "square_at_call_wrong",
        "flip_gradient",
        "numpy_square",
        "numpy_square_wrong",
        *LAYERS,
        "square_captured",
        "square_captured_wrong",
        "round_by_floor",
    )
)
Blame = set[tuple[str, str | None, str | None]]
NUMERIC: Blame = {("numeric", "x", None)}
ONLY_IN_FUNCTION = ("execution", None, "eager")
IN_FUNCTION_WRONG = ("numeric", "x", "function")
NEVER: Blame = {("count", None, None)}
# name -> the (check, input, execution) triples blamed in fast and full mode, with the config or none
VERDICTS: dict[str, Blame] = {
    "square_registered": set(),
    "square_registered_wrong": NUMERIC,
    "round_straight_through": NUMERIC,
    "square_at_call": {ONLY_IN_FUNCTION},
    "square_at_call_wrong": {ONLY_IN_FUNCTION, IN_FUNCTION_WRONG},
    "flip_gradient": {ONLY_IN_FUNCTION, IN_FUNCTION_WRONG},
    "numpy_square": {ONLY_IN_FUNCTION},
    "numpy_square_wrong": {ONLY_IN_FUNCTION, IN_FUNCTION_WRONG},
    "Reversal": {ONLY_IN_FUNCTION, IN_FUNCTION_WRONG},
    "ReversalWrong": {ONLY_IN_FUNCTION},
    "square_captured": NEVER,
    "square_captured_wrong": NEVER,
    "CapturedReversal": NEVER,
    "round_by_floor": NEVER,
}
#: What --shape-only still finds: where the registered gradient applies, not what it computes.
SHAPE_ONLY = {name: {p for p in blame if p[0] != "numeric"} for name, blame in VERDICTS.items()}


def _blamed(result: dict[str, Any]) -> Blame:
    return {(p["check"], p["input"], p.get("execution")) for p in result["problems"]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copied = copy_fixture("registered", tmp_path_factory.mktemp("registered"))
    (copied / "gradcheck.toml").write_text(CONFIG, encoding="utf-8")
    return copied


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module alone, in a folder with no config."""
    return fixture_module_alone("registered", tmp_path_factory.mktemp("registered_bare"))


@pytest.fixture(scope="module")
def reports(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    module, config = str(folder / "registered_ops.py"), str(folder / "gradcheck.toml")
    return reports_by_mode(module, "-c", config)


@pytest.fixture(scope="module")
def probed(bare: Path) -> dict[str, dict[str, dict[str, Any]]]:
    return reports_by_mode(str(bare))


def test_each_function_and_layer_that_applies_a_registered_gradient_is_found(bare: Path) -> None:
    subjects = {s.name: s for s in find_subjects(load_copy(bare), bare)}
    assert set(subjects) == set(VERDICTS)  # not the helper py_func, which registers the gradient it is given
    assert {s.kind.name for name, s in subjects.items() if name in LAYERS} == {"registered layer"}
    assert {s.kind.name for name, s in subjects.items() if name not in LAYERS} == {"registered function"}


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("how", ["configured", "probed"])
def test_the_gradient_tensorflow_applies_in_each_mode_is_the_one_checked(
    reports: dict[str, Any], probed: dict[str, Any], mode: str, how: str
) -> None:
    # square_registered_wrong fails only if its registered gradient, not TensorFlow's own Square one, is checked.
    report = (reports if how == "configured" else probed)[mode]
    assert {name: _blamed(result) for name, result in report.items()} == VERDICTS
    for result in report.values():
        assert "custom_gradients" not in result


@pytest.mark.parametrize("how", ["configured", "probed"])
def test_shape_only_finds_where_it_applies(reports: dict[str, Any], probed: dict[str, Any], how: str) -> None:
    report = (reports if how == "configured" else probed)["shape-only"]
    assert {name: _blamed(r) for name, r in report.items()} == SHAPE_ONLY


def test_the_note_names_the_registered_gradient_and_the_modes_checked(reports: dict[str, Any]) -> None:
    (note,) = [n for n in reports["fast"]["square_registered_wrong"]["notes"] if "registered gradient" in n]
    assert note.startswith("registered gradient applied: RegisteredOpsSquareWrong (registered_ops.py:")
    assert note.endswith("checked against finite differences (eagerly and inside tf.function)")
    (note,) = [n for n in reports["fast"]["flip_gradient"]["notes"] if "registered gradient" in n]
    assert note.endswith("checked against finite differences (inside tf.function)")


def test_an_override_that_applies_only_inside_tf_function_says_why(reports: dict[str, Any]) -> None:
    (problem,) = [p for p in reports["fast"]["flip_gradient"]["problems"] if p["check"] == "execution"]
    message = problem["message"]
    assert message.startswith("the gradient registered as RegisteredOps")
    assert "(registered_ops.py:" in message and "applies only inside tf.function" in message
    assert "eagerly, and under a GradientTape inside the same tf.function" in message and "Keras 3's fit" in message
    assert problem["hint"].startswith("to keep it in TensorFlow 2, write it with tf.custom_gradient")


def test_an_override_that_never_applies_is_a_failure_that_says_so(reports: dict[str, Any]) -> None:
    (problem,) = reports["fast"]["CapturedReversal"]["problems"]
    message = problem["message"]
    assert (
        "never runs under GradientTape in eager mode or inside tf.function, so the gradient is TensorFlow's own "
        "for the op: " in message
    )
    assert "eagerly, TensorFlow's tape records each op with the gradient registered for its own type" in message
    assert "inside tf.function, the map is entered on a graph other than the one the op is built in" in message
    assert problem["hint"].startswith("to keep it in TensorFlow 2, write it with tf.custom_gradient")
    assert (problem["expected"], problem["got"]) == (f"the gradient registered as {message.split()[4]}", "never called")
    (floor,) = reports["fast"]["round_by_floor"]["problems"]
    assert floor["message"].startswith("the gradient registered as Identity (mapped onto Floor at registered_ops.py:")
    assert "the block under the map builds no op of the type it names" in floor["message"]


@pytest.mark.parametrize(
    ("execution", "expected"),
    [
        ("eager", {"square_at_call": NEVER, "square_at_call_wrong": NEVER, "square_captured": NEVER}),
        ("function", {"square_at_call": set(), "square_at_call_wrong": NUMERIC, "square_captured": NEVER}),
    ],
)
def test_one_execution_mode_alone(folder: Path, execution: str, expected: dict[str, Blame]) -> None:
    targets = [f"{folder / 'registered_ops.py'}::{name}" for name in expected]
    report = by_name(run_json(*targets, "-c", str(folder / "gradcheck.toml"), "--execution", execution))
    assert {name: {p[:2] + (None,) for p in _blamed(r)} for name, r in report.items()} == expected
    words = "in eager mode" if execution == "eager" else "inside tf.function"
    assert f"never runs under GradientTape {words}" in report["square_captured"]["problems"][0]["message"]


def test_list_and_init_show_them(bare: Path, tmp_path: Path) -> None:
    listed = invoke("list", str(bare)).stdout
    assert "registered_ops.py::flip_gradient(x)  [function]" in listed
    assert "registered_ops.py::Reversal(x)  [layer]" in listed and "::py_func" not in listed
    written = tmp_path / "gradcheck.toml"
    invoke("init", str(bare), "-o", str(written))
    text = written.read_text()
    assert "[functions.flip_gradient]\ninputs = { x = [3, 4] }  # guessed" in text
    assert "[layers.CapturedReversal]\ninputs = { x = [3, 4] }  # guessed" in text


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


def test_gradcheck_check_takes_a_registered_function(bare: Path) -> None:
    module = load_copy(bare)
    flipped = gradcheck.check(module.flip_gradient, inputs={"x": (3, 4)})
    assert {(p.check, p.input, p.execution) for p in flipped.problems} == {ONLY_IN_FUNCTION, IN_FUNCTION_WRONG}
    captured = gradcheck.check(module.square_captured, inputs={"x": (3, 4)})
    assert {(p.check, p.input, p.execution) for p in captured.problems} == NEVER


SIGN_AT_IMPORT = """
import tensorflow as tf


@tf.RegisterGradient("GradcheckTestSignStraightThrough")
def _sign_straight_through(op, grad):
    return grad


@tf.function
def _overridden_sign(x):
    with tf.compat.v1.get_default_graph().gradient_override_map({"Sign": "GradcheckTestSignStraightThrough"}):
        return tf.sign(x)


def sign_straight_through(x):
    return _overridden_sign(x)
"""


def test_registrations_are_put_back_as_other_state_is(tmp_path: Path) -> None:
    # A module-level registration is there for the module's own checks, and importing the module again (a
    # second run in the same process, the same worker) does not raise "Registering two gradient with name".
    path = write(tmp_path, "sign_ops.py", SIGN_AT_IMPORT)
    for _ in range(2):
        (result,) = run_json(str(path), "--shape-only")["results"]
        assert result["status"] == "passed", result["problems"]
        assert "registered gradient applied: GradcheckTestSignStraightThrough" in " ".join(result["notes"])
