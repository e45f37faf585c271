"""Test helpers: user modules written to files, the real CLI through CliRunner."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner, Result

from gradcheck.cli import main
from gradcheck.finite_differences import BatchedLoss, DirectionalEstimate, directional_derivatives

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """Run ``gradcheck`` in this process, as a user would from the shell (``env``: variables to set or unset)."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env=env)


def write(folder: Path, name: str, text: str) -> Path:
    """Write a dedented file and return its path."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def copy_fixture(name: str, destination: Path) -> Path:
    """Copy a fixture folder from tests/fixtures into ``destination``."""
    target = destination / name
    shutil.copytree(FIXTURES / name, target)
    return target


def fixture_module_alone(name: str, destination: Path) -> Path:
    """The fixture folder ``name``'s module ``name``_ops.py copied alone into ``destination``: no config beside it."""
    module = f"{name}_ops.py"
    shutil.copy(FIXTURES / name / module, destination)
    return destination / module


def directional_derivative(
    losses: BatchedLoss, name: str, direction: np.ndarray, step: float, dtype: str
) -> DirectionalEstimate:
    """Central differences along one ``direction`` at steps ``h`` and ``2h``: one batch of five points."""
    return directional_derivatives(losses, name, [direction], step, dtype)[0]


def run_json(*args: str) -> dict[str, Any]:
    """``gradcheck run ... --format json`` parsed; stdout must hold the document alone."""
    result = invoke("run", *args, "--format", "json")
    return json.loads(result.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's results keyed by function name."""
    return {result["name"]: result for result in report["results"]}


def interrupt_once_started(
    process: subprocess.Popen[str],
    markers: list[Path],
    within: float,
    waiting_for: str,
    signal_number: int = signal.SIGINT,
) -> tuple[str, str]:
    """Ctrl-C ``process`` (or send it ``signal_number``) once every marker file exists (each written by a
    function as it starts), and its stdout and stderr; the process is killed whatever happens."""
    try:
        waited = 0.0
        while not all(marker.exists() for marker in markers):
            assert process.poll() is None, process.communicate()
            assert waited < within, waiting_for
            time.sleep(0.05)
            waited += 0.05
        os.kill(process.pid, signal_number)
        return process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()


def reports_by_mode(*args: str) -> dict[str, dict[str, dict[str, Any]]]:
    """``gradcheck run ARGS`` in fast, full and shape-only mode, each report's results keyed by name."""
    return {
        "fast": by_name(run_json(*args)),
        "full": by_name(run_json(*args, "--mode", "full")),
        "shape-only": by_name(run_json(*args, "--shape-only")),
    }


def blamed(result: dict[str, Any]) -> set[tuple[str, str | None]]:
    """The (check, input) pairs of a result's problems."""
    return {(problem["check"], problem["input"]) for problem in result["problems"]}


#: One function passes, one fails on values (with a heat map), one raises in its backward function.
MIXED = """
    import tensorflow as tf


    @tf.custom_gradient
    def good(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad


    @tf.custom_gradient
    def bad(x):
        def grad(dy):
            return 3.0 * x * dy
        return x * x, grad


    @tf.custom_gradient
    def raises(x):
        def grad(dy):
            raise ValueError("backward is 100% broken: a, b")
        return x * x, grad
"""

#: A custom gradient that accepts no small guessed shape: it is skipped unless configured.
PICKY = """
    import tensorflow as tf


    @tf.custom_gradient
    def picky(x):
        tf.debugging.assert_equal(tf.shape(x), [7, 11])
        def grad(dy):
            return dy
        return tf.identity(x), grad
"""


def load_copy(path: Path) -> Any:
    """A fresh import of a fixture module under a private name, for ``gradcheck.check`` on its objects."""
    spec = importlib.util.spec_from_file_location(f"fixture_copy_{id(path)}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


#: One function of each status: passed, failed, error (the backward function raises) and skipped.
STATUSES = MIXED + PICKY.replace("    import tensorflow as tf\n", "", 1)


#: One right and one wrong custom gradient, as plain module text (the pytest plugin's tests).
GOOD_AND_BAD = """
import tensorflow as tf


@tf.custom_gradient
def square(x):
    def grad(dy):
        return 2.0 * x * dy
    return x * x, grad


@tf.custom_gradient
def cube(x):
    def grad(dy):
        return 2.0 * x * x * dy  # should be 3 x^2
    return x * x * x, grad
"""


def wrong_factors(count: int) -> str:
    """A module of ``count`` custom gradients ``bad0``, ``bad1``, …, each with the wrong factor (3 for 2)."""
    return "import tensorflow as tf\n" + "".join(
        f"""

@tf.custom_gradient
def bad{i}(x):
    def grad(dy):
        return 3.0 * x * dy
    return x * x, grad
"""
        for i in range(count)
    )


#: TF Quant Finance's ``for_loop`` in small: a body function called N times, with a custom gradient
#: nested in it (the product of the steps' slopes), right and wrong (the first step's slope left out).
#: ``seen`` records what each call got for ``body_fn``.
FOR_LOOP = """
    import tensorflow as tf

    seen = []


    def for_loop(body_fn, initial_state, num_iterations):
        seen.append(type(body_fn).__name__)

        @tf.custom_gradient
        def loop(x):
            state, slope = x, tf.ones_like(x)
            for i in range(num_iterations):
                with tf.GradientTape() as tape:
                    tape.watch(state)
                    following = body_fn(i, state)
                slope = slope * tape.gradient(following, state)
                state = following

            def grad(dy):
                return dy * slope

            return state, grad

        return loop(initial_state)


    def for_loop_skipping_the_first_step(body_fn, initial_state, num_iterations):
        @tf.custom_gradient
        def loop(x):
            state, slope = x, tf.ones_like(x)
            for i in range(num_iterations):
                with tf.GradientTape() as tape:
                    tape.watch(state)
                    following = body_fn(i, state)
                if i > 0:
                    slope = slope * tape.gradient(following, state)
                state = following

            def grad(dy):
                return dy * slope

            return state, grad

        return loop(initial_state)
"""

BODIES = """
    import tensorflow as tf


    def step(i, x):
        return tf.sin(x) + 0.5 * x


    class Steps:
        @staticmethod
        def cubic(i, x):
            return x * x * x / 4.0 + x
"""
