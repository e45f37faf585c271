"""Checking one module changes nothing for the caller or for another module (issue 6, points 3, 4 and 6).

``mutator.py`` changes, at import time and again inside its function, every
piece of global state gradcheck promises to keep: ``sys.path``,
``sys.modules``, the current directory, the environment, the random states
of ``random``, numpy and TensorFlow, TensorFlow's switches (eager mode,
``run_functions_eagerly``, TF32, soft device placement, op determinism,
Keras's ``floatx``) and a variable of its own. ``victim.py``'s function
raises, naming what it finds, when any of that reaches it. The tests run
both, in this process (``session.run``, ``gradcheck.check``) and through the
command line, and compare the state before and after, and the victim's
results alone and after the mutator.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.debug.lib import check_numerics_callback
from tensorflow.python.framework import config as tf_config

import gradcheck
from gradcheck import session
from tests.helpers import by_name, invoke, load_copy, write

MUTATOR = """
    import os
    import random
    import sys
    import types

    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config

    HERE = os.path.dirname(os.path.abspath(__file__))
    counter = tf.Variable(0.0, trainable=False, name="counter")

    def mutate(tag):
        sys.path.append(f"/mutator-was-here/{tag}")
        sys.modules[f"mutator_was_here_{tag}"] = types.ModuleType(f"mutator_was_here_{tag}")
        elsewhere = os.path.join(HERE, "elsewhere")
        os.makedirs(elsewhere, exist_ok=True)
        os.chdir(elsewhere)
        os.environ["MUTATOR_WAS_HERE"] = tag
        random.seed(7)
        np.random.seed(7)
        tf.random.set_seed(7)
        tf.config.run_functions_eagerly(True)
        tf.config.experimental.enable_tensor_float_32_execution(True)
        tf.config.set_soft_device_placement(False)
        tf_config.enable_op_determinism()
        keras.config.set_floatx("float16")
        keras.config.set_dtype_policy("mixed_bfloat16")
        tf.debugging.enable_check_numerics()
        np.seterr(divide="ignore", invalid="ignore")
        counter.assign_add(1.0)

    mutate("import")

    @tf.custom_gradient
    def mutates(x):
        mutate("call")
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""

VICTIM = """
    import os
    import random
    import sys

    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.debug.lib import check_numerics_callback
    from tensorflow.python.eager import context
    from tensorflow.python.framework import config as tf_config

    def leaks():
        found = []
        if any(entry.startswith("/mutator-was-here") for entry in sys.path):
            found.append("sys.path")
        if any(name.startswith("mutator_was_here") for name in sys.modules):
            found.append("sys.modules")
        if os.path.basename(os.getcwd()) == "elsewhere":
            found.append("cwd")
        if "MUTATOR_WAS_HERE" in os.environ:
            found.append("environ")
        if random.getstate() == random.Random(7).getstate():
            found.append("random")
        if np.array_equal(np.random.get_state()[1], np.random.RandomState(7).get_state()[1]):
            found.append("numpy.random")
        if context.global_seed() == 7:
            found.append("tf.random seed")
        if not tf.compat.v1.executing_eagerly_outside_functions():
            found.append("eager mode")
        if tf.config.functions_run_eagerly():
            found.append("run_functions_eagerly")
        if tf.config.experimental.tensor_float_32_execution_enabled():
            found.append("TF32")  # gradcheck turns it off for every check
        if tf.executing_eagerly() and not tf.config.get_soft_device_placement():  # always off in graphs
            found.append("soft device placement")
        if tf_config.is_op_determinism_enabled():
            found.append("op determinism")
        if keras.config.floatx() != "float32":
            found.append("keras floatx")
        if keras.config.dtype_policy().name != "float32":
            found.append("keras dtype policy")
        if hasattr(check_numerics_callback._state, "check_numerics_callback"):
            found.append("check numerics")
        if np.geterr() != {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}:
            found.append("numpy error state")
        return found

    @tf.custom_gradient
    def victim(x):
        found = leaks()
        if found:
            raise RuntimeError(f"leaked into the victim: {', '.join(found)}")
        def grad(dy):
            return 3.0 * x * x * dy
        return x * x * x, grad
"""

