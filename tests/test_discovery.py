"""Finding custom gradients in user modules, and leaving the interpreter as it was."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gradcheck.discovery import resolve_target
from gradcheck.errors import TargetError
from gradcheck.importing import load_module
from gradcheck.subjects import find_subjects, select
from tests.helpers import write

MODULE = """
    import tensorflow as tf
    from tensorflow import custom_gradient as cg
    from helper_ops import imported_op

    def plain(x):
        return x

    @tf.function
    @tf.custom_gradient
    def traced(x):
        def grad(dy):
            return dy
        return tf.identity(x), grad

    class Ops:
        def __init__(self, scale=2.0):
            self.scale = scale

        @tf.custom_gradient
        def scaled(self, x):
            def grad(dy):
                return self.scale * dy
            return self.scale * x, grad

        @staticmethod
        @tf.custom_gradient
        def static(x):
            def grad(dy):
                return dy
            return tf.identity(x), grad

    @tf.custom_gradient
    def first(x):
        def grad(dy):
            return dy
        return tf.identity(x), grad
"""

HELPER = """
    import tensorflow as tf

    @tf.custom_gradient
    def imported_op(x):
        def grad(dy):
            return dy
        return tf.identity(x), grad
"""


def test_finds_functions_methods_and_traced_in_definition_order(tmp_path: Path) -> None:
    write(tmp_path, "helper_ops.py", HELPER)
    path = write(tmp_path, "user_ops.py", MODULE)
    subjects = find_subjects(load_module(path), path)
    assert [s.name for s in subjects] == ["traced", "Ops.scaled", "Ops.static", "first"]
    traced = subjects[0]
    assert traced.decorators == ("tf.function", "custom_gradient")
    assert subjects[1].kind.name == "method" and subjects[1].owner.__name__ == "Ops"
    assert subjects[2].kind.name == "staticmethod"
    assert traced.line == path.read_text().splitlines().index("def traced(x):") + 1


def test_loading_leaves_sys_modules_and_path_as_they_were(tmp_path: Path) -> None:
    write(tmp_path, "helper_ops.py", HELPER)
    path = write(tmp_path, "user_ops.py", MODULE)
    modules, syspath = set(sys.modules), list(sys.path)
    load_module(path)
    assert sys.path == syspath
    assert not {"user_ops", "helper_ops"} & set(sys.modules)
    assert set(sys.modules) - modules <= {m for m in sys.modules if not m.startswith(("user_ops", "helper_ops"))}


def test_package_modules_import_with_relative_imports(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/base.py", HELPER)
    path = write(tmp_path, "pkg/ops.py", "from .base import imported_op\nfrom . import base\n")
    module = load_module(path)
    assert module.__name__ == "pkg.ops"
    assert find_subjects(module, path) == []  # imported, not defined here
    base = tmp_path / "pkg" / "base.py"
    assert [s.name for s in find_subjects(load_module(base), base)] == ["imported_op"]
    assert "pkg" not in sys.modules


def test_a_file_named_like_a_standard_module(tmp_path: Path) -> None:
    path = write(tmp_path, "random.py", HELPER)
    module = load_module(path)
    assert [s.name for s in find_subjects(module, path)] == ["imported_op"]
    import random

    assert hasattr(random, "shuffle")


def test_module_prints_go_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "noisy.py", "print('hello from the user')\n")
    load_module(path)
    captured = capsys.readouterr()
    assert captured.out == "" and "hello from the user" in captured.err


def test_select_by_name_and_class(tmp_path: Path) -> None:
    write(tmp_path, "helper_ops.py", HELPER)
    path = write(tmp_path, "user_ops.py", MODULE)
    subjects = find_subjects(load_module(path), path)
    assert [s.name for s in select(subjects, "Ops", "user_ops.py::Ops")] == ["Ops.scaled", "Ops.static"]
    with pytest.raises(TargetError, match=r"no function or layer named 'frist' \(did you mean 'first'\?\)"):
        select(subjects, "frist", "user_ops.py::frist")


def test_directory_targets_only_import_files_that_mention_custom_gradient(tmp_path: Path) -> None:
    write(tmp_path, "a.py", HELPER)
    write(tmp_path, "b.py", "raise SystemExit('must never be imported')\n")
    target = resolve_target(str(tmp_path))
    assert [f.name for f in target.files] == ["a.py"]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("missing.py", "no such file"),
        ("no_such_module_xyz", "no such file, directory or module"),
        ("::f", "empty target"),
    ],
)
def test_bad_targets(spec: str, fragment: str) -> None:
    with pytest.raises(TargetError, match=fragment):
        resolve_target(spec)


def test_module_level_exception_is_a_target_error(tmp_path: Path) -> None:
    path = write(tmp_path, "boom.py", "x = 1\nraise RuntimeError('boom at import')\n")
    with pytest.raises(TargetError, match=r"boom.py:2: importing the module raised RuntimeError: boom at import"):
        load_module(path)
