"""The pytest plugin through pytest's own ``pytester``: ``pytest --gradcheck PATH``."""

from __future__ import annotations

import textwrap

import pytest

import gradcheck.session  # noqa: F401  (before pytester's snapshot, as TensorFlow below)
from gradcheck import _tf
from tests.helpers import GOOD_AND_BAD, PICKY

# Import TensorFlow, and the run's modules the plugin imports as it goes, before pytester snapshots
# sys.modules: pytester drops the modules an inner run imported, and TensorFlow cannot be imported a
# second time in one process. A dropped gradcheck module stays an attribute of the package, so a later
# ``from gradcheck import session`` would get it back with classes that no longer pickle for the worker.
_tf.tensorflow()


@pytest.fixture
def gradcheck_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder with an empty gradcheck.toml, so no outer config leaks in."""
    pytester.makefile(".toml", gradcheck="")
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``pytest ARGS`` in process, without hypothesis's plugin.

    Its end-of-run summary imports hypothesis afresh in every inner run
    (pytester drops the modules a run imported): 1.5 s each, for nothing.
    """
    return pytester.runpytest("-p", "no:hypothesispytest", *args)


def test_a_passing_function_is_a_passing_item(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=GOOD_AND_BAD.split("@tf.custom_gradient\ndef cube")[0])
    result = run(gradcheck_project, "--gradcheck", "ops.py", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ops.py::square PASSED*"])


def test_a_failing_function_reports_its_problem_table(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=GOOD_AND_BAD)
    result = run(gradcheck_project, "--gradcheck", "ops.py")
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*gradcheck: cube*",
            "failed: x (native): the gradient of x differs from native autodiff*",
            "FAILED  ops.py::cube*",
            "*input*check*",
            "*x*native*",
            "*reproduce: gradcheck run ops.py::cube --seed 0",
            "FAILED ops.py::cube - failed: x (native)*",
        ]
    )


def test_keyword_and_node_id_selection(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=GOOD_AND_BAD)
    by_keyword = run(gradcheck_project, "--gradcheck", "ops.py", "-k", "square")
    by_keyword.assert_outcomes(passed=1, deselected=1)
    by_node = run(gradcheck_project, "--gradcheck", "ops.py", "ops.py::cube")
    by_node.assert_outcomes(failed=1)
    by_option = run(gradcheck_project, "--gradcheck", "ops.py::square")
    by_option.assert_outcomes(passed=1)


def test_the_config_is_honoured(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=textwrap.dedent(PICKY))
    without = run(gradcheck_project, "--gradcheck", "ops.py", "-rs")
    without.assert_outcomes(skipped=1)
    without.stdout.fnmatch_lines(["*no shapes configured for x*[[]functions.picky[]]*"])
    gradcheck_project.makefile(".toml", gradcheck="[functions.picky]\ninputs = { x = [7, 11] }\n")
    configured = run(gradcheck_project, "--gradcheck", "ops.py")
    configured.assert_outcomes(passed=1)
    gradcheck_project.makefile(".toml", gradcheck="strict = true\n")
    strict = run(gradcheck_project, "--gradcheck", "ops.py")
    strict.assert_outcomes(failed=1)


def test_a_bad_config_is_a_one_line_collection_error(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=textwrap.dedent(PICKY))
    gradcheck_project.makefile(".toml", gradcheck="[functions.pciky]\ninputs = { x = [7, 11] }\n")
    result = run(gradcheck_project, "--gradcheck", "ops.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["gradcheck: error: *gradcheck.toml: functions.pciky: *did you mean 'picky'*"])
    assert "Traceback" not in result.stdout.str()


def test_a_missing_target_is_a_usage_error(gradcheck_project: pytest.Pytester) -> None:
    result = run(gradcheck_project, "--gradcheck", "nope.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gradcheck: nope.py: no such file or directory"])