CONFIG = "[functions.mutates]\ninputs = { x = [3] }\n[functions.victim]\ninputs = { x = [4] }\n"


@pytest.fixture
def modules(project: Path) -> Path:
    write(project, "mutator.py", MUTATOR)
    write(project, "victim.py", VICTIM)
    write(project, "gradcheck.toml", CONFIG)
    return project


def _state() -> dict[str, Any]:
    """What gradcheck promises to leave as it found it, in comparable form."""
    return {
        "sys.path": list(sys.path),
        "sys.path object": id(sys.path),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "random": random.getstate(),
        "numpy.random": [np.asarray(part).tolist() for part in np.random.get_state()],
        "eager": tf.executing_eagerly(),
        "run_functions_eagerly": tf.config.functions_run_eagerly(),
        "TF32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "soft device placement": tf.config.get_soft_device_placement(),
        "op determinism": tf_config.is_op_determinism_enabled(),
        "keras floatx": keras.config.floatx(),
        "keras dtype policy": keras.config.dtype_policy().name,
        "check numerics": hasattr(check_numerics_callback._state, "check_numerics_callback"),
        "numpy error state": np.geterr(),
    }


def _modules_changed(before: dict[str, Any], project: Path) -> list[str]:
    """Modules replaced or removed, and modules added that are the user's or made by hand."""
    changed = [name for name, module in before.items() if sys.modules.get(name) is not module]
    for name in set(sys.modules) - set(before):
        file = getattr(sys.modules[name], "__file__", None)
        if file is None or str(project) in str(Path(file).resolve()):
            changed.append(name)
    return changed


def test_a_run_in_this_process_leaves_the_global_state_as_it_was(modules: Path) -> None:
    np.random.seed(123)
    random.seed(123)
    tf.config.experimental.enable_tensor_float_32_execution(True)
    state = _state()
    loaded = dict(sys.modules)
    report = session.run(session.RunOptions(targets=("mutator.py", "victim.py")))
    statuses = {r.name: r.status for r in report.results}
    assert statuses == {"mutates": "passed", "victim": "passed"}, [r.problems for r in report.results]
    assert _state() == state
    assert _modules_changed(loaded, modules) == []


def test_tensorflows_random_state_is_as_it_was_after_a_run(modules: Path) -> None:
    tf.random.set_seed(5)
    tf.random.uniform([2])
    expected = tf.random.uniform([4]).numpy().tolist()  # the draw that comes after one draw from seed 5
    tf.random.set_seed(5)
    tf.random.uniform([2])
    session.run(session.RunOptions(targets=("mutator.py", "victim.py")))
    assert tf.random.uniform([4]).numpy().tolist() == expected


def test_the_victim_passes_alone_and_after_the_mutator_with_the_same_report(modules: Path) -> None:
    def entry(*targets: str) -> dict[str, Any]:
        result = invoke("run", *targets, "--format", "json")
        victim = by_name(json.loads(result.stdout))["victim"]
        victim.pop("seconds")
        return victim

    alone = entry("victim.py")
    after = entry("mutator.py", "victim.py")
    assert alone["status"] == "passed", alone["problems"]
    assert after == alone


ENABLES_CHECK_NUMERICS = """
    import tensorflow as tf

    tf.debugging.enable_check_numerics()
"""

WRONG_BELOW_ZERO = """
    import tensorflow as tf

    @tf.custom_gradient
    def root(x):
        y = tf.where(x > 0, tf.sqrt(x), tf.zeros_like(x))  # NaN in the branch not taken
        def grad(dy):
            # Wrong for x <= 0, where the gradient is 0.
            return dy * tf.where(x > 0, 0.5 / tf.sqrt(tf.maximum(x, 1e-30)), tf.ones_like(x))
        return y, grad
"""


