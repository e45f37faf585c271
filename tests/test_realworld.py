"""Custom gradients in installed libraries nobody on this project wrote, by dotted module name.

TensorFlow's own ``tf.nn.silu`` (a nested custom gradient) and TensorFlow
Probability's special functions (built on TFP's internal
``custom_gradient(vjp_fwd=..., vjp_bwd=...)`` helper, one behind a
module-level ``tf.function``, one whose forward reaches another custom
gradient). They are correct: a checker that cries wolf on them is switched
off. Importing TFP is slow, so they are checked in one run.

TensorFlow and Keras come with gradcheck's own install, so their targets run
everywhere. TFP needs ``tf_keras``, which depends on the full ``tensorflow``
wheel rather than ``tensorflow-cpu``; its targets run where it is installed
(``pip install tensorflow-probability`` and ``pip install --no-deps tf-keras``)
and are skipped elsewhere.
"""

from __future__ import annotations

import re
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


def _has_tfp() -> bool:
    try:
        import tensorflow_probability  # noqa: F401
    except ImportError:
        return False
    return True


HAS_TFP = _has_tfp()


def _needs(module: str) -> bool:
    return module.startswith("tensorflow_probability")


def _config_for(names: set[str], folder: Path) -> Path:
    """The config's tables for ``names`` only: a table naming a function no target defines is an error."""
    tables = re.split(r"(?m)^(?=\[functions\.)", CONFIG.read_text(encoding="utf-8"))
    kept = [table for table in tables[1:] if re.match(r"\[functions\.(\w+)\]", table).group(1) in names]
    path = folder / "gradcheck.toml"
    path.write_text(tables[0] + "".join(kept), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    usable = {name: module for name, module in TARGETS.items() if HAS_TFP or not _needs(module)}
    config = _config_for(set(usable), tmp_path_factory.mktemp("realworld"))
    return by_name(run_json(*(f"{module}::{name}" for name, module in usable.items()), "-c", str(config)))


def _target(name: str) -> Any:
    needs_tfp = _needs(TARGETS[name]) and not HAS_TFP
    return pytest.param(name, marks=pytest.mark.skipif(needs_tfp, reason="tensorflow_probability is not installed"))


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


@pytest.mark.skipif(not HAS_TFP, reason="tensorflow_probability is not installed")
def test_only_the_outermost_custom_gradient_is_switched_off(report: dict[str, Any]) -> None:
    # stdtr's forward and backward reach betainc's custom gradient; it stays on, and is not a target.
    assert len(report["stdtr"]["custom_gradients"]) == 1
    note = next(n for n in report["stdtr"]["notes"] if n.startswith("custom gradient reached"))
    assert "native reference: stdtr with it switched off" in note


def test_swish_needs_no_config() -> None:
    result = run_json("tensorflow.python.ops.nn_impl::swish")["results"][0]
    assert result["status"] == "passed", result["problems"]
    assert result["name"] == "swish" and result["custom_gradients"][0]["function"] == "swish_impl"


@pytest.mark.skipif(not HAS_TFP, reason="tensorflow_probability is not installed")
def test_lambertw_needs_no_config_and_is_drawn_positive(project: Path) -> None:
    # Normal draws fall below Lambert W's branch point -1/e, where the forward pass is NaN or
    # meaningless and native autodiff NaN or far off: the check is redrawn positive, and says why.
    result = run_json("tensorflow_probability.python.math.special::lambertw")["results"][0]
    assert result["status"] == "passed", result["problems"]
    note = next(n for n in result["notes"] if "drawn positive" in n)
    assert note.startswith("z drawn positive: with normal draws ")
    assert "left the function's domain" in note


@pytest.mark.skipif(not HAS_TFP, reason="tensorflow_probability is not installed")
def test_bessel_ive_without_config_says_how_to_declare_its_order_a_constant() -> None:
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
