"""Custom gradients made as a function runs: nested, aliased, behind helpers, in layers (issue 10).

The fixture module is tests/fixtures/nested/nested_ops.py; each form comes
right and wrong. Each is checked through its public function: the custom
gradient it reaches against native autodiff of the same function with that
custom gradient switched off, and against finite differences.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import gradcheck
from tests.helpers import BODIES, FOR_LOOP, blamed, by_name, copy_fixture, invoke, load_copy, run_json, write

VALUES = {("native", "x"), ("numeric", "x")}
# name -> (status, {(check, input)}) in fast and full mode
VERDICTS: dict[str, tuple[str, set[tuple[str, str | None]]]] = {
    "softplus_nested": ("passed", set()),
    "softplus_nested_wrong": ("failed", VALUES),
    "square_by_global": ("passed", set()),
    "square_by_global_wrong": ("failed", VALUES),
    "cube_by_module_attribute": ("passed", set()),
    "cube_by_module_attribute_wrong": ("failed", VALUES),
    "product_by_alias": ("passed", set()),
    "product_by_alias_wrong": ("failed", VALUES | {("native", "y"), ("numeric", "y")}),
    "exp_in_function": ("passed", set()),
    "exp_in_function_wrong": ("failed", VALUES),
    "sin_inner_function": ("passed", set()),
    "sin_inner_function_wrong": ("failed", VALUES),
    "tanh_by_factory": ("passed", set()),
    "tanh_by_factory_wrong": ("failed", VALUES),
    "leaky_with_keyword": ("passed", set()),
    "leaky_with_keyword_wrong": ("failed", VALUES),
    "square_by_keras": ("passed", set()),
    "square_by_keras_wrong": ("failed", VALUES),
    "rounded": ("passed", set()),
    "plain_cosh": ("passed", set()),
    "Scaler.apply": ("passed", set()),
    "Scaler.apply_wrong": ("failed", VALUES),
    "Holder.double": ("passed", set()),
    "Holder.double_wrong": ("failed", VALUES),
    "MethodDense": ("passed", set()),
    "MethodDenseWrong": ("failed", {("variables", "kernel")}),
    "NestedScale": ("passed", set()),
    "NestedScaleWrong": ("failed", {("native", "scale"), ("numeric", "scale")}),
}
#: What --shape-only still catches: a variable gradient of the wrong shape.
SHAPE_ONLY_FAILS = {"MethodDenseWrong": {("variables", "kernel")}}


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_fixture("nested", tmp_path_factory.mktemp("nested"))


@pytest.fixture(scope="module")
def report(nested: Path) -> dict[str, dict[str, Any]]:
    return by_name(run_json(str(nested / "nested_ops.py"), "-c", str(nested / "gradcheck.toml")))


def test_every_form_is_found_and_nothing_else(report: dict[str, Any], nested: Path) -> None:
    assert set(report) == set(VERDICTS)  # not the factory my_custom_gradient, not the class Scaler
    assert report["MethodDense"]["kind"] == "layer" and report["NestedScale"]["kind"] == "layer"
    listed = invoke("list", str(nested / "nested_ops.py"), "-c", str(nested / "gradcheck.toml")).stdout
    assert "::softplus_nested(" in listed and "my_custom_gradient" not in listed


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdicts_fast_mode(report: dict[str, Any], name: str) -> None:
    status, problems = VERDICTS[name]
    assert report[name]["status"] == status, report[name]["problems"]
    assert blamed(report[name]) == problems


def test_verdicts_full_mode(nested: Path) -> None:
    full = by_name(run_json(str(nested / "nested_ops.py"), "-c", str(nested / "gradcheck.toml"), "--mode", "full"))
    got = {name: (r["status"], blamed(r)) for name, r in full.items()}
    assert got == VERDICTS


def test_verdicts_shape_only(nested: Path) -> None:
    quick = by_name(run_json(str(nested / "nested_ops.py"), "-c", str(nested / "gradcheck.toml"), "--shape-only"))
    got = {name: blamed(r) for name, r in quick.items() if r["status"] != "passed"}
    assert got == SHAPE_ONLY_FAILS
    assert set(quick) == set(VERDICTS)


def _backward_line(nested: Path, function: str, marker: str) -> int:
    """The line of ``marker`` (a backward def) inside ``function`` in the fixture."""
    lines = (nested / "nested_ops.py").read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if text.startswith(f"def {function}("))
    return next(i for i in range(start, len(lines)) if marker in lines[i]) + 1


def test_the_report_names_the_inner_function_and_its_backward_line(report: dict[str, Any], nested: Path) -> None:
    wrong = report["softplus_nested_wrong"]
    line = _backward_line(nested, "softplus_nested_wrong", "def grad(dy)")
    assert wrong["custom_gradients"] == [
        {"function": "inner", "backward_line": line, "backward_file": str((nested / "nested_ops.py").resolve())}
    ]
    assert f"custom gradient reached: inner (backward at nested_ops.py:{line})" in " ".join(wrong["notes"])
    assert "native reference: softplus_nested_wrong with it switched off" in " ".join(wrong["notes"])
    # The problems blame the outer function's argument.
    assert {p["input"] for p in wrong["problems"]} == {"x"}
    text = invoke("run", str(nested / "nested_ops.py::softplus_nested_wrong"), "-c", str(nested / "gradcheck.toml"))
    assert f"backward at nested_ops.py:{line}" in text.stdout
    github = invoke(
        "run",
        str(nested / "nested_ops.py::softplus_nested_wrong"),
        "-c",
        str(nested / "gradcheck.toml"),
        "--format",
        "github",
    ).stdout
    assert re.search(rf"::error file=[^,]*nested_ops.py,line={line}\b", github), github


def test_tfp_style_helper_and_factory_name_the_users_functions(report: dict[str, Any]) -> None:
    assert report["tanh_by_factory"]["custom_gradients"][0]["function"] == "wrapped"
    assert report["Scaler.apply"]["custom_gradients"][0]["function"] == "<lambda>"
    assert report["MethodDense"]["custom_gradients"][0]["function"] == "_matmul"


def test_named_function_reaching_no_custom_gradient_is_checked_against_finite_differences(
    report: dict[str, Any],
) -> None:
    result = report["plain_cosh"]
    assert result["status"] == "passed"
    assert any("reaches no tf.custom_gradient" in n and "finite differences only" in n for n in result["notes"])
    assert "custom_gradients" not in result


def test_a_required_python_value_is_asked_for_with_the_config_line(nested: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    document = run_json(str(nested / "nested_ops.py::rounded"), "-c", str(empty))
    result = document["results"][0]
    assert result["status"] == "skipped"
    assert "argument mode is a Python value" in result["skip_reason"]
    assert "[functions.rounded] constants = { mode = ... }" in result["skip_reason"]


def test_a_candidate_that_reaches_none_when_called_is_skipped_not_failed(project: Path) -> None:
    (project / "lazy.py").write_text(
        "import tensorflow as tf\n\n\n"
        "def maybe(x, use_custom=False):\n"
        "    if use_custom:\n"
        "        return tf.custom_gradient(lambda v: (v * v, lambda dy: 2.0 * v * dy))(x)\n"
        "    return x * x\n",
        encoding="utf-8",
    )
    result = run_json("lazy.py")["results"][0]
    assert result["status"] == "skipped"
    assert "reached no tf.custom_gradient" in result["skip_reason"] and "[functions.maybe]" in result["skip_reason"]


DEEP_HELPERS = """
import tensorflow as tf


