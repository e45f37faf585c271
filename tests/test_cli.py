"""The command line as users drive it: exit codes, errors, formats, selection."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradcheck.cli.help import GUIDE_PAGES, OTHER
from gradcheck.settings import GROUPS, TABLE
from tests.helpers import PICKY, REPO, by_name, invoke, run_json, write

GOOD = """
    import tensorflow as tf

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""

BAD = """
    import tensorflow as tf

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 3.0 * x * dy
        return x * x, grad
"""

RAISES = """
    import tensorflow as tf

    @tf.custom_gradient
    def square(x):
        raise ValueError("forward is broken")
"""

NOTHING = """
    import tensorflow as tf

    def plain(x):
        return x * 2.0
"""


def _scenario(project: Path, name: str) -> list[str]:
    """Lay out one scenario in the project; return the command-line arguments."""
    if name == "passes":
        write(project, "ops.py", GOOD)
        return ["ops.py"]
    if name == "fails":
        write(project, "ops.py", BAD)
        return ["ops.py"]
    if name == "user code raises":
        write(project, "ops.py", RAISES)
        return ["ops.py"]
    if name == "missing file":
        return ["nope.py"]
    if name == "syntax error":
        write(project, "ops.py", "import tensorflow as tf\ndef broken(:\n")
        return ["ops.py"]
    if name == "import error":
        write(project, "ops.py", "import tensorflow as tf\nimport not_a_module_anywhere\n")
        return ["ops.py"]
    if name == "bad config key":
        write(project, "ops.py", GOOD)
        write(project, "gradcheck.toml", "sed = 1\n")
        return ["ops.py"]
    if name == "unknown dim":
        write(project, "ops.py", GOOD)
        write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = ['N'] }\n")
        return ["ops.py"]
    if name == "config names a missing function":
        write(project, "ops.py", GOOD)
        write(project, "gradcheck.toml", "[functions.sqaure]\ninputs = { x = [3] }\n")
        return ["ops.py"]
    if name == "not python":
        write(project, "notes.txt", "hello")
        return ["notes.txt"]
    if name == "selector matches nothing":
        write(project, "ops.py", GOOD)
        return ["ops.py::sqare"]
    if name == "no custom gradients":
        write(project, "ops.py", NOTHING)
        return ["ops.py"]
    if name == "empty directory of modules":
        write(project, "pkg/plain.py", NOTHING)
        return ["pkg"]
    if name == "bad --shape":
        write(project, "ops.py", GOOD)
        return ["ops.py", "--shape", "x=3,-1"]
    if name == "bad option value":
        write(project, "ops.py", GOOD)
        return ["ops.py", "--dtype", "float8"]
    raise AssertionError(name)


@pytest.mark.parametrize(
    ("scenario", "code"),
    [
        ("passes", 0),
        ("fails", 1),
        ("user code raises", 1),
        ("missing file", 2),
        ("syntax error", 2),
        ("import error", 2),
        ("bad config key", 2),
        ("unknown dim", 2),
        ("config names a missing function", 2),
        ("not python", 2),
        ("selector matches nothing", 2),
        ("bad --shape", 2),
        ("bad option value", 2),
        ("no custom gradients", 5),
        ("empty directory of modules", 5),
    ],
)
def test_exit_codes(project: Path, scenario: str, code: int) -> None:
    result = invoke("run", *_scenario(project, scenario))
    assert result.exit_code == code, result.output
    if code == 2:
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("scenario", "fragments"),
    [
        ("missing file", ["nope.py", "no such file"]),
        ("syntax error", ["ops.py:2:", "syntax error"]),
        ("import error", ["ops.py:2", "not_a_module_anywhere"]),
        ("bad config key", ["gradcheck.toml", "sed", "did you mean 'seed'"]),
        ("unknown dim", ["gradcheck.toml", "functions.square.inputs.x", "unknown dim name 'N'"]),
        ("config names a missing function", ["functions.sqaure", "did you mean 'square'"]),
        ("not python", ["notes.txt", "not a Python file"]),
        ("selector matches nothing", ["sqare", "did you mean 'square'"]),
    ],
)
def test_usage_errors_are_one_line_naming_the_culprit(project: Path, scenario: str, fragments: list[str]) -> None:
    result = invoke("run", *_scenario(project, scenario))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gradcheck: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert result.stdout == ""


