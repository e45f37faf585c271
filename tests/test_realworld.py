"""Custom gradients in installed libraries nobody on this project wrote, by dotted module name.

TensorFlow's own ``tf.nn.silu`` (a nested custom gradient) and TensorFlow
Probability's special functions (built on TFP's internal
``custom_gradient(vjp_fwd=..., vjp_bwd=...)`` helper, one behind a
module-level ``tf.function``, one whose forward reaches another custom
gradient). They are correct: a checker that cries wolf on them is switched
off. Importing TFP is slow, so they are checked in one run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import by_name, run_json

pytest.importorskip("tensorflow_probability")

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


@pytest.fixture(scope="module")
def report() -> dict[str, dict[str, Any]]:
    targets = [f"{module}::{name}" for name, module in TARGETS.items()]
    return by_name(run_json(*targets, "-c", str(CONFIG)))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_trusted_libraries_pass(report: dict[str, Any], name: str) -> None:
    result = report[name]
    assert result["status"] == "passed", result["problems"]
    if name in REACHES_NONE:
        assert "custom_gradients" not in result
        assert any("reaches no tf.custom_gradient" in note for note in result["notes"])
    else:
        assert result["custom_gradients"], "the check must have reached the library's custom gradient"


@pytest.mark.parametrize("name", sorted(INNER))
def test_the_inner_function_is_the_users_own(report: dict[str, Any], name: str) -> None:
    reached = report[name]["custom_gradients"]
    assert [item["function"] for item in reached] == [INNER[name]]
    assert reached[0]["backward_line"] > 0


def test_only_the_outermost_custom_gradient_is_switched_off(report: dict[str, Any]) -> None:
    # stdtr's forward and backward reach betainc's custom gradient; it stays on, and is not a target.
    assert len(report["stdtr"]["custom_gradients"]) == 1
    note = next(n for n in report["stdtr"]["notes"] if n.startswith("custom gradient reached"))
    assert "native reference: stdtr with it switched off" in note


def test_swish_needs_no_config() -> None:
    result = run_json("tensorflow.python.ops.nn_impl::swish")["results"][0]
    assert result["status"] == "passed", result["problems"]
    assert result["name"] == "swish" and result["custom_gradients"][0]["function"] == "swish_impl"
