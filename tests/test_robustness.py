"""Faults in the user's code are results, not crashes; nothing hangs, nothing is lost (issue 6, points 2 and 5).

Each fault a user's function can have is one test: what it raises, returns,
allocates, or whether it returns at all. Time and memory bounds are tested
through the real worker process (``gradcheck run`` checks in one), with
functions that really sleep, spin inside a TensorFlow op, allocate or end
the process; Ctrl-C through a real ``gradcheck`` subprocess.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gradcheck
from gradcheck import worker
from tests.helpers import blamed, by_name, interrupt_once_started, invoke, load_copy, run_json, write

FAULTS = """
    import sys

    import numpy as np
    import tensorflow as tf

    @tf.custom_gradient
    def forward_raises(x):
        raise ValueError("the forward pass is broken")

    @tf.custom_gradient
    def backward_raises(x):
        def grad(dy):
            raise RuntimeError("the backward pass is broken")
        return x * x, grad

    @tf.custom_gradient
    def returns_a_string(x):
        def grad(dy):
            return "2 * x * dy"
        return x * x, grad

    @tf.custom_gradient
    def returns_numpy_of_the_wrong_shape(x):
        def grad(dy):
            return np.ones((2, 2))
        return x * x, grad

    @tf.custom_gradient
    def returns_a_list_one_short(x, y):
        def grad(dy):
            return [dy * y]
        return x * y, grad

    @tf.custom_gradient
    def returns_a_list_of_numbers(x):
        def grad(dy):
            return [1.0, 2.0]
        return x * x, grad

    @tf.custom_gradient
    def returns_int_tensor(x):
        def grad(dy):
            return tf.constant([1, 2, 3])
        return x * x, grad

    @tf.custom_gradient
    def nan_output(x):
        def grad(dy):
            return dy / (2.0 * tf.sqrt(x))
        return tf.sqrt(x - 10.0), grad

    @tf.custom_gradient
    def calls_sys_exit(x):
        sys.exit(4)

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""

FAULTS_CONFIG = """
[functions.returns_a_list_one_short]
inputs = { x = [3], y = [3] }
"""
for _name in (
    "forward_raises",
    "backward_raises",
    "returns_a_string",
    "returns_numpy_of_the_wrong_shape",
    "returns_a_list_of_numbers",
    "returns_int_tensor",
    "nan_output",
    "calls_sys_exit",
    "square",
):
    FAULTS_CONFIG += f"[functions.{_name}]\ninputs = {{ x = [3] }}\n"


@pytest.fixture
def faults(project: Path) -> Path:
    write(project, "faults.py", FAULTS)
    write(project, "gradcheck.toml", FAULTS_CONFIG)
    return project


def _one(name: str) -> dict[str, Any]:
    report = run_json(f"faults.py::{name}")
    assert report["exit_code"] == 1
    return by_name(report)[name]


def _line_of(fragment: str) -> int:
    """The line of ``fragment`` in faults.py as written (dedented, as ``write`` writes it)."""
    lines = textwrap.dedent(FAULTS).lstrip().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if fragment in line)


def test_forward_that_raises_is_an_error_showing_the_users_line(faults: Path) -> None:
    result = _one("forward_raises")
    assert result["status"] == "error"
    problem = result["problems"][0]
    assert problem["check"] == "exception"
    line = _line_of("the forward pass is broken")
    assert f"faults.py:{line}" in problem["message"]
    assert "ValueError: the forward pass is broken" in problem["message"]
    assert problem["line"] == line


def test_backward_that_raises_is_an_error_showing_the_users_line(faults: Path) -> None:
    result = _one("backward_raises")
    assert result["status"] == "error"
    assert {p["check"] for p in result["problems"]} == {"exception"}
    message = result["problems"][0]["message"]
    assert f"faults.py:{_line_of('the backward pass is broken')}" in message
    assert "RuntimeError: the backward pass is broken" in message


def test_backward_returning_a_string_is_a_dtype_problem_without_value_checks(faults: Path) -> None:
    result = _one("returns_a_string")
    assert result["status"] == "failed"
    assert blamed(result) == {("dtype", "x")}
    problem = result["problems"][0]
    assert problem["got"] == "str" and "not a tensor" in problem["message"]


