"""Every bad input is one line on standard error that names the culprit, and exit 2.

One row per bad target, config value and option (issue 6, point 1). Each row
lays out its files in a fresh project, runs ``gradcheck run`` as a user
would, and checks the exit code, that standard error is exactly one line
starting ``gradcheck: error:``, that the line names the file, key or option
at fault (and the fix, where there is a closest valid name), that standard
output is empty, and that no traceback is shown. ``-v`` shows the traceback
behind a failed import, even one that happened in the worker process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import BODIES, FOR_LOOP, invoke, write

GOOD = """
    import tensorflow as tf

    @tf.custom_gradient
    def square(x):
        def grad(dy):
            return 2.0 * x * dy
        return x * x, grad
"""


def _good_module(project: Path) -> None:
    write(project, "ops.py", GOOD)


def _config(text: str) -> Callable[[Path], None]:
    def lay_out(project: Path) -> None:
        write(project, "ops.py", GOOD)
        write(project, "gradcheck.toml", text)

    return lay_out


def _module(name: str, text: str) -> Callable[[Path], None]:
    def lay_out(project: Path) -> None:
        write(project, name, text)

    return lay_out


def _proxy(value: str, more: str = "") -> Callable[[Path], None]:
    """A project whose config declares ``proxy = VALUE`` for square, beside a proxies.py (and ``more`` lines)."""

    def lay_out(project: Path) -> None:
        write(project, "ops.py", GOOD + CUBE)
        write(project, "proxies.py", "LIMIT = 3\n\ndef straight(x):\n    return x\n")
        write(project, "gradcheck.toml", f"[functions.square]\ninputs = {{ x = [3] }}\nproxy = {value}\n{more}")

    return lay_out


CUBE = """
    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            return 3.0 * x * x * dy
        return x * x * x, grad