def test_verbose_shows_the_traceback_of_a_usage_error(project: Path) -> None:
    args = _scenario(project, "import error")
    result = invoke("run", *args, "-v")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert "ModuleNotFoundError" in result.stderr


def test_json_goes_to_stdout_alone(project: Path) -> None:
    write(project, "ops.py", BAD)
    result = invoke("run", "ops.py", "--format", "json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["exit_code"] == 1
    assert document["summary"] == {"passed": 0, "failed": 1, "error": 0, "skipped": 0}
    assert "1 failed" in result.stderr


def test_json_report_has_the_contract_keys(project: Path) -> None:
    write(project, "ops.py", BAD)
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3, 2] }\n")
    document = run_json("ops.py")
    assert set(document) == {"gradcheck", "seed", "exit_code", "summary", "results", "collection"}
    result = document["results"][0]
    assert {"id", "name", "kind", "status", "dtype", "inputs", "problems", "seconds"} <= set(result)
    assert result["id"] == "ops.py::square"
    assert result["kind"] == "function"
    assert result["inputs"] == [{"name": "x", "shape": [3, 2], "dtype": "float64"}]
    problem = next(p for p in result["problems"] if p["check"] == "numeric")
    assert {"check", "input", "execution", "message", "max_abs_error", "max_rel_error", "worst_index"} <= set(problem)
    assert problem["input"] == "x"
    assert problem["execution"] is None  # the same wrong gradient eagerly and inside tf.function
    assert len(problem["worst_index"]) == 2


def test_output_file_gets_the_report_and_the_terminal_the_text(project: Path) -> None:
    write(project, "ops.py", BAD)
    result = invoke("run", "ops.py", "--format", "json", "-o", "out/report.json")
    assert result.exit_code == 1
    assert json.loads((project / "out" / "report.json").read_text())["exit_code"] == 1
    assert "FAILED" in result.stdout and "ops.py::square" in result.stdout


def test_output_never_overwrites_the_users_module(project: Path) -> None:
    module = write(project, "ops.py", GOOD)
    before = module.read_text()
    result = invoke("run", "ops.py", "-o", "ops.py")
    assert result.exit_code == 2
    assert module.read_text() == before


@pytest.mark.parametrize("config", ["sub/gradcheck.toml", "sub/pyproject.toml"])
def test_output_never_overwrites_a_config_the_run_reads(project: Path, config: str) -> None:
    write(project, "proj/sub/ops.py", GOOD)
    text = "[functions.square]\ninputs = { x = [3] }\n"
    if config.endswith("pyproject.toml"):
        text = "[tool.gradcheck.functions.square]\ninputs = { x = [3] }\n"
    written = write(project, f"proj/{config}", text)
    result = invoke("run", "proj", "--format", "json", "-o", f"proj/{config}")
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "refusing to write the report over" in result.stderr
    assert written.read_text() == text


def test_text_report_ends_with_a_summary_line(project: Path) -> None:
    write(project, "ops.py", GOOD + BAD.replace("square", "cube").replace("import tensorflow as tf", ""))
    result = invoke("run", "ops.py")
    assert result.exit_code == 1
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("1 passed, 1 failed in ") and last.endswith("s")


def test_quiet_shows_only_failures_and_summary(project: Path) -> None:
    write(project, "ops.py", GOOD + BAD.replace("square", "cube").replace("import tensorflow as tf", ""))
    result = invoke("run", "ops.py", "-q")
    assert "ops.py::square" not in result.stdout
    assert "ops.py::cube" in result.stdout


def test_verbose_shows_inputs_of_passing_functions(project: Path) -> None:
    write(project, "ops.py", GOOD)
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [7] }\n")
    result = invoke("run", "ops.py", "-v")
    assert result.exit_code == 0
    assert "(7,)" in result.stdout