def _make_custom(forward):
    # A decorator like TensorFlow Probability's: it makes the custom gradient on each call.
    def wrapped(x):
        return tf.custom_gradient(forward)(x)

    return wrapped


@_make_custom
def _square_custom(x):
    def grad(dy):
        return 2.0 * x * dy

    return x * x, grad


def outer(x):
    return _one(x)


def _one(x):
    return _two(x)


def _two(x):
    return _three(x)


def _three(x):
    return _four(x)


def _four(x):
    return _five(x)


def _five(x):
    return square(x)


def square(x):
    return _square_custom(x)
"""


def test_a_function_reached_deep_below_another_is_still_found_on_its_own(project: Path) -> None:
    # outer reaches square six calls down, past the depth discovery follows; that must not hide square
    # itself (as TFP's lbeta was hidden by betainc, which calls it).
    write(project, "deep.py", DEEP_HELPERS)
    listed = invoke("list", "deep.py")
    assert listed.exit_code == 0, listed.output
    assert "deep.py::square(x)" in listed.stdout
    assert {r["name"]: r["status"] for r in run_json("deep.py")["results"]}["square"] == "passed"


RECURSIVE_HELPERS = """
import tensorflow as tf


@tf.custom_gradient
def _square_custom(x):
    return x * x, lambda dy: 2.0 * x * dy