def test_backward_returning_numpy_of_the_wrong_shape_is_a_shape_problem(faults: Path) -> None:
    result = _one("returns_numpy_of_the_wrong_shape")
    assert result["status"] == "failed"
    assert blamed(result) == {("shape", "x")}
    problem = result["problems"][0]
    assert (problem["expected"], problem["got"]) == ("(3,)", "(2, 2)")


def test_backward_returning_a_list_one_short_is_a_count_problem(faults: Path) -> None:
    result = _one("returns_a_list_one_short")
    assert result["status"] == "failed"
    assert blamed(result) == {("count", None)}
    assert (result["problems"][0]["expected"], result["problems"][0]["got"]) == ("2", "1")


def test_backward_returning_a_python_list_of_numbers_is_a_count_problem(faults: Path) -> None:
    # TensorFlow reads a list as one gradient per input: two numbers are two gradients for one input.
    result = _one("returns_a_list_of_numbers")
    assert result["status"] == "failed"
    assert blamed(result) == {("count", None)}
    assert (result["problems"][0]["expected"], result["problems"][0]["got"]) == ("1", "2")


def test_backward_returning_an_integer_tensor_is_a_dtype_problem(faults: Path) -> None:
    result = _one("returns_int_tensor")
    assert ("dtype", "x") in blamed(result)
    problem = next(p for p in result["problems"] if p["check"] == "dtype")
    assert (problem["expected"], problem["got"]) == ("float64", "int32")


def test_nan_in_the_forward_output_is_reported_and_values_not_compared(faults: Path) -> None:
    result = _one("nan_output")
    assert result["status"] == "failed"
    assert blamed(result) == {("finite", None)}
    assert "NaN or Inf" in result["problems"][0]["message"]


def test_sys_exit_in_the_users_code_is_an_error_not_the_end_of_the_run(faults: Path) -> None:
    result = _one("calls_sys_exit")
    assert result["status"] == "error"
    assert result["problems"][0]["check"] == "exception"
    assert "sys.exit(4)" in result["problems"][0]["message"]


def test_every_function_is_checked_whatever_the_others_do(faults: Path) -> None:
    report = run_json("faults.py")
    statuses = {name: result["status"] for name, result in by_name(report).items()}
    assert len(statuses) == 10
    assert statuses["square"] == "passed"
    assert statuses["forward_raises"] == statuses["backward_raises"] == statuses["calls_sys_exit"] == "error"
    assert report["exit_code"] == 1


BASE_EXCEPTIONS = """
    import tensorflow as tf

    class Unusual(BaseException):
        pass

    @tf.custom_gradient
    def forward_interrupts(x):
        raise KeyboardInterrupt

    @tf.custom_gradient
    def backward_interrupts(x):
        def grad(dy):
            raise KeyboardInterrupt("from the backward pass")
        return x * x, grad

    @tf.custom_gradient
    def raises_a_base_exception(x):
        raise Unusual("not an Exception")

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


def test_a_keyboard_interrupt_or_base_exception_from_the_users_code_is_an_error_result(project: Path) -> None:
    write(project, "base.py", BASE_EXCEPTIONS)
    names = ("forward_interrupts", "backward_interrupts", "raises_a_base_exception", "square")
    write(project, "gradcheck.toml", "".join(f"[functions.{n}]\ninputs = {{ x = [3] }}\n" for n in names))
    result = invoke("run", "base.py", "--format", "json")
    assert result.exit_code == 1, result.stderr
    results = by_name(json.loads(result.stdout))
    assert {name: results[name]["status"] for name in names} == {
        "forward_interrupts": "error",
        "backward_interrupts": "error",
        "raises_a_base_exception": "error",
        "square": "passed",
    }
    assert "KeyboardInterrupt" in results["forward_interrupts"]["problems"][0]["message"]
    assert "from the backward pass" in results["backward_interrupts"]["problems"][0]["message"]
    assert "Unusual: not an Exception" in results["raises_a_base_exception"]["problems"][0]["message"]
    assert "Traceback" not in result.stderr


def test_a_keyboard_interrupt_at_import_is_a_usage_error(project: Path) -> None:
    write(project, "stops.py", "import tensorflow as tf\nraise KeyboardInterrupt\n")
    result = invoke("run", "stops.py")
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradcheck: error: stops.py:2")
    assert "KeyboardInterrupt" in lines[0]


ODD_GLOBALS = """
    import tensorflow as tf
    from tensorflow.python.util.lazy_loader import LazyLoader

    optional = LazyLoader("optional", globals(), "a_dependency_that_is_not_installed")

    class Touchy:
        def __getattr__(self, name):
            raise RuntimeError(f"nobody may ask for {name}")

        def __call__(self, *args):
            return args

    touchy = Touchy()

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