def test_a_broken_gradient_fails_alone_and_after_a_module_that_enabled_check_numerics(project: Path) -> None:
    write(project, "a.py", ENABLES_CHECK_NUMERICS)
    write(project, "b.py", WRONG_BELOW_ZERO)
    write(project, "gradcheck.toml", "[functions.root]\ninputs = { x = [6] }\n")
    alone = invoke("run", "b.py", "--format", "json")
    after = invoke("run", "a.py", "b.py", "--format", "json")
    assert alone.exit_code == 1, alone.stdout
    assert after.exit_code == 1, after.stdout
    assert by_name(json.loads(after.stdout))["root"]["status"] == "failed"


SWITCHES_CUSTOM_GRADIENTS_OFF = """
    import tensorflow as tf
    from tensorflow.python.ops import custom_gradient

    def _off(f):
        return lambda *args: f(*args)[0]

    tf.custom_gradient = _off  # a shim that switches every later custom gradient off
    custom_gradient.custom_gradient = _off
"""

WRONG = """
    import tensorflow as tf

    @tf.custom_gradient
    def wrong(x):
        def grad(dy):
            return 3.0 * x * dy
        return x * x, grad
"""


def test_a_module_that_replaces_tf_custom_gradient_hides_no_later_modules_gradients(project: Path) -> None:
    write(project, "shim.py", SWITCHES_CUSTOM_GRADIENTS_OFF)
    write(project, "wrong.py", WRONG)
    write(project, "gradcheck.toml", "[functions.wrong]\ninputs = { x = [3] }\n")
    after = invoke("run", "shim.py", "wrong.py", "--format", "json")
    assert after.exit_code == 1, after.stdout + after.stderr
    assert by_name(json.loads(after.stdout))["wrong"]["status"] == "failed"
    original = tf.custom_gradient
    session.run(session.RunOptions(targets=("shim.py",)))
    assert tf.custom_gradient is original


def test_the_mutators_own_checks_see_what_its_import_set(modules: Path) -> None:
    # Its import seeded numpy: as when the module runs alone, its function starts from that state.
    write(
        modules,
        "seeded.py",
        """
        import numpy as np
        import tensorflow as tf

        np.random.seed(3)
        EXPECTED = np.random.RandomState(3).get_state()[1].tolist()

        @tf.custom_gradient
        def seeded(x):
            if np.random.get_state()[1].tolist() != EXPECTED:
                raise RuntimeError("the import-time seed is gone")
            def grad(dy):
                return 2.0 * x * dy
            return x * x, grad
        """,
    )
    report = session.run(session.RunOptions(targets=("mutator.py", "seeded.py")))
    assert {r.name: r.status for r in report.results} == {"mutates": "passed", "seeded": "passed"}


def test_gradcheck_check_leaves_the_global_state_and_variables_as_they_were(modules: Path) -> None:
    sys.path.insert(0, str(modules))
    try:
        import mutator  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(modules))
        os.chdir(modules)
    try:
        np.random.seed(99)
        tf.config.set_soft_device_placement(True)
        state = _state()
        counter = mutator.counter.numpy()
        result = gradcheck.check(mutator.mutates, inputs={"x": (3,)})
        assert result.status == "passed", result.problems
        assert _state() == state
        assert mutator.counter.numpy() == counter  # the forward pass assigned to it at every call
    finally:
        sys.modules.pop("mutator", None)
        tf.config.run_functions_eagerly(False)
        tf.config.set_soft_device_placement(True)
        tf_config.disable_op_determinism()
        keras.config.set_floatx("float32")


# -- TF32 and devices ---------------------------------------------------------------------

