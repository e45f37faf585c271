"""Custom gradients in installed libraries nobody on this project wrote, by dotted module name.

TensorFlow's own ``tf.nn.silu`` (a nested custom gradient) and TensorFlow
Probability's special functions (built on TFP's internal
``custom_gradient(vjp_fwd=..., vjp_bwd=...)`` helper, one behind a
module-level ``tf.function``, one whose forward reaches another custom
gradient). They are correct: a checker that cries wolf on them is switched
off. Importing TFP is slow, so they are checked in one run. larq's
quantizers are surrogate gradients on purpose, written against Keras 2: they
are checked in a process of their own under ``TF_USE_LEGACY_KERAS=1``, which
changes ``tf.keras`` for the whole process it is set in.

TFP imports only with ``tf_keras``, and larq only with ``tf_keras`` under
legacy Keras; ``tf-keras`` requires the full ``tensorflow`` wheel rather
than ``tensorflow-cpu``, so the README's test command installs it (and larq)
with ``--no-deps``, and TFP comes with the ``test`` extras. Where they are
missing the tests that need them are skipped, saying what is missing,
except on CI, where the test command installed them and a missing one is a
broken install: there they fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import by_name, run_json

CONFIG = Path(__file__).parent / "realworld" / "gradcheck.toml"
TARGETS = {
    "swish": "tensorflow.python.ops.nn_impl",
    "lambertw": "tensorflow_probability.python.math.special",
    "log_cosh": "tensorflow_probability.python.math.generic",
    "lbeta": "tensorflow_probability.python.math.special",
    "log_gamma_difference": "tensorflow_probability.python.math.special",
    "owens_t": "tensorflow_probability.python.math.special",
    "erfcx": "tensorflow_probability.python.math.special",
    "stdtr": "tensorflow_probability.python.distributions.student_t",
    "fake_quant_with_min_max_vars": "keras.src.quantizers.quantizers",
    "bessel_ive": "tensorflow_probability.python.math.bessel",
    "log_bessel_kve": "tensorflow_probability.python.math.bessel",
}
#: Named explicitly, reaching no tf.custom_gradient (TF's registered op gradient): checked anyway.
REACHES_NONE = {"fake_quant_with_min_max_vars"}
#: The user's forward function each one reaches (TFP's helper: its vjp_fwd, not the helper's closure).
INNER = {
    "swish": "swish_impl",
    "lambertw": "_lambert_fwd",
    "lbeta": "_lbeta_fwd",
    "stdtr": "_stdtr_fwd",
}


#: What the README's test command installs for these tests, for the skip messages.
INSTALL = "the README's test command installs it (tensorflow-probability from the test extras, tf-keras with --no-deps)"
#: On CI the test command has installed every package these tests need: a missing one fails, never skips.
ON_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")


def _tfp_missing() -> str | None:
    """Why TensorFlow Probability cannot be used here, or None where it imports."""
    try:
        import tensorflow_probability  # noqa: F401
    except ImportError as error:
        return f"tensorflow_probability does not import ({error}); {INSTALL}"
    return None


def _larq_missing() -> str | None:
    """Why larq cannot be used here, or None where it and tf-keras are installed.

    Found without importing: larq imports only under legacy Keras, which
    must not be switched on in this process.
    """
    absent = [name for name in ("larq", "tf_keras") if importlib.util.find_spec(name) is None]
    if absent:
        return (
            f"{' and '.join(absent)} not installed; the README's test command installs larq and tf-keras with --no-deps"
        )
    return None


TFP_MISSING = _tfp_missing()
LARQ_MISSING = _larq_missing()


def _needs(module: str) -> bool:
    return module.startswith("tensorflow_probability")


def _skip_unless(missing: str | None) -> pytest.MarkDecorator:
    """Skip where ``missing`` says what is absent, except on CI (where the test then fails with it)."""
    return pytest.mark.skipif(missing is not None and not ON_CI, reason=missing or "")


def _require(missing: str | None) -> None:
    """Fail with what is missing: reached only on CI, where the test is not skipped."""
    if missing is not None:
        pytest.fail(f"{missing} (CI runs every real-package test)")


def _config_for(names: set[str], folder: Path) -> Path:
    """The config's tables for ``names`` only: a table naming a function no target defines is an error."""
    tables = re.split(r"(?m)^(?=\[functions\.)", CONFIG.read_text(encoding="utf-8"))
    kept = [table for table in tables[1:] if re.match(r"\[functions\.(\w+)\]", table).group(1) in names]
    path = folder / "gradcheck.toml"
    path.write_text(tables[0] + "".join(kept), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if ON_CI:
        _require(TFP_MISSING)
    usable = {name: module for name, module in TARGETS.items() if TFP_MISSING is None or not _needs(module)}
    config = _config_for(set(usable), tmp_path_factory.mktemp("realworld"))
    return by_name(run_json(*(f"{module}::{name}" for name, module in usable.items()), "-c", str(config)))


def _target(name: str) -> Any:
    return pytest.param(name, marks=_skip_unless(TFP_MISSING if _needs(TARGETS[name]) else None))


@pytest.mark.parametrize("name", [_target(name) for name in sorted(TARGETS)])
def test_trusted_libraries_pass(report: dict[str, Any], name: str) -> None:
    result = report[name]
    assert result["status"] == "passed", result["problems"]
    if name in REACHES_NONE:
        assert "custom_gradients" not in result
        assert any("reaches no tf.custom_gradient" in note for note in result["notes"])
    else:
        assert result["custom_gradients"], "the check must have reached the library's custom gradient"


@pytest.mark.parametrize("name", [_target(name) for name in sorted(INNER)])
def test_the_inner_function_is_the_users_own(report: dict[str, Any], name: str) -> None:
    reached = report[name]["custom_gradients"]
    assert [item["function"] for item in reached] == [INNER[name]]
    assert reached[0]["backward_line"] > 0


@_skip_unless(TFP_MISSING)
def test_only_the_outermost_custom_gradient_is_switched_off(report: dict[str, Any]) -> None:
    # stdtr's forward and backward reach betainc's custom gradient; it stays on, and is not a target.
    assert len(report["stdtr"]["custom_gradients"]) == 1
    note = next(n for n in report["stdtr"]["notes"] if n.startswith("custom gradient reached"))
    assert "native reference: stdtr with it switched off" in note


def test_swish_needs_no_config() -> None:
    result = run_json("tensorflow.python.ops.nn_impl::swish")["results"][0]
    assert result["status"] == "passed", result["problems"]
    assert result["name"] == "swish" and result["custom_gradients"][0]["function"] == "swish_impl"


@_skip_unless(TFP_MISSING)
def test_lambertw_needs_no_config_and_is_drawn_positive(project: Path) -> None:
    _require(TFP_MISSING)
    # Normal draws fall below Lambert W's branch point -1/e, where the forward pass is NaN or
    # meaningless and native autodiff NaN or far off: the check is redrawn positive, and says why.
    result = run_json("tensorflow_probability.python.math.special::lambertw")["results"][0]
    assert result["status"] == "passed", result["problems"]
    note = next(n for n in result["notes"] if "drawn positive" in n)
    assert note.startswith("z drawn positive: with normal draws ")
    assert "left the function's domain" in note


@_skip_unless(TFP_MISSING)
def test_bessel_ive_without_config_says_how_to_declare_its_order_a_constant() -> None:
    _require(TFP_MISSING)
    # TFP returns no gradient for the order v on purpose; the hint gives the config that passes above.
    result = run_json("tensorflow_probability.python.math.bessel::bessel_ive")["results"][0]
    assert result["status"] == "failed"
    assert {p["input"] for p in result["problems"]} == {"v"}
    assert all("constants = { v = ... }" in p["hint"] for p in result["problems"])


def test_ctc_loss_needs_no_config() -> None:
    # Guessed labels start at 1 (0 is the blank), and in float32 the projections cannot resolve native
    # autodiff's rounding-level difference from TensorFlow's own CTC gradient: element-wise finite
    # differences agree with the custom gradient, so fast mode passes as full mode does, with a note.
    result = run_json("tensorflow.python.ops.ctc_ops::ctc_loss_dense")["results"][0]
    assert result["status"] == "passed", result["problems"]
    assert result["custom_gradients"][0]["function"] == "compute_ctc_loss"
    assert any("below what finite differences resolve" in note for note in result["notes"])


LARQ_CONFIG = Path(__file__).parent / "realworld" / "larq.toml"
#: larq 0.14's quantizer functions, each a nested or module-level custom gradient.
LARQ_FUNCTIONS = {"ste_sign", "approx_sign", "swish_sign", "ste_tern", "ste_heaviside"}
#: Its quantizer layers (tf_keras layers), each reaching one of them; the DoReFaQuantizer alias left out.
LARQ_LAYERS = {"SteSign", "ApproxSign", "SteHeaviside", "SwishSign", "MagnitudeAwareSign", "SteTern", "DoReFa"}
#: The ones larq.toml declares surrogates (reference = "none").
LARQ_DECLARED = {"approx_sign", "swish_sign", "ste_tern", "SteSign"}
#: Straight-through estimators: the gradient is dy where |x| <= clip_value, the forward's derivative 0.
LARQ_STRAIGHT_THROUGH = {"ste_sign", "ste_heaviside", "SteHeaviside", "SteTern", "DoReFa"}


@pytest.fixture(scope="module")
def larq_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``gradcheck run larq.quantizers`` as a larq user runs it: a process of its own under legacy Keras."""
    _require(LARQ_MISSING)
    # Legacy Keras must be chosen before TensorFlow is first imported, and it changes tf.keras for
    # the whole process: this process has Keras 3 already, so the check runs in a child.
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "gradcheck", "run", "larq.quantizers", "--format", "json", "-c", str(LARQ_CONFIG)]
    done = subprocess.run(
        command, cwd=tmp_path_factory.mktemp("larq"), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1, done.stderr[-3000:]  # the undeclared surrogates fail
    report = json.loads(done.stdout)
    assert report["exit_code"] == 1
    return by_name(report)


@_skip_unless(LARQ_MISSING)
def test_larq_quantizers_are_found_under_legacy_keras(larq_report: dict[str, dict[str, Any]]) -> None:
    assert {name for name, result in larq_report.items() if result["kind"] == "function"} == LARQ_FUNCTIONS
    assert {name for name, result in larq_report.items() if result["kind"] == "layer"} >= LARQ_LAYERS
    # Each nested one is checked through its public function, with the custom gradient it makes.
    for name in LARQ_FUNCTIONS - {"approx_sign"}:
        assert [item["function"] for item in larq_report[name]["custom_gradients"]] == ["_call"], name


@_skip_unless(LARQ_MISSING)
def test_larq_surrogates_fail_until_declared_and_say_why(larq_report: dict[str, dict[str, Any]]) -> None:
    for name in LARQ_DECLARED:
        result = larq_report[name]
        assert result["status"] == "passed", (name, result["problems"])
        assert any(note.startswith('reference = "none"') for note in result["notes"]), name
    for name in (LARQ_FUNCTIONS | LARQ_LAYERS) - LARQ_DECLARED:
        result = larq_report[name]
        assert result["status"] == "failed", name
        assert {problem["check"] for problem in result["problems"]} == {"native", "numeric"}, name
    for name in LARQ_STRAIGHT_THROUGH:
        hints = [problem["hint"] or "" for problem in larq_report[name]["problems"]]
        assert all("a clipped pass-through" in hint and 'reference = "none"' in hint for hint in hints), (name, hints)


#: A user's copy of larq 0.14's ste_sign with its clip mask inverted (less_equal -> greater_equal).
LARQ_INVERTED = """
import tensorflow as tf
from larq import math


def _clipped_gradient(x, dy, clip_value):
    if clip_value is None:
        return dy
    zeros = tf.zeros_like(dy)
    mask = tf.math.greater_equal(tf.math.abs(x), clip_value)
    return tf.where(mask, dy, zeros)


def ste_sign(x, clip_value=1.0):
    @tf.custom_gradient
    def _call(x):
        def grad(dy):
            return _clipped_gradient(x, dy, clip_value)

        return math.sign(x), grad

    return _call(x)
"""


@pytest.fixture(scope="module")
def larq_proxied(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``gradcheck run larq.quantizers`` with the proxies its hints give, beside a copy whose mask is inverted."""
    _require(LARQ_MISSING)
    folder = tmp_path_factory.mktemp("larq_proxied")
    for name in ("larq_proxies.toml", "larq_proxies.py"):
        (folder / name).write_text((LARQ_CONFIG.parent / name).read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "inverted.py").write_text(LARQ_INVERTED, encoding="utf-8")
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "gradcheck", "run", "larq.quantizers", "inverted.py", "--format", "json"]
    done = subprocess.run(
        [*command, "-c", str(folder / "larq_proxies.toml")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(done.stdout or "{}")
    assert done.returncode == 1, done.stderr[-3000:]  # the inverted copy fails
    return {_larq_key(result): result for result in report["results"]}


def _larq_key(result: dict[str, Any]) -> str:
    """A result's name, ``inverted:NAME`` for the user's inverted copy (larq defines the same names)."""
    return ("inverted:" if result["id"].split("::")[0].endswith("inverted.py") else "") + result["name"]


@_skip_unless(LARQ_MISSING)
def test_larq_passes_with_the_proxies_its_hints_give(larq_proxied: dict[str, dict[str, Any]]) -> None:
    for name in LARQ_FUNCTIONS | LARQ_LAYERS:
        result = larq_proxied[name]
        assert result["status"] == "passed", (name, result["problems"])
    assert any("ste_sign -> gradcheck.proxies:hard_tanh" in note for note in larq_proxied["SteSign"]["notes"])


@_skip_unless(LARQ_MISSING)
def test_a_copy_of_larqs_ste_sign_with_its_mask_inverted_fails_on_x(larq_proxied: dict[str, dict[str, Any]]) -> None:
    result = larq_proxied["inverted:ste_sign"]
    assert {(problem["check"], problem["input"]) for problem in result["problems"]} == {
        ("native", "x"),
        ("numeric", "x"),
    }
    assert all("inverted mask" in (problem["hint"] or "") for problem in result["problems"])


# -- whole packages by name, as a new user runs them from an empty folder -----------------------

TFMOT_MISSING = (
    None
    if importlib.util.find_spec("tensorflow_model_optimization")
    else ("tensorflow_model_optimization not installed; the README's test command installs it with --no-deps")
)
TQF_MISSING = (
    None
    if importlib.util.find_spec("tf_quant_finance")
    else ("tf_quant_finance not installed; the test extras install it")
)


def _run_package(folder: Path, *args: str, **environment: str) -> dict[str, Any]:
    """``gradcheck run ARGS --format json`` in a fresh process from ``folder``, as the command line runs."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **environment}
    command = [sys.executable, "-m", "gradcheck", "run", *args, "--format", "json"]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1, 5), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["exit_code"] == done.returncode
    return report


@_skip_unless(LARQ_MISSING)
def test_larq_by_package_name_checks_its_quantizers_and_the_alias_once(tmp_path: Path) -> None:
    _require(LARQ_MISSING)
    report = _run_package(tmp_path, "larq", "--shape-only", TF_USE_LEGACY_KERAS="1")
    results = by_name(report)
    assert {name for name, r in results.items() if r["kind"] == "function"} == LARQ_FUNCTIONS
    assert {name for name, r in results.items() if r["kind"] == "layer"} == LARQ_LAYERS
    assert "DoReFaQuantizer" not in results  # larq's alias: DoReFaQuantizer = DoReFa
    assert "checked once: the module also names it DoReFaQuantizer" in results["DoReFa"]["notes"]
    assert report["collection"]["scanned"]["count"] > 20 and report["collection"]["failed"]["count"] == 0


@_skip_unless(TFMOT_MISSING)
def test_model_optimization_by_package_name_finds_its_clustering_methods_under_any_hash_seed(tmp_path: Path) -> None:
    _require(TFMOT_MISSING)
    reports = [
        _run_package(tmp_path, "tensorflow_model_optimization", "--shape-only", PYTHONHASHSEED=seed)
        for seed in ("0", "1", "7")
    ]
    assert {report["exit_code"] for report in reports} == {0}
    for report in reports:
        names = sorted(r["name"] for r in report["results"])
        assert names == [
            "ClusteringAlgorithm.add_gradient_to_original_weight",
            "ClusteringAlgorithm.average_centroids_gradient_by_cluster_size",
        ]
        # Skipped until the constructor's tf.Variable is given: the hint says where.
        assert all("init = { clusters_centroids = ... }" in r["skip_reason"] for r in report["results"])


@_skip_unless(TQF_MISSING)
def test_tf_quant_finance_by_package_name_reaches_for_loop_and_checks_it_with_an_imported_body(
    tmp_path: Path,
) -> None:
    _require(TQF_MISSING)
    protobuf = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    [skipped] = _run_package(tmp_path, "tf_quant_finance", "-k", "for_loop", **protobuf)["results"]
    assert skipped["status"] == "skipped"
    assert 'body_fn = { import = "your_module:body_fn" }' in skipped["skip_reason"]
    (tmp_path / "bodies.py").write_text(
        "import tensorflow as tf\n\n\ndef body(i, state):\n    return [tf.sin(s) * 2.0 for s in state]\n",
        encoding="utf-8",
    )
    (tmp_path / "gradcheck.toml").write_text(
        "[functions.for_loop]\n"
        'constants = { body_fn = { import = "bodies:body" }, num_iterations = 3, params = [] }\n'
        "inputs = { initial_state = { items = [[4, 2], [4, 2]] } }\n",
        encoding="utf-8",
    )
    [checked] = _run_package(tmp_path, "tf_quant_finance", "-k", "for_loop", **protobuf)["results"]
    assert checked["status"] == "passed", checked["problems"]
