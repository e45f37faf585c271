"""Fast mode's quick first stage (central differences at ``±h``) against the careful stage it stands in for.

The quick stage may only say "agrees", and only where the careful stage
could not say "disagrees": numpy losses with known gradients, made wrong by
various amounts, are judged by both. Then, with real TensorFlow, gradients
wrong by a small relative error still fail in fast mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gradcheck.checking import evidence
from gradcheck.checking.evidence import Evidence
from gradcheck.compare import tolerance
from gradcheck.config import Settings
from gradcheck.finite_differences import one_at_a_time
from gradcheck.harness import Source
from tests.helpers import REPO, by_name, copy_fixture

#: Smooth elementwise functions and their derivatives.
SMOOTH = {
    "sin": (np.sin, np.cos),
    "cube": (lambda x: x**3, lambda x: 3 * x**2),
    "softplus": (lambda x: np.log1p(np.exp(x)), lambda x: 1 / (1 + np.exp(-x))),
    "exp": (np.exp, np.exp),
}
#: Relative errors put into the gradient: from none to plainly wrong.
ERRORS = [0.0, 1e-9, 1e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 1e-3, 1e-2]


def _case(name: str, size: int, seed: int) -> tuple[evidence.JudgingContext, Source, dict, np.ndarray, object]:
    forward, derivative = SMOOTH[name]
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, size=size)
    weights = rng.standard_normal(size)

    def loss(values: dict) -> tuple[float, float]:
        products = weights * forward(values["x"])
        return float(np.sum(products)), float(np.sum(np.abs(products)))

    values = {"x": x}
    context = evidence.JudgingContext(
        Settings(reference="numeric"), f"quick-{name}", float64_references=False, output_size=size
    )
    return context, Source("x", (size,), "float64"), values, weights * derivative(x), one_at_a_time(loss, values)


def _both_stages(name: str, size: int, seed: int, relative: float, elementwise: bool) -> tuple[bool, Evidence]:
    context, source, values, right, losses = _case(name, size, seed)
    rng = np.random.default_rng(seed + 1)
    if elementwise:
        wrong = right * (1 + relative * rng.standard_normal(size))
    else:
        wrong = right.copy()
        wrong[int(rng.integers(size))] += relative * float(np.max(np.abs(right)))
    case = evidence.GradientCase(source, 0, values, wrong, losses, "eager", 1)
    tol = tolerance("float64", "numeric")
    quick = evidence.quick_agreement(context, case, evidence._directions(context, case), tol)
    careful = evidence.projected_evidence(context, case, None, tol, quick=False).verdict
    return quick, careful


@pytest.mark.parametrize("name", sorted(SMOOTH))
@pytest.mark.parametrize("elementwise", [True, False])
def test_quick_agreement_never_hides_what_the_careful_stage_catches(name: str, elementwise: bool) -> None:
    accepted = caught = 0
    for seed in range(4):
        for size in (1, 7, 200):
            for relative in ERRORS:
                quick, careful = _both_stages(name, size, seed, relative, elementwise)
                assert not (quick and careful is Evidence.DISAGREES), (name, seed, size, relative)
                accepted += quick
                caught += careful is Evidence.DISAGREES
    # Both stages had something to say: the quick one is not simply always off.
    assert accepted > 0 and caught > 0


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_quick_agreement_takes_a_right_gradient_and_refuses_one_off_by_1e3(name: str) -> None:
    for seed in range(3):
        assert _both_stages(name, 50, seed, 0.0, elementwise=True)[0]
        quick, careful = _both_stages(name, 50, seed, 1e-3, elementwise=True)
        assert not quick and careful is Evidence.DISAGREES


def test_a_kink_inside_the_step_is_left_to_the_careful_stage() -> None:
    values = {"x": np.array([1e-9, 1.0, -2.0])}
    weights = np.array([1.0, 0.5, 2.0])

    def loss(moved: dict) -> tuple[float, float]:
        products = weights * np.abs(moved["x"])
        return float(np.sum(products)), float(np.sum(np.abs(products)))

    context = evidence.JudgingContext(
        Settings(reference="numeric"), "quick-kink", float64_references=False, output_size=3
    )
    got = weights * np.sign(values["x"])
    case = evidence.GradientCase(Source("x", (3,), "float64"), 0, values, got, one_at_a_time(loss, values), "eager", 1)
    tol = tolerance("float64", "numeric")
    assert not evidence.quick_agreement(context, case, evidence._directions(context, case), tol)


@pytest.mark.parametrize("reference", ["numeric", "both"])
@pytest.mark.parametrize("relative", [1e-3, 1e-4])
def test_a_gradient_off_by_a_small_relative_error_still_fails_in_fast_mode(reference: str, relative: float) -> None:
    import tensorflow as tf

    import gradcheck

    @tf.custom_gradient
    def slightly_wrong(x):  # type: ignore[no-untyped-def]
        def grad(dy):  # type: ignore[no-untyped-def]
            return dy * tf.cos(x) * (1.0 + relative)

        return tf.sin(x), grad

    result = gradcheck.check(slightly_wrong, inputs={"x": (64,)}, dtype="float64", reference=reference)
    assert result.status == "failed"
    assert "numeric" in {problem.check for problem in result.problems}


def _with_numeric_reference(tmp_path: Path, fixture: str) -> Path:
    """A copy of the fixture with ``reference = "numeric"``, so the quick stage is in play for every function
    (where native autodiff disagrees the quick stage is skipped: the default ``both`` would hide it)."""
    folder = copy_fixture(fixture, tmp_path)
    config = folder / "gradcheck.toml"
    config.write_text('reference = "numeric"\n' + config.read_text(encoding="utf-8"), encoding="utf-8")
    return folder


def _rounded(value: Any) -> Any:
    """Floats to 8 digits, inside dicts and lists: one layer's errors differ in the 11th from run to run."""
    if isinstance(value, float):
        return float(f"{value:.8g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items() if key != "seconds"}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def _verdicts(results: dict[str, Any]) -> dict[str, Any]:
    """Every result whole (status, problems, their numbers, hints), timings aside."""
    return {name: _rounded(result) for name, result in results.items()}


#: Started before gradcheck runs, in the command's process and in its worker (which inherit the
#: environment): the careful stage alone, as fast mode was before the quick stage.
CAREFUL_ONLY = """
import gradcheck.checking.evidence as evidence

evidence.quick_agreement = lambda *args: False
"""


def _run_json(folder: Path, sitecustomize: Path | None = None) -> dict[str, Any]:
    """``gradcheck run folder --format json`` as its own process (so its worker is fresh too)."""
    paths = [str(sitecustomize)] if sitecustomize is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(REPO)])}
    command = [sys.executable, "-m", "gradcheck", "run", folder.name, "--format", "json"]
    done = subprocess.run(command, cwd=folder.parent, env=env, capture_output=True, text=True, check=False)
    return by_name(json.loads(done.stdout))


@pytest.mark.parametrize("fixture", ["core", "forms"])
def test_the_failing_fixtures_fail_as_the_careful_stage_alone_makes_them(fixture: str, tmp_path: Path) -> None:
    folder = _with_numeric_reference(tmp_path, fixture)
    patch = tmp_path / "careful_only"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(CAREFUL_ONLY, encoding="utf-8")
    quick = _verdicts(_run_json(folder))
    careful = _verdicts(_run_json(folder, sitecustomize=patch))
    assert quick == careful
    assert sum(result["status"] == "failed" for result in careful.values()) >= 10