RECORDER = """
    import tensorflow as tf

    SEEN = []

    @tf.custom_gradient
    def records(x):
        # Eager tensors carry the device they are on; inside tf.function, where the call op is
        # placed, tensors carry the device asked for by name (none here).
        SEEN.append((tf.config.experimental.tensor_float_32_execution_enabled(), tf.identity(x).device))
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


@pytest.fixture
def recorder(project: Path) -> Any:
    """The RECORDER module, written into the project and imported (a private copy, not in sys.modules)."""
    return load_copy(write(project, "recorder.py", RECORDER))


@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_is_off_during_checks_and_as_it_was_after(recorder: Any, tf32: bool) -> None:
    saved = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        assert gradcheck.check(recorder.records, inputs={"x": (3,)}).status == "passed"
        assert recorder.SEEN and not any(enabled for enabled, _ in recorder.SEEN)
        assert tf.config.experimental.tensor_float_32_execution_enabled() is tf32
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(saved)


def test_device_cpu_places_the_checks_on_the_cpu(project: Path, recorder: Any) -> None:
    assert gradcheck.check(recorder.records, inputs={"x": (3,)}, device="cpu").status == "passed"
    eager = [device for _, device in recorder.SEEN if device]
    assert eager and all(device.endswith("CPU:0") for device in eager)
    write(project, "gradcheck.toml", "device = 'cpu'\n[functions.records]\ninputs = { x = [3] }\n")
    assert invoke("run", "recorder.py").exit_code == 0
    assert invoke("run", "recorder.py", "--device", "auto").exit_code == 0


def test_check_on_the_gpu_without_one_is_a_usage_error(recorder: Any) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(gradcheck.UsageError, match="device='gpu': TensorFlow sees no GPU"):
        gradcheck.check(recorder.records, inputs={"x": (3,)}, device="gpu")
    assert recorder.SEEN == []


@pytest.mark.skipif(not tf.config.list_physical_devices("GPU"), reason="needs a GPU")
def test_device_gpu_places_the_checks_on_the_gpu(recorder: Any) -> None:
    assert gradcheck.check(recorder.records, inputs={"x": (3,)}, device="gpu").status == "passed"
    eager = [device for _, device in recorder.SEEN if device]
    assert eager and all(device.endswith("GPU:0") for device in eager)


# -- determinism ----------------------------------------------------------------------------

THREE = """
    import tensorflow as tf

    @tf.custom_gradient
    def matmul(a, w):
        def grad(dy):
            return tf.matmul(dy, w, transpose_b=True), tf.matmul(a, dy, transpose_a=True) * 1.01
        return tf.matmul(a, w), grad

    @tf.custom_gradient
    def other(x):
        def grad(dy):
            return tf.cos(x) * dy
        return tf.sin(x), grad

    @tf.custom_gradient
    def guessed(x):
        def grad(dy):
            return -2.0 * x * dy
        return x * x, grad
"""


def _without_times(document: dict[str, Any]) -> dict[str, Any]:
    for result in document["results"]:
        result.pop("seconds")
    return document


def test_same_seed_same_report_across_runs_processes_and_execution_settings_of_other_functions(
    project: Path,
) -> None:
    write(project, "three.py", THREE)
    config = (
        "seed = 11\n[functions.matmul]\ninputs = { a = [4, 3], w = [3, 5] }\n[functions.other]\ninputs = { x = [6] }\n"
    )
    write(project, "gradcheck.toml", config)
    first = invoke("run", "three.py", "--format", "json").stdout
    again = invoke("run", "three.py", "--format", "json").stdout
    assert _without_times(json.loads(first)) == _without_times(json.loads(again))
    assert json.loads(first)["seed"] == 11
    fresh = subprocess.run(
        [sys.executable, "-m", "gradcheck", "run", "three.py", "--format", "json"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert _without_times(json.loads(fresh.stdout)) == _without_times(json.loads(first))
    reference = {r["name"]: r for r in _without_times(json.loads(first))["results"]}
    for execution in ("eager", "function"):
        write(project, "gradcheck.toml", config + f"execution = '{execution}'\n")  # other's table only
        changed = {
            r["name"]: r
            for r in _without_times(json.loads(invoke("run", "three.py", "--format", "json").stdout))["results"]
        }
        assert changed["matmul"] == reference["matmul"]
        assert changed["guessed"] == reference["guessed"]
    header = invoke("run", "three.py").stdout.splitlines()[0]
    assert header.startswith("gradcheck 0.1.0, seed 11,")