def walk(x, n=2):
    if n > 0:
        return _descend(x, n)
    return _square_custom(x)


def other(x):
    return _descend(x, 1)


def _descend(x, n):
    return walk(x, n - 1)


def spin(x, n=2):
    return turn(x, n)


def turn(x, n):
    return spin(x, n - 1) if n > 0 else x
"""


def test_functions_that_call_each_other_are_found_where_one_reaches_a_custom_gradient(project: Path) -> None:
    # walk's visit meets _descend, whose call back into walk says "no" while walk's own answer is not known
    # yet: remembered, that "no" would hide other, which reaches walk's custom gradient through _descend.
    write(project, "recursive.py", RECURSIVE_HELPERS)
    listed = invoke("list", "recursive.py")
    assert listed.exit_code == 0, listed.output
    assert "recursive.py::walk(x, n=2)" in listed.stdout and "recursive.py::other(x)" in listed.stdout
    assert "spin" not in listed.stdout and "turn" not in listed.stdout


def test_discovery_reads_each_helper_below_the_depth_bound_once_for_every_public_function(
    tmp_path: Path,
) -> None:
    # Fifty public functions share a ring of helpers longer than discovery follows, reaching nothing.
    # Each helper's "no within this many calls" is kept: without it every public function walked the whole
    # chain again (TensorFlow's own modules took minutes to list).
    from gradcheck.nesting import _MAX_DEPTH, NestingReader, candidates

    chain = "".join(f"def _h{i}(x):\n    return _h{i + 1}(x)\n\n\n" for i in range(10))
    public = "".join(f"def f{i}(x):\n    return _h0(x)\n\n\n" for i in range(50))
    # The chain ends where it began: no walk of it ends within the bound.
    module = load_copy(write(tmp_path, "chained.py", f"{chain}def _h10(x):\n    return _h0(x)\n\n\n{public}"))

    class CountingReader(NestingReader):
        visits = 0

        def _marked(self, names: list[str]) -> bool:
            CountingReader.visits += 1
            return super()._marked(names)

    assert candidates(module, set(), CountingReader(module)) == []
    # Each public function once; each helper at most once for every depth it is met at (discovery asks
    # about the private helpers too, each from its own depth 0). Walking the chain again for every
    # public function is 50 * 7 visits.
    assert CountingReader.visits <= 50 + 11 * (_MAX_DEPTH + 1), CountingReader.visits


def test_an_attribute_named_like_a_custom_gradient_of_the_module_is_not_a_call_of_it(project: Path) -> None:
    # tf.math.square is not the module's square: reading its name as an attribute made plain a target
    # that then "reached no tf.custom_gradient when called" (as TFP's reduce_logmeanexp and a py_func
    # recipe's registered gradient function were).
    write(
        project,
        "names.py",
        """
        import tensorflow as tf


        def square(x):
            @tf.custom_gradient
            def inner(v):
                return v * v, lambda dy: 2.0 * v * dy

            return inner(x)


        def plain(x):
            return tf.math.square(x) + 1.0
        """,
    )
    listed = invoke("list", "names.py")
    assert listed.exit_code == 0, listed.output
    assert "names.py::square(x)" in listed.stdout and "plain" not in listed.stdout


def test_a_module_named_like_the_decorator_is_not_the_decorator(project: Path) -> None:
    # TensorFlow's own code reads custom_gradient.generate_name() from the module custom_gradient: the
    # module's name is not the decorator that module holds (saved_model_cli's main and show, TFLite's
    # converters and SavedModel loading were taken for functions making custom gradients).
    write(
        project,
        "modules.py",
        """
        from tensorflow.python.ops import custom_gradient


        def renamed(x):
            return custom_gradient.generate_name(), x


        def decorated(x):
            return custom_gradient.custom_gradient(lambda v: (v * v, lambda dy: 2.0 * v * dy))(x)
        """,
    )
    listed = invoke("list", "modules.py")
    assert listed.exit_code == 0, listed.output
    assert "modules.py::decorated(x)" in listed.stdout and "renamed" not in listed.stdout


def test_a_wrapper_chain_that_loops_is_read_as_no_source(project: Path) -> None:
    # inspect.unwrap raises on a __wrapped__ chain that loops: discovery must read such a function as one
    # without source, not stop with an internal error.
    write(
        project,
        "loops.py",
        """
        import tensorflow as tf


        def f(x):
            return x


        def g(x):
            return x


        f.__wrapped__ = g
        g.__wrapped__ = f


        def square(x):
            return tf.custom_gradient(lambda v: (v * v, lambda dy: 2.0 * v * dy))(x)
        """,
    )
    listed = invoke("list", "loops.py")
    assert listed.exit_code == 0, listed.output
    assert "loops.py::square(x)" in listed.stdout


CHECK: dict[str, dict[str, Any]] = {
    "softplus_nested": {"inputs": {"x": (4,)}},
    "softplus_nested_wrong": {"inputs": {"x": (4,)}},
    "product_by_alias_wrong": {"inputs": {"x": (3,), "y": (3,)}},
    "exp_in_function": {"inputs": {"x": (3,)}},
    "tanh_by_factory_wrong": {"inputs": {"x": (3,)}},
    "square_by_keras": {"inputs": {"x": (3,)}},
    "leaky_with_keyword_wrong": {"inputs": {"x": (6,)}},
}


@pytest.mark.parametrize("name", sorted(CHECK))
def test_same_verdicts_through_the_python_api(nested: Path, name: str) -> None:
    module = load_copy(nested / "nested_ops.py")
    result = gradcheck.check(getattr(module, name), **CHECK[name])
    status, problems = VERDICTS[name]
    assert (result.status, {(p.check, p.input) for p in result.problems}) == (status, problems)
    assert any(n.startswith("custom gradient reached: ") for n in result.notes)


def test_layers_through_the_python_api(nested: Path) -> None:
    module = load_copy(nested / "nested_ops.py")
    assert gradcheck.check(module.NestedScale, inputs={"x": (4, 3)}).status == "passed"
    wrong = gradcheck.check(module.NestedScaleWrong, inputs={"x": (4, 3)})
    assert {(p.check, p.input) for p in wrong.problems} == {("native", "scale"), ("numeric", "scale")}
    assert gradcheck.check(module.MethodDense, inputs={"x": (4, 2)}).status == "passed"


def test_several_names_in_one_file_reaching_no_custom_gradient_are_each_checked(project: Path) -> None:
    (project / "plain.py").write_text(
        "import tensorflow as tf\n\n\ndef a(x):\n    return tf.sin(x)\n\n\ndef b(x):\n    return tf.cos(x)\n",
        encoding="utf-8",
    )
    document = run_json("plain.py::a", "plain.py::b")
    assert [(r["name"], r["status"]) for r in document["results"]] == [("a", "passed"), ("b", "passed")]


# -- a Python callable as an argument (issue 18, items 6 and 8) ---------------------------------


def _for_loop_config(body: str, tables: tuple[str, ...] = ("for_loop", "for_loop_skipping_the_first_step")) -> str:
    return "".join(
        f"[functions.{name}]\ninputs = {{ initial_state = [5] }}\n"
        f"constants = {{ body_fn = {{ import = {body!r} }}, num_iterations = 3 }}\n\n".replace("'", '"')
        for name in tables
    )


def test_a_callable_given_by_import_checks_a_for_loop_right_and_wrong(project: Path) -> None:
    write(project, "ops.py", FOR_LOOP)
    write(project, "bodies.py", BODIES)
    write(project, "gradcheck.toml", _for_loop_config("bodies:step"))
    report = by_name(run_json("ops.py"))
    assert report["for_loop"]["status"] == "passed", report["for_loop"]
    wrong = report["for_loop_skipping_the_first_step"]
    assert wrong["status"] == "failed"
    assert blamed(wrong) == {("native", "initial_state"), ("numeric", "initial_state")}
    # A dotted attribute: a static method of a class of the module.
    write(project, "gradcheck.toml", _for_loop_config("bodies:Steps.cubic"))
    report = by_name(run_json("ops.py"))
    assert [report[name]["status"] for name in sorted(report)] == ["passed", "failed"]


def test_a_callable_from_a_py_path_read_from_the_config_folder(project: Path) -> None:
    write(project, "src/ops.py", FOR_LOOP)
    write(project, "helpers/bodies.py", BODIES)  # no package: reached by its path only
    write(project, "gradcheck.toml", _for_loop_config("helpers/bodies.py:step", ("for_loop",)))
    report = by_name(run_json("src/ops.py::for_loop"))
    assert report["for_loop"]["status"] == "passed", report["for_loop"]


def test_a_dotted_module_is_found_beside_the_target(project: Path) -> None:
    write(project, "src/ops.py", FOR_LOOP)
    write(project, "src/bodies.py", BODIES)  # importable from the target's folder, not the config's
    write(project, "gradcheck.toml", _for_loop_config("bodies:step", ("for_loop",)))
    assert by_name(run_json("src/ops.py::for_loop"))["for_loop"]["status"] == "passed"
    listed = invoke("list", "src/ops.py::for_loop").stdout
    assert "body_fn = bodies.step (constant)" in listed and "num_iterations = 3 (constant)" in listed


def test_as_a_subprocess_a_right_and_a_wrong_for_loop_exit_1(project: Path) -> None:
    import json
    import subprocess
    import sys

    write(project, "ops.py", FOR_LOOP)
    write(project, "bodies.py", BODIES)
    write(project, "gradcheck.toml", _for_loop_config("bodies:step"))
    done = subprocess.run(
        [sys.executable, "-m", "gradcheck", "run", "ops.py", "--format", "json"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    statuses = {r["name"]: r["status"] for r in json.loads(done.stdout)["results"]}
    assert statuses == {"for_loop": "passed", "for_loop_skipping_the_first_step": "failed"}


def test_a_callable_parameter_is_asked_for_in_the_import_form_and_the_hint_leads_to_a_check(project: Path) -> None:
    write(project, "ops.py", FOR_LOOP)
    write(project, "bodies.py", BODIES)
    result = run_json("ops.py::for_loop")["results"][0]
    assert result["status"] == "skipped"
    reason = result["skip_reason"]
    assert "body_fn (a Python callable: called as body_fn(...))" in reason
    assert "num_iterations (a Python value: a loop count, range(num_iterations))" in reason
    line = '[functions.for_loop] constants = { body_fn = { import = "your_module:body_fn" }, num_iterations = ... }'
    assert reason.endswith(f"add to {project / 'gradcheck.toml'}: {line}"), reason
    # Following the hint as written, with the user's module and count filled in, checks the function.
    table, _, constants = line.partition(" ")
    filled = constants.replace("your_module:body_fn", "bodies:step").replace("...", "3")
    write(project, "gradcheck.toml", f"{table}\n{filled}\n")
    result = run_json("ops.py::for_loop")["results"][0]
    assert result["status"] == "passed", result
    assert any("no shapes configured: using guessed shapes initial_state=" in note for note in result["notes"])


def test_through_the_api_a_callable_is_passed_as_it_is_or_imported_and_leaves_no_module_behind(
    project: Path,
) -> None:
    import sys

    write(project, "ops.py", FOR_LOOP)
    write(project, "bodies.py", BODIES)
    module = load_copy(project / "ops.py")
    bodies = load_copy(project / "bodies.py")
    skipped = gradcheck.check(module.for_loop, constants={"num_iterations": 2})
    assert skipped.status == "skipped" and "body_fn" in (skipped.skip_reason or "")
    assert module.seen == []  # probing never called it with a tensor for body_fn
    given = gradcheck.check(
        module.for_loop, inputs={"initial_state": (4,)}, constants={"body_fn": bodies.step, "num_iterations": 2}
    )
    assert given.status == "passed", given.problems
    path = list(sys.path)
    imported = gradcheck.check(
        module.for_loop_skipping_the_first_step,
        inputs={"initial_state": (4,)},
        constants={"body_fn": {"import": "bodies:step"}, "num_iterations": 2},
    )
    assert imported.status == "failed"
    assert "bodies" not in sys.modules and sys.path == path


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(fn, x):\n    return fn(x)\n", {"fn": (True, "called as fn(...)")}),
        (
            "def f(body, x):\n    def step(y):\n        return body(y)\n    return step(x)\n",
            {"body": (True, "called as body(...)")},
        ),
        ("def f(g: Callable[[int], int], x):\n    return x\n", {"g": (True, "annotated Callable[[int], int]")}),
        ("def f(g: typing.Callable, x):\n    return x\n", {"g": (True, "annotated typing.Callable")}),
        (
            "def f(g: 'collections.abc.Callable', x):\n    return x\n",
            {"g": (True, "annotated 'collections.abc.Callable'")},
        ),
        (
            "def f(x, n):\n    for i in range(n):\n        x = x * 2\n    return x\n",
            {"n": (False, "a loop count, range(n)")},
        ),
        (
            "def f(x, n):\n    return tf.while_loop(c, b, [x], maximum_iterations=n)\n",
            {"n": (False, "a loop count, maximum_iterations=n")},
        ),
        ("def f(x, n: int):\n    return x\n", {"n": (False, "annotated int")}),
        (
            "def f(x, bits):\n    if bits == 32:\n        return x\n    return tf.round(x * bits)\n",
            {"bits": (False, "compared with 32 in a Python condition")},
        ),
        # Not Python values: a tensor argument used by TensorFlow, and a name a nested function takes as its own.
        ("def f(fn, x):\n    return tf.map_fn(fn, x)\n", {}),
        ("def f(x, body):\n    def inner(body):\n        return body(x)\n    return tf.sin(body)\n", {}),
        ("def f(x):\n    return x.numpy()[0] + tf.shape(x)[0]\n", {}),
        ("def f(x, y):\n    return tf.where(x == 0, y, x) if y is not None else x\n", {}),
    ],
)
def test_python_valued_parameters_are_read_from_the_code(
    tmp_path: Path, source: str, expected: dict[str, tuple[bool, str]]
) -> None:
    from gradcheck.source_reading import non_tensor_parameters

    path = tmp_path / f"shapes_{abs(hash(source))}.py"
    path.write_text("import collections.abc, typing\nfrom typing import Callable\nimport tensorflow as tf\n\n" + source)
    found = non_tensor_parameters(load_copy(path).f)
    assert {name: (p.callable, p.reason) for name, p in found.items()} == expected
