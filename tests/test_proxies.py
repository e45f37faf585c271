"""Surrogate gradients checked against their proxies (issue 21).

tests/fixtures/surrogates holds a clipped straight-through sign (its wrong
twin's mask inverted), straight-through rounding, gradient reversal (its
twin lost the sign), gradient scaling by an argument and by a factor written
into the code, and Keras layers that reach each of them through a kernel.
Its gradcheck.toml declares each function's proxy; the layers use them
without a line of their own, except one whose custom gradient is made in
its own call, which declares its own. The references then take the forward value and
the proxy's derivative: the right twins pass, the wrong ones fail on ``x``
alone (a layer's kernel gradient uses the forward value and passes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gradcheck
from gradcheck.checking import surrogates
from tests.helpers import FIXTURES, blamed, by_name, copy_fixture, invoke, load_copy, reports_by_mode, run_json, write

RIGHT = {
    "ste_sign",
    "st_round",
    "reverse_gradient",
    "scale_gradient",
    "tenth_reversal",
    "clipped_sign",
    "SignDense",
    "QuantDense",
    "RoundDense",
    "ReversalDense",
    "TenthReversalDense",
    "NestedReversal",
}
WRONG = {f"{name}_wrong" if name[0].islower() else f"{name}Wrong" for name in RIGHT}
#: Where each wrong twin is blamed: on x alone, by both references.
ON_X = {("native", "x"), ("numeric", "x")}
INVERTED = "inverted mask"
HINTS = {
    "ste_sign_wrong": INVERTED,
    "clipped_sign_wrong": INVERTED,
    "SignDenseWrong": INVERTED,
    "QuantDenseWrong": INVERTED,
    "reverse_gradient_wrong": "wrong sign",
    "ReversalDenseWrong": "wrong sign",
    "tenth_reversal_wrong": "wrong sign",
    "TenthReversalDenseWrong": "wrong sign",
    "scale_gradient_wrong": "4 times the expected one",
    "NestedReversalWrong": "wrong sign",
}
#: Without proxies: the line each recognised surrogate's hint gives.
LINES = {
    "ste_sign": '[functions.ste_sign] proxy = "gradcheck.proxies:hard_tanh"',
    "clipped_sign": '[functions.clipped_sign] proxy = "gradcheck.proxies:hard_tanh"',
    "st_round": '[functions.st_round] proxy = "gradcheck.proxies:identity"',
    "reverse_gradient": '[functions.reverse_gradient] proxy = "gradcheck.proxies:negation"',
    "scale_gradient": '[functions.scale_gradient] proxy = "gradcheck.proxies:scale";',
    "tenth_reversal": '[functions.tenth_reversal] proxy = "gradcheck.proxies:scale", constants = { scale = -0.1 }',
    "NestedReversal": '[layers.NestedReversal] proxy = "gradcheck.proxies:negation"',
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_fixture("surrogates", tmp_path_factory.mktemp("surrogates"))


@pytest.fixture(scope="module")
def reports(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    return reports_by_mode(str(folder / "surrogate_ops.py"), "-c", str(folder / "gradcheck.toml"))


@pytest.fixture(scope="module")
def undeclared(folder: Path) -> dict[str, dict[str, Any]]:
    """The same run with every proxy line (and the proxy's own constants) left out."""
    text = (folder / "gradcheck.toml").read_text()
    kept = [line for line in text.splitlines() if not line.startswith("proxy") and "scale = -0.1" not in line]
    config = folder / "undeclared.toml"
    config.write_text("\n".join(kept) + "\n")
    return by_name(run_json(str(folder / "surrogate_ops.py"), "-c", str(config)))


@pytest.fixture(scope="module")
def ops() -> Any:
    return load_copy(FIXTURES / "surrogates" / "surrogate_ops.py")


def _hints(result: dict[str, Any]) -> set[str]:
    return {problem["hint"] or "" for problem in result["problems"]}


def test_every_surrogate_is_found(reports: dict[str, Any]) -> None:
    assert set(reports["fast"]) == RIGHT | WRONG


@pytest.mark.parametrize("mode", ["fast", "full", "shape-only"])
def test_the_right_surrogates_pass_against_their_proxies(reports: dict[str, Any], mode: str) -> None:
    for name in RIGHT:
        result = reports[mode][name]
        assert result["status"] == "passed", (name, result["problems"])


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_the_wrong_ones_fail_on_the_surrogates_input_alone(reports: dict[str, Any], mode: str) -> None:
    for name in WRONG:
        assert reports[mode][name]["status"] == "failed", name
        # A layer's kernel gradient uses the surrogate's forward value: it passes.
        assert blamed(reports[mode][name]) == ON_X, name


def test_a_shape_audit_does_not_compare_values(reports: dict[str, Any]) -> None:
    assert {name: r["status"] for name, r in reports["shape-only"].items()} == dict.fromkeys(RIGHT | WRONG, "passed")


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_the_hint_says_how_the_gradient_differs_from_the_proxys(reports: dict[str, Any], mode: str) -> None:
    for name, fragment in HINTS.items():
        hints = _hints(reports[mode][name])
        assert hints and all(fragment in hint for hint in hints), (name, hints)
        assert all('reference = "none"' not in hint for hint in hints), name


def test_the_report_names_the_proxies_used(reports: dict[str, Any]) -> None:
    notes = reports["fast"]["QuantDense"]["notes"]
    assert any("ste_sign -> gradcheck.proxies:hard_tanh" in note for note in notes)
    notes = reports["fast"]["tenth_reversal"]["notes"]
    assert any("surrogate gradient checked against its proxy" in note for note in notes)


@pytest.mark.parametrize("execution", ["eager", "function"])
def test_each_execution_checks_against_the_proxy(ops: Any, execution: str) -> None:
    inputs = {"x": {"shape": [4, 5], "low": -2.0, "high": 2.0}}
    right = gradcheck.check(ops.clipped_sign, inputs, proxy="gradcheck.proxies:hard_tanh", execution=execution)
    assert right.status == "passed", right.problems
    wrong = gradcheck.check(ops.clipped_sign_wrong, inputs, proxy="gradcheck.proxies:hard_tanh", execution=execution)
    assert {(p.check, p.input) for p in wrong.problems} == ON_X
    layer = gradcheck.check(ops.QuantDense, inputs, proxy={"ste_sign": "gradcheck.proxies:hard_tanh"})
    assert layer.status == "passed", layer.problems


def test_the_python_api_takes_a_proxy_function_and_its_constants(ops: Any) -> None:
    def tenth_reversed(x: Any, scale: float) -> Any:
        return scale * x

    result = gradcheck.check(ops.tenth_reversal, {"x": (3, 4)}, proxy=tenth_reversed, constants={"scale": -0.1})
    assert result.status == "passed", result.problems
    assert any("tenth_reversed" in note for note in result.notes)
    wrong = gradcheck.check(ops.tenth_reversal_wrong, {"x": (3, 4)}, proxy=tenth_reversed, constants={"scale": -0.1})
    assert wrong.status == "failed"
    # Without a proxy the surrogate fails against the forward pass's own derivative, as before.
    assert gradcheck.check(ops.tenth_reversal, {"x": (3, 4)}).status == "failed"


def test_float32_surrogates_take_float64_references_with_the_proxy(ops: Any) -> None:
    inputs = {"x": {"shape": [4, 5], "low": -2.0, "high": 2.0}}
    result = gradcheck.check(ops.ste_sign, inputs, proxy="gradcheck.proxies:hard_tanh", dtype="float32")
    assert result.status == "passed", result.problems
    assert any("evaluated in float64" in note for note in result.notes)


def test_a_proxy_stands_for_the_derivative_not_the_value(ops: Any) -> None:
    # The kernel's gradient of sign(x) @ kernel is sign(x)^T dy: with the proxy's value instead
    # (hard_tanh(x)), every kernel gradient would fail.
    inputs = {"x": {"shape": [6, 5], "low": -3.0, "high": 3.0}}
    result = gradcheck.check(ops.SignDense, inputs, proxy={"clipped_sign": "gradcheck.proxies:hard_tanh"}, mode="full")
    assert result.status == "passed", result.problems


# -- hints without proxies ------------------------------------------------------------------


def test_a_recognised_surrogate_gets_its_proxy_line(undeclared: dict[str, Any]) -> None:
    for name, line in LINES.items():
        hints = _hints(undeclared[name])
        assert hints and all(line in hint for hint in hints), (name, hints)
        # The shape audit is the last resort, after the line.
        assert all(hint.index(line) < hint.index('reference = "none"') for hint in hints), name


def test_an_inverted_clip_is_told_apart_from_a_clip(undeclared: dict[str, Any]) -> None:
    for name in ("ste_sign_wrong", "clipped_sign_wrong"):
        hints = _hints(undeclared[name])
        assert all("keeps the upstream gradient where |x| >= 1" in hint for hint in hints), hints
        assert all("proxies:hard_tanh" not in hint for hint in hints)


def test_a_layer_is_told_to_declare_the_proxy_in_its_surrogates_table(undeclared: dict[str, Any]) -> None:
    hints = _hints(undeclared["SignDense"])
    assert all("[functions.clipped_sign]" in hint and "every layer reaching it uses" in hint for hint in hints)
    hints = _hints(undeclared["QuantDense"])
    assert all("[functions.ste_sign]" in hint for hint in hints), hints


def test_following_the_hints_passes(folder: Path, undeclared: dict[str, Any]) -> None:
    tables = []
    for name, line in LINES.items():
        table, _, declared = line.rstrip(";").partition(" ")
        proxy, _, constants = declared.partition(", ")
        if name == "scale_gradient":  # the function's own scale, which the proxy takes as its second argument
            constants = "constants = { scale = 0.5 }"
        shape = "{ shape = [4, 5], low = -2.0, high = 2.0 }" if "sign" in name else "[4, 5]"
        tables.append(f"{table}\ninputs = {{ x = {shape} }}\n{proxy}\n{constants}")
    config = folder / "hinted.toml"
    config.write_text("\n\n".join(tables) + "\n")
    targets = [str(folder / f"surrogate_ops.py::{name}") for name in LINES]
    report = by_name(run_json(*targets, "-c", str(config)))
    assert {name: r["status"] for name, r in report.items()} == dict.fromkeys(LINES, "passed"), report


def test_a_surrogate_fitting_no_pattern_is_told_a_proxy_can_be_declared(undeclared: dict[str, Any]) -> None:
    hints = _hints(undeclared["st_round_wrong"])
    assert all('proxy = "module:function" in [functions.st_round_wrong]' in hint for hint in hints), hints


def test_gradcheck_init_writes_the_proxy_lines(folder: Path, tmp_path: Path) -> None:
    write(tmp_path, "surrogate_ops.py", (folder / "surrogate_ops.py").read_text())
    result = invoke("init", str(tmp_path / "surrogate_ops.py"), "-o", str(tmp_path / "starter.toml"))
    assert result.exit_code == 0, result.output
    text = (tmp_path / "starter.toml").read_text()
    tables = {block.split("]", 1)[0]: block for block in text.split("\n[")[1:]}
    assert 'proxy = "gradcheck.proxies:hard_tanh"' in tables["functions.ste_sign"]
    assert 'proxy = "gradcheck.proxies:identity"' in tables["functions.st_round"]
    assert 'proxy = "gradcheck.proxies:negation"' in tables["functions.reverse_gradient"]
    assert "constants = { scale = -0.1 }" in tables["functions.tenth_reversal"]
    # Not surrogates by their pattern: the inverted clip, and layers (their proxies live in function tables).
    assert "proxy" not in tables["functions.ste_sign_wrong"] and "proxy" not in tables["layers.SignDense"]
    report = by_name(run_json(str(tmp_path / "surrogate_ops.py"), "-c", str(tmp_path / "starter.toml")))
    for name in (
        "ste_sign",
        "st_round",
        "reverse_gradient",
        "tenth_reversal",
        "clipped_sign",
        "SignDense",
        "QuantDense",
    ):
        assert report[name]["status"] == "passed", (name, report[name]["problems"])


# -- bad proxies ----------------------------------------------------------------------------

PROXIES = """
    import tensorflow as tf

    def two(x, y):
        return x

    def total(x):
        return tf.reduce_sum(x)

    def pair(x):
        return x, x

    def raises(x):
        raise RuntimeError("no proxy today")

    def single(x):
        return tf.cast(x, tf.float32)
"""


@pytest.mark.parametrize(
    ("proxy", "fragments"),
    [
        ("two", ["proxy proxies:two cannot take the arguments clipped_sign is called with", "'y'"]),
        (
            "total",
            ["proxy proxies:total returns a float64 tensor of shape ()", "returns a float64 tensor of shape (4, 5)"],
        ),
        ("pair", ["proxy proxies:pair returns tuple of 2 outputs where clipped_sign returns one output"]),
        ("raises", ["proxy proxies:raises raised RuntimeError: no proxy today"]),
        ("single", ["proxy proxies:single returns a float32 tensor", "a float64 tensor"]),
    ],
)
def test_a_proxy_that_cannot_stand_for_its_function_is_an_error_naming_it(
    folder: Path, tmp_path: Path, proxy: str, fragments: list[str]
) -> None:
    write(tmp_path, "proxies.py", PROXIES)
    write(tmp_path, "ops.py", (folder / "surrogate_ops.py").read_text())
    tables = f'[functions.clipped_sign]\ninputs = {{ x = [4, 5] }}\nproxy = "proxies:{proxy}"\n'
    write(tmp_path, "gradcheck.toml", tables + "[layers.SignDense]\ninputs = { x = [4, 5] }\n")
    for target, mode in (
        ("clipped_sign", "--shape-only"),
        ("clipped_sign", "--mode=fast"),
        ("SignDense", "--mode=full"),
    ):
        report = run_json(str(tmp_path / f"ops.py::{target}"), "-c", str(tmp_path / "gradcheck.toml"), mode)
        (result,) = report["results"]
        assert result["status"] == "error", result
        (problem,) = result["problems"]
        assert problem["check"] == "exception"
        for fragment in fragments:
            assert fragment in problem["message"], problem["message"]
        assert "Exception encountered" not in problem["message"]  # Keras's wrapping of errors in call()


# -- the pieces ---------------------------------------------------------------------------


def test_shipped_proxies_have_the_derivatives_they_stand_for() -> None:
    import tensorflow as tf

    from gradcheck import proxies

    x = tf.constant([-2.0, -0.5, 0.3, 1.5], dtype=tf.float64)
    expected = {
        proxies.identity: [1, 1, 1, 1],
        proxies.negation: [-1, -1, -1, -1],
        proxies.hard_tanh: [0, 1, 1, 0],
        lambda v: proxies.clip(v, 0.4): [0, 0, 1, 0],
        lambda v: proxies.clip(v, bound=1.0, low=0.0): [0, 0, 1, 0],
        lambda v: proxies.scale(v, -0.1): [-0.1, -0.1, -0.1, -0.1],
    }
    for proxy, derivative in expected.items():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = proxy(x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), derivative)
        assert y.dtype == x.dtype