def test_keyword_and_selector_choose_functions(project: Path) -> None:
    write(project, "ops.py", GOOD + BAD.replace("square", "cube").replace("import tensorflow as tf", ""))
    assert list(by_name(run_json("ops.py", "-k", "cube"))) == ["cube"]
    assert list(by_name(run_json("ops.py::square"))) == ["square"]


def test_shape_and_dim_options(project: Path) -> None:
    write(project, "ops.py", GOOD)
    report = run_json("ops.py", "--shape", "x=N,2", "--dim", "N=6")
    assert report["results"][0]["inputs"][0]["shape"] == [6, 2]


def test_dotted_module_target(project: Path) -> None:
    write(project, "pkg/__init__.py", "")
    write(project, "pkg/ops.py", GOOD)
    report = run_json("pkg.ops")
    assert [r["id"] for r in report["results"]] == ["pkg/ops.py::square"]


def test_directory_target_skips_hidden_and_virtualenv_folders(project: Path) -> None:
    write(project, "src/ops.py", GOOD)
    write(project, ".hidden/ops.py", GOOD)
    write(project, "venv/lib/ops.py", GOOD)
    write(project, "other_env/pyvenv.cfg", "")
    write(project, "other_env/ops.py", GOOD)
    write(project, "src/__pycache__/ops.py", GOOD)
    report = run_json(".")
    assert [r["id"] for r in report["results"]] == ["src/ops.py::square"]


def test_strict_fails_a_skipped_function(project: Path) -> None:
    write(project, "ops.py", PICKY)
    relaxed = invoke("run", "ops.py")
    assert relaxed.exit_code == 0
    assert "SKIPPED" in relaxed.stdout and "[functions.picky]" in relaxed.stdout
    assert invoke("run", "ops.py", "--strict").exit_code == 1


def test_guessed_shapes_are_reported(project: Path) -> None:
    write(project, "ops.py", GOOD)
    result = run_json("ops.py")["results"][0]
    assert result["status"] == "passed"
    assert result["inputs"][0]["guessed"] is True
    assert any("guessed shapes" in note for note in result["notes"])


def test_list_shows_signatures_and_shapes(project: Path) -> None:
    write(project, "ops.py", GOOD.replace("square(x)", "square(x, y=None)"))
    write(project, "gradcheck.toml", "[dims]\nN = 4\n[functions.square]\ninputs = { x = ['N', 3] }\n")
    result = invoke("list", "ops.py")
    assert result.exit_code == 0
    assert "ops.py::square(x, y=None)" in result.stdout
    assert "x: (4, 3) float64" in result.stdout


def test_help_and_version() -> None:
    assert invoke("--version").stdout.strip() == "gradcheck, version 0.1.0"
    help_text = invoke("run", "--help").stdout
    for option in ("--shape-only", "--mode", "--dtype", "--seed", "--execution", "--format", "--strict"):
        assert option in help_text


def test_run_help_lists_its_options_by_group() -> None:
    help_text = invoke("run", "--help").stdout
    sections = [line[:-1] for line in help_text.splitlines() if re.match(r"^[A-Z][A-Za-z ]*:$", line)]
    assert sections == [*GROUPS, OTHER]
    listed = {}
    for section in help_text.split("\n\n"):
        title, _, body = section.partition(":\n")
        for flag in re.findall(r"^  (?:-\w, )?(--[\w-]+)", body, flags=re.M):
            assert flag not in listed, flag
            listed[flag] = title
    for setting in TABLE:
        if setting.long_flag is not None:
            assert listed[setting.long_flag] == setting.group, setting.name
    assert (listed["--config"], listed["--shape"], listed["--shard"], listed["--quiet"]) == (
        "Selection",
        "Checking",
        "CI",
        "Reports",
    )