def test_discovery_triggers_no_lazy_import_and_survives_any_object(project: Path) -> None:
    write(project, "odd.py", ODD_GLOBALS)
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    result = invoke("run", "odd.py", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert list(by_name(json.loads(result.stdout))) == ["square"]


RAISES_ON_FLOAT_ERRORS = """
    import numpy as np
    import tensorflow as tf

    np.seterr(all="raise")

    @tf.custom_gradient
    def tiny(x):
        def grad(dy):
            return dy * 1e-160
        return x * 1e-160, grad
"""


def test_numpy_raising_on_float_errors_in_a_module_changes_no_verdict(project: Path) -> None:
    write(project, "strict.py", RAISES_ON_FLOAT_ERRORS)
    write(
        project,
        "after.py",
        RAISES_ON_FLOAT_ERRORS.replace("def tiny(", "def tiny_after(").replace('np.seterr(all="raise")', ""),
    )
    write(
        project,
        "gradcheck.toml",
        "[functions.tiny]\ninputs = { x = [8] }\n[functions.tiny_after]\ninputs = { x = [8] }\n",
    )
    result = invoke("run", "strict.py", "after.py", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert {r["name"]: r["status"] for r in report["results"]} == {"tiny": "passed", "tiny_after": "passed"}


def test_gradchecks_arithmetic_runs_under_its_own_numpy_error_state(project: Path) -> None:
    with np.errstate():  # the module's np.seterr must not outlive the test
        module = load_copy(write(project, "strict.py", RAISES_ON_FLOAT_ERRORS))
    with np.errstate(all="raise"):  # as a caller's conftest may set it
        result = gradcheck.check(module.tiny, inputs={"x": (8,)})
        assert np.geterr()["under"] == "raise"
    assert result.status == "passed", result.problems


UNPRINTABLE = """
    import tensorflow as tf

    class Mute(Exception):
        def __str__(self):
            raise RuntimeError("no message for you")

        __repr__ = __str__

    @tf.custom_gradient
    def forward_mute(x):
        raise Mute()

    @tf.custom_gradient
    def backward_mute(x):
        def grad(dy):
            raise Mute()
        return x * x, grad

    @tf.custom_gradient
    def probed_mute(x):
        raise Mute()
"""


def test_an_exception_whose_str_and_repr_raise_is_described_by_its_type_and_line(project: Path) -> None:
    write(project, "mute.py", UNPRINTABLE)
    write(
        project,
        "gradcheck.toml",
        "[functions.forward_mute]\ninputs = { x = [3] }\n[functions.backward_mute]\ninputs = { x = [3] }\n",
    )
    result = invoke("run", "mute.py", "--format", "json")
    assert result.exit_code == 1, result.stdout + result.stderr
    results = by_name(json.loads(result.stdout))
    assert results["forward_mute"]["status"] == results["backward_mute"]["status"] == "error"
    assert results["probed_mute"]["status"] in ("error", "skipped")
    for name in ("forward_mute", "backward_mute"):
        message = results[name]["problems"][0]["message"]
        assert "Mute" in message and "mute.py:" in message, message


CLOSES_DESCRIPTORS = """
    import os

    import tensorflow as tf

    CLOSED = []

    @tf.custom_gradient
    def closes_its_streams(x):
        if not CLOSED:  # once: a second os.close(1) of its own would raise
            CLOSED.append(True)
            os.close(1)
            os.close(2)
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def prints(x):
        print("printed after the streams were closed", flush=True)
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def closes_every_descriptor(x):
        os.closerange(3, 65536)
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            return 3.0 * x * x * dy
        return x * x * x, grad
"""


def test_descriptors_the_users_code_closes_are_put_back_and_no_traceback_shows(project: Path) -> None:
    write(project, "fds.py", CLOSES_DESCRIPTORS)
    names = ("closes_its_streams", "prints", "closes_every_descriptor", "cube")
    write(project, "gradcheck.toml", "".join(f"[functions.{n}]\ninputs = {{ x = [3] }}\n" for n in names))
    result = invoke("run", "fds.py", "--format", "json")
    assert result.exit_code == 1, result.stdout + result.stderr
    results = by_name(json.loads(result.stdout))
    assert {name: results[name]["status"] for name in names} == {
        "closes_its_streams": "passed",
        "prints": "passed",
        "closes_every_descriptor": "error",
        "cube": "passed",
    }
    assert "printed after the streams were closed" in result.stderr
    assert "file descriptors" in results["closes_every_descriptor"]["problems"][0]["message"]
    assert "Traceback" not in result.stderr


EMPTY_AND_HUGE = """
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([0, 2], tf.float64)])
    @tf.custom_gradient
    def empty(x):
        def grad(dy):
            return 3.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def huge(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


def test_a_zero_size_input_compares_nothing_and_is_skipped_with_the_reason(project: Path) -> None:
    write(project, "edges.py", EMPTY_AND_HUGE)
    write(project, "gradcheck.toml", "[functions.huge]\ninputs = { x = [3] }\n")
    result = _by_name_of("edges.py")["empty"]
    assert result["status"] == "skipped", result
    assert "size 0" in result["skip_reason"] and "(0, 2)" in result["skip_reason"]


def test_an_input_too_large_to_draw_is_blamed_on_the_config_not_the_forward_pass(project: Path) -> None:
    write(project, "edges.py", EMPTY_AND_HUGE)
    write(project, "gradcheck.toml", "[functions.huge]\ninputs = { x = [100000, 100000, 100] }\n")
    result = _by_name_of("edges.py", "-k", "huge")["huge"]
    assert result["status"] == "error", result
    (problem,) = result["problems"]
    assert "too large to draw" in problem["message"] and "[functions.huge]" in problem["message"]
    assert "(100000, 100000, 100)" in problem["message"] and "forward pass" not in problem["message"]


def _by_name_of(*args: str) -> dict[str, dict[str, Any]]:
    result = invoke("run", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.stdout + result.stderr
    return by_name(json.loads(result.stdout))


# -- functions that never return, allocate without bound, or end the process ------------------

SLOW = """
    import os
    import time

    import numpy as np
    import tensorflow as tf

    @tf.custom_gradient
    def quick(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def sleeps(x):
        time.sleep(60)
        def grad(dy):
            return dy
        return x, grad

    @tf.function
    def _forever(x):
        i = tf.constant(0)
        while tf.constant(True):  # autograph: a tf.while_loop op that never ends
            i += 1
        return x * tf.cast(i, x.dtype)

    @tf.custom_gradient
    def spins(x):
        def grad(dy):
            return dy
        return _forever(x), grad

    @tf.custom_gradient
    def hogs_memory(x):
        blocks = [np.ones(25_000_000) for _ in range(30)]  # 200 MB at a time, 6 GB in all
        time.sleep(60)
        def grad(dy):
            return dy
        return x + float(len(blocks)), grad

    NAPPED = []

    @tf.custom_gradient
    def naps_once(x):
        if not NAPPED:
            NAPPED.append(True)
            time.sleep(2)
        def grad(dy):
            return dy
        return x, grad

    @tf.custom_gradient
    def ends_the_process(x):
        os._exit(7)

    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            return 3.0 * x * x * dy
        return x * x * x, grad
"""


SLOW_NAMES = ("quick", "sleeps", "spins", "hogs_memory", "naps_once", "ends_the_process", "cube")


@pytest.fixture
def slow(project: Path) -> Path:
    write(project, "slow.py", SLOW)
    write(project, "gradcheck.toml", "".join(f"[functions.{name}]\ninputs = {{ x = [3] }}\n" for name in SLOW_NAMES))
    return project


def test_a_function_that_sleeps_past_the_timeout_is_an_error_and_the_run_goes_on(slow: Path) -> None:
    report = run_json("slow.py::quick", "slow.py::sleeps", "slow.py::cube", "--timeout", "3")
    results = by_name(report)
    assert list(results) == ["quick", "sleeps", "cube"]
    assert results["quick"]["status"] == "passed" and results["cube"]["status"] == "passed"
    sleeps = results["sleeps"]
    assert sleeps["status"] == "error"
    assert [p["check"] for p in sleeps["problems"]] == ["exception"]
    assert sleeps["problems"][0]["message"].startswith("timeout: the check did not finish within 3 s")
    assert report["exit_code"] == 1


def test_a_hung_tensorflow_op_is_stopped_by_the_timeout_from_the_config(slow: Path) -> None:
    config = (slow / "gradcheck.toml").read_text()
    write(slow, "gradcheck.toml", config.replace("[functions.spins]\n", "[functions.spins]\ntimeout = 2\n"))
    report = run_json("slow.py::spins", "slow.py::cube")
    assert report["exit_code"] == 1
    results = by_name(report)
    assert results["spins"]["status"] == "error"
    assert "timeout: the check did not finish within 2 s" in results["spins"]["problems"][0]["message"]
    assert results["cube"]["status"] == "passed"


def test_a_function_that_allocates_past_the_memory_bound_is_an_error_and_the_run_goes_on(slow: Path) -> None:
    report = run_json("slow.py::hogs_memory", "slow.py::cube", "--max-memory", "3000", "--timeout", "120")
    assert report["exit_code"] == 1
    results = by_name(report)
    hog = results["hogs_memory"]
    assert hog["status"] == "error"
    assert hog["problems"][0]["check"] == "exception"
    assert hog["problems"][0]["message"].startswith("memory: the check used more than 3000 MB")
    assert results["cube"]["status"] == "passed"


#: How far past ``--max-memory`` a worker may get before it is stopped, as measured (docs/guarantees.md,
#: "The memory bound"): one poll's worth (``worker.POLL_SECONDS``) of page faults, with room for a loaded machine.
MEMORY_MARGIN_MB = 150

GRABS = """
    import numpy as np
    import tensorflow as tf

    @tf.custom_gradient
    def grabs(x):
        block = np.ones(750_000_000)  # 6 GB in one allocation, filled as fast as pages come
        def grad(dy):
            return dy
        return x + float(block[0]), grad
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_the_memory_bound_holds_within_its_margin_and_the_peak_is_reported(project: Path) -> None:
    write(project, "grabs.py", GRABS)
    write(project, "gradcheck.toml", "[functions.grabs]\ninputs = { x = [3] }\n")
    (result,) = run_json("grabs.py", "--max-memory", "1500")["results"]
    message = result["problems"][0]["message"]
    assert message.startswith("memory: the check used more than 1500 MB (peak "), message
    peak = float(message.split("(peak ")[1].split(" MB")[0])
    assert 1500 < peak <= 1500 + MEMORY_MARGIN_MB, message


def test_a_function_that_ends_the_process_is_an_error_and_the_run_goes_on(slow: Path) -> None:
    report = run_json("slow.py::ends_the_process", "slow.py::cube")
    assert report["exit_code"] == 1
    results = by_name(report)
    ended = results["ends_the_process"]
    assert ended["status"] == "error"
    assert "the process checking this function died" in ended["problems"][0]["message"]
    assert "exited with code 7" in ended["problems"][0]["message"]
    assert results["cube"]["status"] == "passed"


def test_a_module_whose_import_never_ends_is_a_usage_error_after_the_timeout(project: Path) -> None:
    write(project, "hangs.py", "import time\nimport tensorflow as tf\ntime.sleep(60)\n")
    result = invoke("run", "hangs.py", "--timeout", "3")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "gradcheck: error: hangs.py: importing the module did not finish within 3 s (--timeout); "
        "move slow work out of module level, or raise --timeout"
    ]


SPAWNS = """
    import os
    import subprocess
    import time

    import tensorflow as tf

    HERE = os.path.dirname(os.path.abspath(__file__))

    def _record(pid):
        with open(os.path.join(HERE, "pids"), "a") as pids:
            pids.write(f"{pid}\\n")

    @tf.custom_gradient
    def starts_a_process(x):
        _record(subprocess.Popen(["sleep", "300"]).pid)
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def starts_one_and_hangs(x):
        _record(subprocess.Popen(["sleep", "300"], start_new_session=True).pid)
        time.sleep(60)
        return x, lambda dy: dy

    @tf.custom_gradient
    def forks(x):
        pid = os.fork()
        if pid == 0:
            time.sleep(300)  # a copy of the checker, left to run on
        else:
            _record(pid)
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            return 3.0 * x * x * dy
        return x * x * x, grad
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_every_process_a_check_starts_ends_with_it(project: Path) -> None:
    write(project, "spawns.py", SPAWNS)
    names = ("starts_a_process", "starts_one_and_hangs", "forks", "cube")
    write(project, "gradcheck.toml", "".join(f"[functions.{n}]\ninputs = {{ x = [3] }}\n" for n in names))
    try:
        process = subprocess.run(
            [sys.executable, "-m", "gradcheck", "run", "spawns.py", "--timeout", "5", "--format", "json"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert process.returncode == 1, process.stderr
        results = by_name(json.loads(process.stdout))
        assert {name: results[name]["status"] for name in names} == {
            "starts_a_process": "passed",
            "starts_one_and_hangs": "error",
            "forks": "passed",
            "cube": "passed",
        }
        assert results["starts_one_and_hangs"]["problems"][0]["message"].startswith("timeout:")
        assert results["starts_one_and_hangs"]["seconds"] < 8  # the time it took, not a wait for the pipe
    finally:
        pids = [int(line) for line in (project / "pids").read_text().split()] if (project / "pids").exists() else []
        left = [pid for pid in pids if _alive(pid)]
        for pid in left:
            os.kill(pid, 9)
    assert len(pids) >= 3 and left == []


def test_timeout_0_means_no_limit(slow: Path) -> None:
    # The function's own table sets the bound: a --timeout of 1 s would also bound the module's
    # import, which a loaded machine can take longer than that for.
    config = (slow / "gradcheck.toml").read_text()
    write(slow, "gradcheck.toml", config.replace("[functions.naps_once]\n", "[functions.naps_once]\ntimeout = 1\n"))
    limited = by_name(run_json("slow.py::naps_once"))["naps_once"]
    assert limited["status"] == "error" and "timeout" in limited["problems"][0]["message"]
    unlimited = by_name(run_json("slow.py::naps_once", "--timeout", "0"))["naps_once"]
    assert unlimited["status"] == "passed"


# -- files and Ctrl-C ---------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_a_run_leaves_every_file_but_the_report_it_names_as_it_was(faults: Path) -> None:
    write(faults, "old-report.json", '{"from": "an earlier run"}\n')
    write(faults, "report.json", '{"from": "an earlier run"}\n')
    before = _snapshot(faults)
    result = invoke("run", "faults.py", "--format", "json", "-o", "report.json")
    assert result.exit_code == 1
    after = _snapshot(faults)
    assert sorted(after) == sorted(before)  # no __pycache__, no temporary files left behind
    changed = {name for name in before if after[name] != before[name]}
    assert changed == {"report.json"}
    assert json.loads((faults / "report.json").read_text())["exit_code"] == 1


TWO = """
    import time
    from pathlib import Path

    import tensorflow as tf

    @tf.custom_gradient
    def first(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad

    @tf.custom_gradient
    def second(x):
        Path("second-started").write_text("")
        time.sleep(60)
        def grad(dy):
            return dy
        return x, grad
"""


def test_ctrl_c_prints_the_results_so_far_leaves_no_partial_report_and_exits_130(tmp_path: Path) -> None:
    write(tmp_path, "two.py", TWO)
    write(
        tmp_path,
        "gradcheck.toml",
        "[functions.first]\ninputs = { x = [3] }\n[functions.second]\ninputs = { x = [3] }\n",
    )
    write(tmp_path, "report.json", '{"from": "an earlier run"}\n')
    module_before = (tmp_path / "two.py").read_bytes()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gradcheck",
            "run",
            "two.py",
            "--format",
            "json",
            "-o",
            "report.json",
            "--format",
            "text",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The second function starts only once the first one's result has reached the parent.
    stdout, stderr = interrupt_once_started(
        process, [tmp_path / "second-started"], 120, "the second function never started"
    )
    assert process.returncode == 130, stderr
    assert "PASSED  two.py::first" in stdout
    assert stdout.strip().splitlines()[-1].endswith("(interrupted: 1 not checked)")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == 130
    assert [r["id"] for r in report["results"]] == ["two.py::first"]
    assert report["not_checked"] == ["two.py::second"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gradcheck.toml", "report.json", "second-started", "two.py"]
    assert (tmp_path / "two.py").read_bytes() == module_before


# -- what the user's code prints, and bugs of gradcheck's own ---------------------------------

PRINTS = """
    import os

    import tensorflow as tf

    print("printed at import")
    os.write(1, b"written to file descriptor 1 at import\\n")

    @tf.custom_gradient
    def square(x):
        print("printed in the forward pass")
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


def test_sigterm_is_an_interrupt_that_writes_every_report_and_exits_130(tmp_path: Path) -> None:
    write(tmp_path, "two.py", TWO)
    write(
        tmp_path,
        "gradcheck.toml",
        "[functions.first]\ninputs = { x = [3] }\n[functions.second]\ninputs = { x = [3] }\n",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gradcheck",
            "run",
            "two.py",
            "--format",
            "json",
            "-o",
            "report.json",
            "--format",
            "junit",
            "-o",
            "report.xml",
            "--format",
            "text",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = interrupt_once_started(
        process, [tmp_path / "second-started"], 120, "the second function never started", signal.SIGTERM
    )
    assert process.returncode == 130, stderr
    assert stdout.strip().splitlines()[-1].endswith("(interrupted: 1 not checked)")
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["id"] for r in report["results"]] == ["two.py::first"] and report["not_checked"] == ["two.py::second"]
    assert 'name="first"' in (tmp_path / "report.xml").read_text()
    assert "Traceback" not in stderr


def test_what_the_users_code_prints_goes_to_stderr_never_into_the_report(project: Path) -> None:
    write(project, "prints.py", PRINTS)
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    result = invoke("run", "prints.py", "--format", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["summary"]["passed"] == 1  # standard output holds the document alone
    for line in ("printed at import", "written to file descriptor 1 at import", "printed in the forward pass"):
        assert line in result.stderr


SABOTAGE = """
    import gradcheck.checking
    import tensorflow as tf

    gradcheck.checking.input_records = None  # gradcheck's own code now fails, outside the user's

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


def test_a_bug_met_in_the_worker_is_an_internal_error_with_its_traceback(project: Path) -> None:
    write(project, "sabotage.py", SABOTAGE)
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    result = invoke("run", "sabotage.py")
    assert result.exit_code == 3
    assert "Traceback" in result.stderr and "gradcheck/checking/__init__.py" in result.stderr
    assert "TypeError: 'NoneType' object is not callable" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("gradcheck: internal error: this is a bug in gradcheck")
    # That worker was stopped, not kept: the next run checks with gradcheck's code intact.
    write(project, "ops.py", SABOTAGE.replace("gradcheck.checking.input_records = None", ""))
    assert invoke("run", "ops.py").exit_code == 0


def test_results_travel_between_processes_as_they_are(project: Path) -> None:
    # The worker sends results to the command line pickled: every field survives, heat maps included.
    write(project, "wrong.py", FAULTS.replace("return 2.0 * x * dy", "return 3.0 * x * dy"))
    sys.path.insert(0, str(project))
    try:
        import wrong  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(project))
    try:
        result = gradcheck.check(wrong.square, inputs={"x": (4, 3)})
    finally:
        sys.modules.pop("wrong", None)
    assert result.status == "failed" and any(p.heatmap is not None for p in result.problems)
    copy = pickle.loads(pickle.dumps(result))
    assert copy == result and copy.to_dict() == result.to_dict()
    assert [p.heatmap for p in copy.problems] == [p.heatmap for p in result.problems]
    assert [p.traceback for p in copy.problems] == [p.traceback for p in result.problems]


def test_a_run_after_the_directory_of_the_last_one_was_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker kept from one run must not depend on that run's directory.
    for name in ("first", "second"):
        write(tmp_path / name, "ops.py", FAULTS)
        write(tmp_path / name, "gradcheck.toml", FAULTS_CONFIG)
    monkeypatch.chdir(tmp_path / "first")
    worker.close_idle_worker()  # the worker starts here, in the directory about to go
    assert invoke("run", "ops.py::square").exit_code == 0
    monkeypatch.chdir(tmp_path / "second")
    shutil.rmtree(tmp_path / "first")
    assert invoke("run", "ops.py::square").exit_code == 0
