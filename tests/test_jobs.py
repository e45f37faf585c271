"""``-j N`` / ``jobs``: functions checked on N worker processes, reported as one worker reports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gradcheck import pool
from gradcheck.results import Result
from gradcheck.settings import BY_NAME, MAX_JOBS, InvalidValue
from tests.helpers import GOOD_AND_BAD, REPO, copy_fixture, interrupt_once_started, invoke, write, wrong_factors


def _without_timings(document: Any) -> Any:
    """The report with every ``seconds`` left out: the only thing -j may change."""
    if isinstance(document, dict):
        return {key: _without_timings(value) for key, value in document.items() if key != "seconds"}
    if isinstance(document, list):
        return [_without_timings(value) for value in document]
    return document


def _json(*args: str) -> tuple[int, str]:
    result = invoke("run", *args, "--format", "json")
    return result.exit_code, result.stdout


# -- the same report as -j 1 ----------------------------------------------------------------


def _same_but_noise(one: Any, again: Any, two: Any, where: str = "") -> list[str]:
    """Assert ``two`` is ``one``, key order included, except where ``one`` and ``again`` (-j 1 twice) differ.

    Returns where -j 1 itself varied from run to run (the last digits of a
    finite difference of a Keras layer's weight do, on main as well): no
    number of workers can promise those.
    """
    if isinstance(one, dict):
        assert list(one) == list(again) == list(two), where
        return [v for key in one for v in _same_but_noise(one[key], again[key], two[key], f"{where}.{key}")]
    if isinstance(one, list):
        assert len(one) == len(again) == len(two), where
        return [v for i, item in enumerate(one) for v in _same_but_noise(item, again[i], two[i], f"{where}[{i}]")]
    if one != again:
        return [where]
    assert json.dumps(two) == json.dumps(one), where
    return []


@pytest.mark.parametrize("fixture", ["core", "forms"])
def test_two_workers_give_the_report_of_one(project: Path, fixture: str) -> None:
    copy_fixture(fixture, project)
    one_code, one = _json(fixture, "-j", "1")
    two_code, two = _json(fixture, "--jobs", "2")
    assert one_code == two_code == 1
    one_document, two_document = json.loads(one), json.loads(two)
    assert len(one_document["results"]) > 10
    # Byte for byte, once the timings (the only thing that may differ) are out ...
    one_document, two_document = _without_timings(one_document), _without_timings(two_document)
    if json.dumps(one_document) == json.dumps(two_document):
        return
    # ... or, where -j 1 itself varies from run to run, everywhere else.
    _, again = _json(fixture, "-j", "1")
    varied = _same_but_noise(one_document, _without_timings(json.loads(again)), two_document)
    assert varied and all(place.endswith("max_abs_error") or place.endswith("max_rel_error") for place in varied)


@pytest.mark.parametrize("maxfail", ["1", "2"])
def test_maxfail_stops_every_worker_where_one_worker_stops(project: Path, maxfail: str) -> None:
    write(project, "ops.py", wrong_factors(4))
    _, one = _json("ops.py", "--maxfail", maxfail)
    code, two = _json("ops.py", "--maxfail", maxfail, "-j", "2")
    assert code == 1
    document = json.loads(two)
    assert [r["name"] for r in document["results"]] == [f"bad{i}" for i in range(int(maxfail))]
    assert document["not_checked"] == [f"ops.py::bad{i}" for i in range(int(maxfail), 4)]
    assert _without_timings(document) == _without_timings(json.loads(one))


def test_a_timeout_in_one_worker_is_that_function_error_and_the_others_pass(project: Path) -> None:
    write(
        project,
        "ops.py",
        """
        import time

        import tensorflow as tf


        def _square(x):
            def grad(dy):
                return 2.0 * x * dy
            return x * x, grad


        first = tf.custom_gradient(_square)


        @tf.custom_gradient
        def hangs(x):
            time.sleep(600)
            return x, lambda dy: dy


        third = tf.custom_gradient(_square)
        fourth = tf.custom_gradient(_square)
        """,
    )
    write(project, "gradcheck.toml", "[functions.hangs]\ninputs = { x = [3] }\ntimeout = 3\n")
    started = time.monotonic()
    code, two = _json("ops.py", "-j", "2")
    assert time.monotonic() - started < 300
    assert code == 1
    statuses = {r["name"]: r["status"] for r in json.loads(two)["results"]}
    assert statuses == {"first": "passed", "hangs": "error", "third": "passed", "fourth": "passed"}
    (problem,) = next(r for r in json.loads(two)["results"] if r["name"] == "hangs")["problems"]
    assert problem["message"].startswith("timeout: the check did not finish within 3 s (--timeout)")


def test_auto_is_one_worker_per_usable_core(project: Path) -> None:
    assert pool.worker_count("auto") == len(os.sched_getaffinity(0))
    assert pool.worker_count(3) == 3
    write(project, "ops.py", wrong_factors(4).replace("3.0 * x", "2.0 * x"))
    code, document = _json("ops.py", "-j", "auto")
    assert code == 0 and json.loads(document)["summary"]["passed"] == 4
    write(project, "gradcheck.toml", 'jobs = "auto"\n')
    assert invoke("run", "ops.py").exit_code == 0


def _counting(count: int) -> str:
    """A module that notes the pid of every process that imports it: one line per worker."""
    header = (
        "import os\nwith open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'imports'), 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
    )
    return header + textwrap.dedent(wrong_factors(count).replace("3.0 * x", "2.0 * x"))


def _workers_started(project: Path) -> int:
    return len(set((project / "imports").read_text().split()))


def test_no_more_workers_start_than_there_are_functions(project: Path) -> None:
    (project / "ops.py").write_text(_counting(2), encoding="utf-8")
    code, document = _json("ops.py", "-j", "6")
    assert code == 0 and json.loads(document)["summary"]["passed"] == 2
    assert _workers_started(project) <= 2


def test_auto_starts_no_second_worker_for_work_shorter_than_its_start_up(project: Path) -> None:
    (project / "ops.py").write_text(_counting(3), encoding="utf-8")
    code, document = _json("ops.py", "-j", "auto")
    assert code == 0 and json.loads(document)["summary"]["passed"] == 3
    assert _workers_started(project) == 1


def test_a_worker_kept_idle_between_runs_keeps_the_start_up_of_a_fresh_one(project: Path) -> None:
    # -j auto weighs a helper's start-up (always a fresh worker) by this, not by the idle worker's quick reuse.
    from gradcheck.worker.process import Worker, keep_worker, take_worker

    unstarted = Worker()
    try:
        assert unstarted.startup is None  # measured at its first manifest, not before
    finally:
        unstarted.close()
    (project / "ops.py").write_text(_counting(1), encoding="utf-8")
    assert _json("ops.py")[0] == 0
    kept = take_worker()
    fresh = kept.startup
    assert fresh is not None and fresh > 0
    keep_worker(kept)
    assert _json("ops.py")[0] == 0
    again = take_worker()
    assert again is kept and again.startup == fresh
    keep_worker(again)


def test_jobs_is_bounded_and_the_help_says_so(project: Path) -> None:
    write(project, "ops.py", wrong_factors(2))
    result = invoke("run", "ops.py", "-j", "10000")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "'-j' / '--jobs'" in line and f"at most {MAX_JOBS}" in line
    assert f"at most {MAX_JOBS}" in " ".join(invoke("run", "--help").stdout.split())


def test_workers_share_the_cores_between_their_thread_pools() -> None:
    shared = pool.thread_environment({"OMP_NUM_THREADS": "7"}, 2)
    assert shared["TF_NUM_INTRAOP_THREADS"] == str(max(1, pool.usable_cores() // 2))
    assert shared["OMP_NUM_THREADS"] == "7"  # the user's own choice stays
    assert pool.thread_environment({}, 1) == {}  # -j 1 runs as before


# -- the pool drives any Runner ------------------------------------------------------------


class _Manifest:
    seed = 0
    fail_on = ("failed",)
    module_results: tuple[Result, ...] = ()
    collection = None


class _Runner:
    """A :class:`gradcheck.run.Runner` with no worker: f0 fails once f2 started, f1 passes, f2 runs until killed."""

    def __init__(self, f2_started: threading.Event) -> None:
        self.f2_started = f2_started
        self.killed = threading.Event()
        self.readied = 0

    def ready(self) -> bool:
        self.readied += 1
        return True

    def check(self, index: int) -> Result:
        if index == 0:
            assert self.f2_started.wait(timeout=60)
        if index == 2:
            self.f2_started.set()
            assert self.killed.wait(timeout=60)
        return Result(id=f"f{index}", name=f"f{index}", kind="function", status="failed" if index == 0 else "passed")

    def kill(self) -> None:
        self.killed.set()


def test_the_pool_needs_only_the_runner_protocol() -> None:
    # The runner holding f0 waits, so the other checks f1 and f2: f1's result, which finished first,
    # is dropped once f0 reaches --maxfail in manifest order, and f2, still in flight, is killed.
    f2_started = threading.Event()
    runners = [_Runner(f2_started), _Runner(f2_started)]
    report = pool.check_parallel(["f0", "f1", "f2"], runners, _Manifest(), 1, time.perf_counter())
    assert [result.id for result in report.results] == ["f0"]
    assert report.not_checked == ("f1", "f2")
    assert [runner.readied for runner in runners] == [1, 1]
    assert sum(runner.killed.is_set() for runner in runners) >= 1


# -- bad values ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "x", "-1", "1.5"])
def test_a_bad_jobs_flag_is_one_line_naming_it(project: Path, value: str) -> None:
    write(project, "ops.py", wrong_factors(4))
    result = invoke("run", "ops.py", "-j", value)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gradcheck: error: ") and "'-j' / '--jobs'" in line
    assert "must be a positive integer or auto" in line


@pytest.mark.parametrize("value", ["-1", "0", '"many"', "true", "2.0", '"2"'])
def test_a_bad_jobs_key_is_one_line_naming_it(project: Path, value: str) -> None:
    write(project, "ops.py", wrong_factors(4))
    write(project, "gradcheck.toml", f"jobs = {value}\n")
    result = invoke("run", "ops.py")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "gradcheck.toml" in line and "jobs" in line and "must be a positive integer or auto" in line


def test_the_settings_row_reads_numbers_and_auto() -> None:
    setting = BY_NAME["jobs"]
    assert (setting.short, setting.long_flag, setting.key, setting.scope) == ("-j", "--jobs", "jobs", "run")
    assert setting.parse(4) == setting.kind.parse_text("4") == 4 and setting.parse("auto") == "auto"
    for bad in (False, "4", 0, -2, 1.0):  # in a config, a number is written as one
        with pytest.raises(InvalidValue):
            setting.parse(bad)


# -- Ctrl-C -------------------------------------------------------------------------------


def test_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    write(tmp_path, "gradcheck.toml", "")
    write(
        tmp_path,
        "two.py",
        """
        import pathlib
        import time

        import tensorflow as tf


        def _hanging(name):
            def forward(x):
                pathlib.Path(name + "-started").touch()
                time.sleep(600)
                return x, lambda dy: dy
            return tf.custom_gradient(forward)


        first = _hanging("first")
        second = _hanging("second")
        """,
    )
    environ = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "gradcheck", "run", "two.py", "-j", "2", "--timeout", "0", "--format", "json"]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
    )
    markers = [tmp_path / "first-started", tmp_path / "second-started"]
    stdout, stderr = interrupt_once_started(process, markers, 240, "the two functions never ran at once")
    assert process.returncode == 130, stderr
    report = json.loads(stdout)
    assert report["results"] == [] and report["not_checked"] == ["two.py::first", "two.py::second"]


# -- the pytest plugin under xdist ----------------------------------------------------------

#: A third, right custom gradient, so that two xdist workers both get work.
DOUBLE = """

@tf.custom_gradient
def double(x):
    def grad(dy):
        return 2.0 * dy
    return 2.0 * x, grad
"""


def test_the_pytest_plugin_under_xdist(tmp_path: Path) -> None:
    write(tmp_path, "gradcheck.toml", "")
    write(tmp_path, "ops.py", GOOD_AND_BAD + DOUBLE)
    environ = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "--gradcheck", "ops.py", "-rA"]
    completed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=environ, timeout=600)
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "2 passed" in completed.stdout and "1 failed" in completed.stdout, completed.stdout
    assert "created: 2/2 workers" in completed.stdout
    assert "FAILED ops.py::cube - failed: x (native)" in completed.stdout