@pytest.mark.parametrize("command", sorted(GUIDE_PAGES))
def test_each_help_ends_with_its_guide_page(command: str) -> None:
    args = ["--help"] if command == "gradcheck" else [command, "--help"]
    last = invoke(*args).stdout.rstrip().splitlines()[-2:]
    page, reference = GUIDE_PAGES[command]
    assert [line.strip() for line in last] == [f"Guide: {page}", f"Every option: {reference}"]


def _subprocess(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env or os.environ.copy()
    )


def test_bundled_examples_as_a_subprocess(tmp_path: Path) -> None:
    examples = REPO / "examples"
    good = _subprocess(["-m", "gradcheck.cli", "run", "matmul", "--format", "json"], cwd=examples)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["summary"]["passed"] >= 2
    broken = _subprocess(["-m", "gradcheck.cli", "run", "."], cwd=examples)
    assert broken.returncode == 1
    assert "broken/broken_ops.py::matmul_missing_transpose" in broken.stdout
    assert "Traceback" not in broken.stderr
    assert "oneDNN" not in broken.stderr  # TensorFlow's C++ start-up lines are kept out


def test_without_tensorflow_run_exits_2_naming_the_extra(tmp_path: Path) -> None:
    write(tmp_path, "ops.py", GOOD)
    blocker = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tensorflow' or name.startswith('tensorflow.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.modules.pop('tensorflow', None)\n"
        "from gradcheck.cli import main\n"
        "main(['run', 'ops.py'])\n"
    )
    result = _subprocess(["-c", blocker], cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "gradcheck[cpu]" in lines[0]


def test_help_and_import_do_not_import_tensorflow(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "import gradcheck, gradcheck.results, gradcheck.cli, gradcheck.progress, gradcheck.worker\n"
        "import gradcheck.pytest_plugin\n"
        "import gradcheck.reporting.junit, gradcheck.reporting.github, gradcheck.reporting.html\n"
        "import gradcheck.proxies\n"
        "from click.testing import CliRunner\n"
        "CliRunner().invoke(gradcheck.cli.main, ['--help'])\n"
        "CliRunner().invoke(gradcheck.cli.main, ['run', '--help'])\n"
        "completion = {'_GRADCHECK_COMPLETE': 'bash_source'}\n"
        "CliRunner().invoke(gradcheck.cli.main, [], prog_name='gradcheck', env=completion)\n"
        "import pytest\n"
        "pytest.main(['--help'])  # the pytest plugin is loaded through its entry point, without --gradcheck\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = _subprocess(["-c", probe], cwd=tmp_path)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr
    assert "--gradcheck=PATH" in result.stdout  # the plugin was loaded


def test_a_run_imports_tensorflow_in_its_worker_only(tmp_path: Path) -> None:
    write(tmp_path, "ops.py", GOOD)
    write(tmp_path, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from gradcheck.cli import main\n"
        "result = CliRunner().invoke(main, ['run', 'ops.py'])\n"
        "print(result.exit_code, 'tensorflow' in sys.modules)\n"
    )
    result = _subprocess(["-c", probe], cwd=tmp_path)
    assert result.stdout.strip().splitlines()[-1] == "0 False", result.stderr


def test_a_shared_config_lets_one_module_of_several_run(project: Path) -> None:
    write(project, "a.py", GOOD)
    write(project, "b.py", GOOD.replace("square", "cube"))
    write(
        project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n[functions.cube]\ninputs = { x = [4] }\n"
    )
    assert invoke("run", "a.py").exit_code == 0
    assert invoke("run", "b.py::cube").exit_code == 0
    write(
        project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n[functions.cueb]\ninputs = { x = [4] }\n"
    )
    misspelt = invoke("run", "a.py")
    assert misspelt.exit_code == 2 and "functions.cueb" in misspelt.stderr


def test_several_selectors_on_one_file_check_each_function_once(project: Path) -> None:
    write(project, "ops.py", GOOD + BAD.replace("square", "cube").replace("import tensorflow as tf", ""))
    assert list(by_name(run_json("ops.py::cube", "ops.py::square"))) == ["cube", "square"]
    assert list(by_name(run_json("ops.py", "ops.py::square"))) == ["square", "cube"]