"""


def _directory_without_python(project: Path) -> None:
    write(project, "notes/README.txt", "no code here\n")


def _package_without_the_module(project: Path) -> None:
    write(project, "pkg/__init__.py", "")


def _pyproject(text: str) -> Callable[[Path], None]:
    """A project whose pyproject.toml, found by the config search, is broken."""

    def lay_out(project: Path) -> None:
        (project / "gradcheck.toml").unlink()
        write(project, "ops.py", GOOD)
        write(project, "pyproject.toml", text)

    return lay_out


def _body_import(value: str, bodies: str = BODIES) -> Callable[[Path], None]:
    """A for_loop project whose config gives body_fn as ``value``, beside a bodies.py holding ``bodies``."""

    def lay_out(project: Path) -> None:
        write(project, "ops.py", FOR_LOOP)
        write(project, "bodies.py", bodies)
        write(project, "steps/__init__.py", bodies)
        write(project, "steps/bodies.py", BODIES)
        write(
            project,
            "gradcheck.toml",
            "[functions.for_loop]\ninputs = { initial_state = [5] }\n"
            f"constants = {{ body_fn = {value}, num_iterations = 2 }}\n",
        )

    return lay_out


def _square_config(line: str) -> str:
    return f"[functions.square]\ninputs = {{ {line} }}\n"


#: (id, lay out the project, arguments after `gradcheck run`, fragments the one line must hold)
BAD_INPUTS: list[tuple[str, Callable[[Path], None], list[str], list[str]]] = [
    # -- targets
    ("path that does not exist", _good_module, ["nope.py"], ["nope.py", "no such file or directory"]),
    ("directory with no Python files", _directory_without_python, ["notes"], ["notes", "holds no Python files"]),
    ("file that is not Python", _module("notes.txt", "hello\n"), ["notes.txt"], ["notes.txt", "not a Python file"]),
    (
        "syntax error",
        _module("ops.py", "import tensorflow as tf\ndef broken(:\n"),
        ["ops.py"],
        ["ops.py:2:12", "syntax error"],
    ),
    (
        "import error in the user's module",
        _module("ops.py", "import tensorflow as tf\nimport not_a_module_anywhere\n"),
        ["ops.py"],
        ["ops.py:2", "import failed", "not_a_module_anywhere", "install the missing module"],
    ),
    (
        "module-level code that raises",
        _module("ops.py", "import tensorflow as tf\nraise ValueError('no config file')\n"),
        ["ops.py"],
        ["ops.py:2", "importing the module raised ValueError: no config file"],
    ),
    (
        "module-level code that ends the process",
        _module("ops.py", "import os\nos._exit(3)\n"),
        ["ops.py"],
        ["ops.py", "importing the module ended the checker process", "exited with code 3"],
    ),
    (
        "dotted name whose package does not exist",
        _good_module,
        ["nopkg.ops"],
        ["nopkg.ops", "not a module importable from", "No module named 'nopkg'"],
    ),
    (
        "dotted name whose module does not exist",
        _package_without_the_module,
        ["pkg.missing"],
        ["pkg.missing", "no such file, directory or module importable from"],
    ),
    ("::NAME that matches nothing", _good_module, ["ops.py::sqare"], ["ops.py::sqare", "did you mean 'square'"]),
    # -- config
    (
        "TOML that does not parse",
        _config("[functions.square]\ninputs = { x = [3 }\n"),
        ["ops.py"],
        ["gradcheck.toml", "invalid TOML", "line 2"],
    ),
    ("unknown key", _config("sed = 1\n"), ["ops.py"], ["gradcheck.toml", "sed", "did you mean 'seed'"]),
    (
        "unknown dim name",
        _config("[dims]\nbatch = 4\n" + _square_config("x = ['bacth']")),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.inputs.x[0]", "unknown dim name 'bacth'", "did you mean 'batch'"],
    ),
    (
        "negative size",
        _config(_square_config("x = [-3]")),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.inputs.x[0]", "size -3 must be a positive integer"],
    ),
    (
        "non-integer size",
        _config(_square_config("x = [2.5]")),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.inputs.x[0]", "size 2.5 must be a positive integer"],
    ),
    (
        "negative dim",
        _config("[dims]\nN = -4\n"),
        ["ops.py"],
        ["gradcheck.toml", "dims.N", "-4 must be a positive integer"],
    ),
    (
        "distribution that does not exist",
        _config(_square_config("x = { shape = [3], distribution = 'gaussian' }")),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.inputs.x.distribution", "'gaussian' is not one of normal, uniform"],
    ),
    (
        "misspelt distribution",
        _config(_square_config("x = { shape = [3], distribution = 'unifrom', low = 0.0, high = 1.0 }")),
        ["ops.py"],
        ["functions.square.inputs.x.distribution", "did you mean 'uniform'"],
    ),
    (
        "low >= high",
        _config(_square_config("x = { shape = [3], low = 2.0, high = 1.0 }")),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.inputs.x", "low = 2.0 must be below high = 1.0"],
    ),
    (
        "config names a function the targets do not define",
        _config(_square_config("x = [3]").replace("square", "sqaure")),
        ["ops.py"],
        ["gradcheck.toml", "functions.sqaure", "did you mean 'square'"],
    ),
    (
        "negative timeout in the config",
        _config("timeout = -1\n"),
        ["ops.py"],
        ["gradcheck.toml", "timeout", "-1 must be a number of seconds"],
    ),
    (
        "timeout of a function that is no number",
        _config(_square_config("x = [3]") + "timeout = 'long'\n"),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.timeout", "'long' must be a number of seconds"],
    ),
    (
        "max_memory that is no whole number",
        _config("max_memory = 1.5\n"),
        ["ops.py"],
        ["gradcheck.toml", "max_memory", "1.5 must be a whole number of megabytes"],
    ),
    (
        "device that does not exist in the config",
        _config("device = 'tpu'\n"),
        ["ops.py"],
        ["gradcheck.toml", "device", "'tpu' is not one of auto, cpu, gpu"],
    ),
    (
        "projections below 1 in the config",
        _config("projections = 0\n"),
        ["ops.py"],
        ["gradcheck.toml", "projections", "0 must be a positive integer"],
    ),
    (
        "projections that is no integer in a function's table",
        _config("[functions.square]\nprojections = 2.5\n"),
        ["ops.py"],
        ["gradcheck.toml", "functions.square.projections", "2.5 must be a positive integer"],
    ),
    ("pyproject.toml whose tool is an integer", _pyproject("tool = 3\n"), ["ops.py"], ["pyproject.toml", "integer"]),
    ("pyproject.toml whose tool is a string", _pyproject('tool = "x"\n'), ["ops.py"], ["pyproject.toml", "string"]),
    (
        "pyproject.toml whose tool.gradcheck is an integer",
        _pyproject("[tool]\ngradcheck = 5\n"),
        ["ops.py"],
        ["pyproject.toml", "[tool.gradcheck] must be a table", "not an integer"],
    ),
    (
        "pyproject.toml that does not parse",
        _pyproject("[project\nname = 'x'\n"),
        ["ops.py"],
        ["pyproject.toml", "invalid TOML", "line 1"],
    ),
    (
        "import of a module that is nowhere",
        _body_import('{ import = "nobodies:step" }'),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn: nobodies:step", "no module named 'nobodies'"],
    ),
    (
        "import of an attribute the module lacks",
        _body_import('{ import = "bodies:stpe" }'),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn", "has no attribute 'stpe'", "did you mean 'step'"],
    ),
    (
        "import of a .py file that does not exist",
        _body_import('{ import = "helpers/bodies.py:step" }'),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn", "helpers/bodies.py", "no such file"],
    ),
    (
        "import of a module whose import raises",
        _body_import('{ import = "bodies:step" }', "raise RuntimeError('needs a GPU')\n"),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn", "bodies.py:1", "RuntimeError: needs a GPU"],
    ),
    (
        "import of a module whose package raises on import",
        _body_import('{ import = "steps.bodies:step" }', "raise RuntimeError('package needs a GPU')\n"),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn", "cannot import steps.bodies", "needs a GPU"],
    ),
    (
        "import value that is no string",
        _body_import("{ import = 3 }"),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn.import", "3 must be a string"],
    ),
    (
        "import value without a colon",
        _body_import('{ import = "bodies.step" }'),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn.import", "no ':' between the module and the attribute"],
    ),
    (
        "import value with another key",
        _body_import('{ import = "bodies:step", name = "step" }'),
        ["ops.py"],
        ["gradcheck.toml: functions.for_loop.constants.body_fn.name", "unknown key", "valid keys: import"],
    ),
    (
        "proxy in a module that is nowhere",
        _proxy('"noproxies:straight"'),
        ["ops.py"],
        ["gradcheck.toml: functions.square.proxy: noproxies:straight", "no module named 'noproxies'"],
    ),
    (
        "proxy the module lacks",
        _proxy('"proxies:straigth"'),
        ["ops.py"],
        ["gradcheck.toml: functions.square.proxy", "has no attribute 'straigth'", "did you mean 'straight'"],
    ),
    (
        "proxy that is no function",
        _proxy('"proxies:LIMIT"'),
        ["ops.py"],
        ["gradcheck.toml: functions.square.proxy: proxies:LIMIT is an int, not a function", "arguments of square"],
    ),
    (
        "proxy gradcheck does not ship",
        _proxy('"gradcheck.proxies:hardtanh"'),
        ["ops.py"],
        ["functions.square.proxy", "gradcheck.proxies has no proxy 'hardtanh'", "did you mean 'hard_tanh'"],
    ),
    (
        "proxy that is no string",
        _proxy("3"),
        ["ops.py"],
        ["gradcheck.toml: functions.square.proxy", "3 must be a string", 'proxy = "module:function"'],
    ),
    (
        "proxy without a colon",
        _proxy('"proxies.straight"'),
        ["ops.py"],
        ["gradcheck.toml: functions.square.proxy", "no ':' between the module and the attribute"],
    ),
    (
        "constant that neither the function nor its proxy takes",
        _proxy('"gradcheck.proxies:scale"', "constants = { scael = 0.5 }\n"),
        ["ops.py"],
        ["functions.square.constants.scael", "square has no argument 'scael'", "did you mean 'scale'"],
    ),
    (
        "proxy in another table that cannot be imported",
        _proxy('"proxies:straight"', '[functions.cube]\nproxy = "proxies:missing"\n'),
        ["ops.py::square"],
        ["gradcheck.toml: functions.cube.proxy: proxies:missing", "has no attribute 'missing'"],
    ),
    ("config file given with -c that does not exist", _good_module, ["ops.py", "-c", "nope.toml"], ["nope.toml"]),
    # -- options
    ("unknown option", _good_module, ["ops.py", "--shap", "x=3"], ["--shap", "--shape", "gradcheck run --help"]),
    ("option value not among the choices", _good_module, ["ops.py", "--dtype", "float8"], ["--dtype", "float8"]),
    ("negative --timeout", _good_module, ["ops.py", "--timeout", "-1"], ["--timeout", "-1"]),
    ("non-number --timeout", _good_module, ["ops.py", "--timeout", "soon"], ["--timeout", "soon"]),
    ("negative --max-memory", _good_module, ["ops.py", "--max-memory", "-5"], ["--max-memory", "-5"]),
    ("unknown --device", _good_module, ["ops.py", "--device", "tpu"], ["--device", "tpu"]),
    ("negative --dim", _good_module, ["ops.py", "--dim", "N=-3"], ["--dim", "N=-3", "positive integer"]),
    ("non-integer --dim", _good_module, ["ops.py", "--dim", "N=2.5"], ["--dim", "N=2.5", "positive integer"]),
    ("negative size in --shape", _good_module, ["ops.py", "--shape", "x=3,-1"], ["--shape", "x=3,-1"]),
    ("--maxfail 0", _good_module, ["ops.py", "--maxfail", "0"], ["--maxfail", "0"]),
    ("--seed below 0", _good_module, ["ops.py", "--seed", "-1"], ["--seed", "-1"]),
    (
        "--projections 0",
        _good_module,
        ["ops.py", "--projections", "0"],
        ["--projections", "0 must be a positive integer"],
    ),
    ("non-integer --projections", _good_module, ["ops.py", "--projections", "two"], ["--projections", "two"]),
    ("-q with -v", _good_module, ["ops.py", "-q", "-v"], ["-q and -v", "choose one"]),
    (
        "--shape-only with --mode full",
        _good_module,
        ["ops.py", "--shape-only", "--mode", "full"],
        ["--shape-only and --mode full", "drop one of them"],
    ),
    (
        "--shape-only with --order 2",
        _good_module,
        ["ops.py", "--shape-only", "--order", "2"],
        ["--shape-only and --order 2", "drop one of them"],
    ),
    ("no target", _good_module, [], ["Missing argument 'TARGET...'"]),
]


@pytest.mark.parametrize(("lay_out", "args", "fragments"), [pytest.param(*row[1:], id=row[0]) for row in BAD_INPUTS])
def test_bad_input_is_one_line_naming_the_culprit_and_exit_2(
    project: Path, lay_out: Callable[[Path], None], args: list[str], fragments: list[str]
) -> None:
    lay_out(project)
    result = invoke("run", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gradcheck: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_the_bad_inputs_are_all_different() -> None:
    assert len({row[0] for row in BAD_INPUTS}) == len(BAD_INPUTS)


def test_verbose_shows_the_traceback_of_an_import_that_failed_in_the_worker(project: Path) -> None:
    write(project, "ops.py", "import tensorflow as tf\n\ndef helper():\n    raise KeyError('missing')\n\nhelper()\n")
    result = invoke("run", "ops.py", "-v")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert 'ops.py", line 4, in helper' in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("gradcheck: error: ops.py:4: importing the module raised")


def test_device_gpu_without_a_gpu_is_a_usage_error(project: Path) -> None:
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    write(project, "ops.py", GOOD)
    result = invoke("run", "ops.py", "--device", "gpu")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradcheck: error: --device gpu: TensorFlow sees no GPU")
    write(project, "gradcheck.toml", 'device = "gpu"\n')
    result = invoke("run", "ops.py")
    assert result.exit_code == 2
    assert 'gradcheck.toml: device = "gpu": TensorFlow sees no GPU' in result.stderr