def test_a_clip_is_read_from_the_mask_and_the_drawn_values() -> None:
    x = np.array([-2.0, -0.7, -0.2, 0.1, 0.45, 0.6, 1.5])
    assert surrogates.clip_bound(x, np.abs(x) <= 1) == ("<=", 1.0, None)
    assert surrogates.clip_bound(x, np.abs(x) <= 0.5) == ("<=", 0.5, None)
    assert surrogates.clip_bound(x, np.abs(x) >= 1) == (">=", 1.0, None)
    assert surrogates.clip_bound(x, (x >= 0) & (x <= 1)) == ("<=", 1.0, 0.0)
    assert surrogates.clip_bound(x, x > 0.5) is None  # one-sided: no clip of x
    assert surrogates.clip_bound(x, np.ones(7, dtype=bool)) is None


def test_a_proxy_choice_fits_the_function_it_is_written_for() -> None:
    one = surrogates.Declaring("[functions.f]")
    assert surrogates.proxy_choice("unchanged", one, None, None) == surrogates.ProxyChoice("identity")
    assert surrogates.proxy_choice("scaled by -0.3", one, None, None) == surrogates.ProxyChoice(
        "scale", (("scale", -0.3),)
    )
    taking = surrogates.Declaring("[functions.f]", second=("factor", -0.3), positional=2)
    assert surrogates.proxy_choice("scaled by -0.3", taking, None, None) == surrogates.ProxyChoice("scale")
    other = surrogates.Declaring("[functions.f]", second=("axis", 1), positional=2)
    assert surrogates.proxy_choice("scaled by -0.3", other, None, None) is None  # its second argument is no scale
    x = np.array([-2.0, -0.2, 0.3, 0.8])
    kept = np.abs(x) <= 0.5
    assert surrogates.proxy_choice("where a mask keeps it", one, x, kept).line("[functions.f]") == (
        '[functions.f] proxy = "gradcheck.proxies:clip", constants = { bound = 0.5 }'
    )


def test_an_inverted_mask_is_read_against_the_proxys_derivative() -> None:
    upstream = np.arange(1.0, 7.0)
    kept = np.array([1, 1, 0, 0, 1, 0], dtype=bool)
    hint = surrogates.inverted_mask_hint(upstream * ~kept, upstream * kept, "p:q")
    assert hint is not None and "p:q" in hint
    assert surrogates.inverted_mask_hint(upstream * kept, upstream * kept, "p:q") is None
    assert surrogates.inverted_mask_hint(0.5 * upstream, upstream, "p:q") is None