def test_without_the_option_the_module_is_left_alone(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=GOOD_AND_BAD, test_plain="def test_plain():\n    pass\n")
    result = run(
        gradcheck_project,
    )
    result.assert_outcomes(passed=1)
    assert "ops.py" not in result.stdout.str()


def test_gradcheck_items_run_beside_ordinary_tests(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=GOOD_AND_BAD)
    gradcheck_project.mkdir("tests")
    (gradcheck_project.path / "tests" / "test_plain.py").write_text("def test_plain():\n    pass\n")
    # The target is outside the tests folder pytest was pointed at: it is collected all the same.
    result = run(gradcheck_project, "--gradcheck", "ops.py", "tests")
    result.assert_outcomes(passed=2, failed=1)


def test_the_marker_runs_gradcheck_items_apart_from_the_projects_tests(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(ops=GOOD_AND_BAD, test_plain="def test_plain():\n    pass\n")
    only_gradcheck = run(gradcheck_project, "--gradcheck", "ops.py", "-m", "gradcheck", "-v")
    only_gradcheck.assert_outcomes(passed=1, failed=1, deselected=1)
    only_gradcheck.stdout.fnmatch_lines(["ops.py::square PASSED*", "ops.py::cube FAILED*"])
    only_project = run(gradcheck_project, "--gradcheck", "ops.py", "-m", "not gradcheck", "-v")
    only_project.assert_outcomes(passed=1, deselected=2)
    only_project.stdout.fnmatch_lines(["test_plain.py::test_plain PASSED*"])


def test_the_marker_is_registered_for_strict_markers(gradcheck_project: pytest.Pytester) -> None:
    gradcheck_project.makepyfile(
        ops=GOOD_AND_BAD,
        # A project's own test may name the marker too (to group its gradient tests with gradcheck's).
        test_plain="import pytest\n\n@pytest.mark.gradcheck\ndef test_plain():\n    pass\n",
    )
    with_items = run(gradcheck_project, "--strict-markers", "--gradcheck", "ops.py", "-m", "gradcheck")
    with_items.assert_outcomes(passed=2, failed=1)
    without_option = run(gradcheck_project, "--strict-markers", "test_plain.py")
    without_option.assert_outcomes(passed=1)
    markers = run(gradcheck_project, "--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.gradcheck: a custom gradient checked by gradcheck*"])


def test_a_skipped_item_is_reported_at_the_users_def(gradcheck_project: pytest.Pytester) -> None:
    ops = gradcheck_project.makepyfile(ops=textwrap.dedent(PICKY))
    def_line = next(n for n, text in enumerate(ops.read_text().splitlines(), 1) if text.startswith("def picky"))
    result = run(gradcheck_project, "--gradcheck", "ops.py", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] ops.py:{def_line}: no shapes configured for x*"])
    assert "pytest_plugin.py" not in result.stdout.str()


def test_assert_gradients_message_is_the_text_report() -> None:
    import importlib.util

    import gradcheck
    from gradcheck.reporting.text import render_text_string
    from gradcheck.results import RunReport
    from tests.helpers import REPO

    spec = importlib.util.spec_from_file_location("broken_ops", REPO / "examples" / "broken" / "broken_ops.py")
    assert spec is not None and spec.loader is not None
    broken_ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(broken_ops)
    shapes = {"A": (4, 4), "W": (4, 4)}
    with pytest.raises(AssertionError) as caught:
        gradcheck.assert_gradients(broken_ops.matmul_missing_transpose, inputs=shapes)
    result = gradcheck.check(broken_ops.matmul_missing_transpose, inputs=shapes)
    expected = render_text_string(RunReport(results=(result,), seed=0))
    # The same report but for the times: the problem table, hints and heat map line by line.
    import re

    def timeless(text: str) -> list[str]:
        return [re.sub(r"\d+\.\d\ds", "T", line) for line in text.strip().splitlines()]

    message = timeless(str(caught.value))
    assert message == timeless(expected)
    assert any(line.strip().startswith("input") and "check" in line for line in message)
    assert "      +--------+" in message
