"""``gradcheck init``: a starter config written from probing, then run as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradcheck.config_files import read_config_file, tomllib
from gradcheck.starter import StarterEntry, StarterInput, render_starter, toml_key
from tests.helpers import BODIES, FOR_LOOP, invoke, run_json, write

MODULE = """
    import tensorflow as tf


    @tf.custom_gradient
    def custom_op(A, W):
        def grad(dy):
            return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)
        return tf.matmul(A, W), grad


    @tf.custom_gradient
    def log_of(x):
        def grad(dy):
            return dy / x
        return tf.math.log(x), grad


    @tf.custom_gradient
    def picky(x):
        tf.debugging.assert_equal(tf.shape(x), [7, 11])
        def grad(dy):
            return dy
        return tf.identity(x), grad


    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        @tf.custom_gradient
        def apply(self, x):
            def grad(dy):
                return dy * self.factor
            return x * self.factor, grad
"""


def test_init_then_run_works_without_edits(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    write(project, "ops.py", MODULE)
    result = invoke("init", "ops.py")
    assert result.exit_code == 0, result.output
    assert (
        result.stdout.strip() == "wrote gradcheck.toml: 4 functions, 2 with guessed shapes, 2 to fill in (marked TODO)"
    )
    path = project / "gradcheck.toml"
    text = path.read_text()
    assert "inputs = { A = [3, 4], W = [4, 5] }  # guessed" in text
    assert 'inputs = { x = { shape = [3, 4], distribution = "positive" } }  # guessed' in text
    assert "[functions.picky]\n# TODO: no guessed shapes worked" in text
    assert '[functions."Scaler.apply"]\n# TODO: Scaler(...) needs constructor arguments' in text
    # The project's own loader reads it.
    config = read_config_file(path)
    assert set(config.functions) == {"custom_op", "log_of", "picky", "Scaler.apply"}
    assert config.functions["custom_op"].inputs["A"].shape == (3, 4)
    # Run with the file as written: the inferred shapes are used as configured, not guessed again.
    report = run_json("ops.py")
    results = {r["name"]: r for r in report["results"]}
    assert results["custom_op"]["status"] == "passed"
    assert results["custom_op"]["inputs"] == [
        {"name": "A", "shape": [3, 4], "dtype": "float64"},
        {"name": "W", "shape": [4, 5], "dtype": "float64"},
    ]
    assert "notes" not in results["custom_op"]
    assert results["log_of"]["status"] == "passed"
    assert results["picky"]["status"] == "skipped"
    assert results["Scaler.apply"]["status"] == "skipped"  # needs init = {...}: marked TODO


def test_init_never_overwrites_without_force(project: Path) -> None:
    write(project, "ops.py", MODULE)
    config = project / "gradcheck.toml"
    config.write_text("# mine\nseed = 3\n")
    refused = invoke("init", "ops.py")
    assert refused.exit_code == 2
    lines = refused.stderr.strip().splitlines()
    assert lines == [
        "gradcheck: error: gradcheck.toml: already exists; pass --force to overwrite it, or -o to write elsewhere"
    ]
    assert config.read_text() == "# mine\nseed = 3\n"
    forced = invoke("init", "ops.py", "--force")
    assert forced.exit_code == 0
    assert config.read_text().startswith("# Starter config written by `gradcheck init ops.py`.")


def test_init_writes_where_told(project: Path) -> None:
    write(project, "ops.py", MODULE)
    result = invoke("init", "ops.py::custom_op", "-o", "configs/starter.toml")
    assert result.exit_code == 0
    written = project / "configs" / "starter.toml"
    assert "-o configs/starter.toml" in written.read_text().splitlines()[0]
    assert set(read_config_file(written).functions) == {"custom_op"}
    assert invoke("run", "ops.py::custom_op", "-c", "configs/starter.toml").exit_code == 0


@pytest.mark.parametrize("output", ["ops.py", "pyproject.toml"])
def test_init_refuses_modules_and_pyproject(project: Path, output: str) -> None:
    module = write(project, "ops.py", MODULE)
    before = module.read_text()
    result = invoke("init", "ops.py", "-o", output, "--force")
    assert result.exit_code == 2
    assert "gradcheck init writes a gradcheck.toml of its own" in result.stderr
    assert module.read_text() == before


def test_init_with_nothing_to_check_writes_nothing(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    write(project, "plain.py", "def plain(x):\n    return x\n")
    result = invoke("init", "plain.py")
    assert result.exit_code == 5
    assert not (project / "gradcheck.toml").exists()


def test_init_ignores_a_broken_config_it_replaces(project: Path) -> None:
    write(project, "ops.py", MODULE)
    (project / "gradcheck.toml").write_text("sed = 1\n")
    assert invoke("run", "ops.py").exit_code == 2
    assert invoke("init", "ops.py", "--force").exit_code == 0
    assert "seed = 0" in (project / "gradcheck.toml").read_text()


def test_starter_text_quotes_keys_and_keeps_comments_on_one_line() -> None:
    assert toml_key("custom_op") == "custom_op"
    assert toml_key("Ops.apply") == '"Ops.apply"'
    entries = [
        StarterEntry("functions", "f", "a.py::f", inputs=(StarterInput("x", (3,)),)),
        StarterEntry("functions", "f", "b.py::f", inputs=(StarterInput("x", (4,)),)),
        StarterEntry("layers", "Dense2", "a.py::Dense2", failure="raised\nValueError: two\nlines"),
    ]
    text = render_starter(entries, "gradcheck init a.py b.py")
    assert text.count("[functions.f]") == 1  # a table is keyed by name: one for both modules
    assert "# a.py::f (the same table applies to b.py::f)" in text
    assert "[layers.Dense2]\n# TODO: raised ValueError: two lines\n" in text
    assert tomllib.loads(text)["functions"]["f"]["inputs"] == {"x": [3]}


def test_init_writes_placeholders_with_the_real_argument_names(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    write(
        project,
        "layers.py",
        """
        import keras
        import tensorflow as tf

        @tf.custom_gradient
        def custom_op(A, W):
            def grad(dy):
                return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)
            return tf.matmul(A, W), grad

        class Dense(keras.layers.Layer):
            def __init__(self, out_dim, **kwargs):
                super().__init__(**kwargs)
                self.out_dim = out_dim

            def build(self, input_shape):
                self.W = self.add_weight(shape=(input_shape[-1], self.out_dim))

            def call(self, A):
                return custom_op(A, tf.convert_to_tensor(self.W))
        """,
    )
    assert invoke("init", "layers.py").exit_code == 0
    text = (project / "gradcheck.toml").read_text()
    assert "[layers.Dense]\n# TODO: Dense(...) needs constructor arguments" in text
    assert "# init = { out_dim = ... }" in text
    assert "# inputs = { A = [4, 5] }" in text
    assert "# constants" not in text  # no argument here is a Python value


def test_init_asks_for_the_arguments_list_shows_never_self_or_cls(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    write(
        project,
        "bound_ops.py",
        """
        import tensorflow as tf

        def _only_7_by_13(x):
            @tf.custom_gradient
            def inner(x):
                return tf.reshape(x, (91,)) * 2.0, lambda dy: tf.reshape(dy * 2.0, (7, 13))

            return inner(x)

        class Ops:
            @classmethod
            def of_class(cls, x):
                return _only_7_by_13(x)

            def of_instance(this, x):
                return _only_7_by_13(x)
        """,
    )
    listed = invoke("list", "bound_ops.py").stdout
    assert "Ops.of_class(x)  [function]" in listed and "Ops.of_instance(x)  [function]" in listed
    assert invoke("init", "bound_ops.py").exit_code == 0
    text = (project / "gradcheck.toml").read_text()
    # The first parameter is bound by the check (the class, an instance), whatever its name: no shape for it.
    assert text.count("# inputs = { x = [4, 5] }  # the shape of each argument, in order") == 2


def test_starter_todo_gives_python_values_as_constants_and_documented_lists_as_items() -> None:
    entry = StarterEntry(
        table="functions",
        name="for_loop",
        id="loops.py::for_loop",
        failure="arguments body_fn and n are not tensors",
        constants=(("body_fn", '{ import = "your_module:body_fn" }'), ("n", "...")),
        parameters=("body_fn", "initial_state", "scale", "n"),
        lists=("initial_state",),
    )
    lines = render_starter([entry], "gradcheck init loops.py").splitlines()
    todo = lines[lines.index("[functions.for_loop]") + 1 :]
    assert todo == [
        "# TODO: arguments body_fn and n are not tensors",
        '# constants = { body_fn = { import = "your_module:body_fn" }, n = ... }'
        "  # Python values; a function is imported from your code",
        "# inputs = { initial_state = { items = [[4, 5], [4, 5]] }, scale = [4, 5] }"
        "  # the shape of each argument, in order",
    ]


def test_init_writes_a_callable_argument_as_an_import_todo_and_the_file_stays_valid(project: Path) -> None:
    (project / "gradcheck.toml").unlink()
    write(project, "ops.py", FOR_LOOP)
    write(project, "bodies.py", BODIES)
    assert invoke("init", "ops.py::for_loop").exit_code == 0
    path = project / "gradcheck.toml"
    text = path.read_text()
    todo = '# constants = { body_fn = { import = "your_module:body_fn" }, num_iterations = ... }'
    assert "[functions.for_loop]\n# TODO: arguments body_fn (a Python callable: called as body_fn(...))" in text
    assert f"\n{todo}  # Python values; a function is imported from your code\n" in text
    assert "\n# inputs = { initial_state = [4, 5] }  # the shape of each argument, in order\n" in text
    assert read_config_file(path).functions["for_loop"].constants == {}  # the TODOs are comments
    # The TODO filled in as it says: the function is checked.
    filled = todo[2:].replace("your_module:body_fn", "bodies:step").replace("...", "2")
    path.write_text(text.replace(todo, filled), encoding="utf-8")
    assert run_json("ops.py::for_loop")["results"][0]["status"] == "passed"


def test_the_command_in_the_starter_comment_is_shell_quoted_and_one_line(project: Path) -> None:
    folder = "odd dir\n[functions.injected]"
    write(project / folder, "ops.py", MODULE)
    result = invoke("init", f"{folder}/ops.py", "-o", "out.toml")
    assert result.exit_code == 0, result.output
    text = (project / "out.toml").read_text()
    first = text.splitlines()[0]
    assert first == "# Starter config written by `gradcheck init 'odd dir\\n[functions.injected]/ops.py' -o out.toml`."
    assert tomllib.loads(text).get("functions", {}).get("injected") is None
