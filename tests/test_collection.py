"""Collection on whole repositories: walks decided from the source, import failures as results, excludes,
packages by name, one result per object, and the collection line of the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gradcheck import walk
from tests.helpers import GOOD_AND_BAD, by_name, invoke, run_json, write

CUSTOM = """
import tensorflow as tf


@tf.custom_gradient
def square(x):
    def grad(dy):
        return 2.0 * x * dy
    return x * x, grad
"""

WRONG = CUSTOM.replace("2.0 * x * dy", "3.0 * x * dy")


def _lay_out_repository(root: Path) -> None:
    """A repository as users have them: a package, its tests, a docs tool, an example that cannot import."""
    write(root, "mylib/__init__.py", "from mylib.core import square\n")
    write(root, "mylib/core.py", CUSTOM)
    write(
        root,
        "mylib/layers.py",
        """
        import tensorflow as tf
        from mylib import core


        class Squares(tf.keras.layers.Layer):
            def call(self, x):
                return core.square(x)


        SquaresAlias = Squares
        """,
    )
    write(root, "mylib/notes.py", "# Layer and custom_gradient, mentioned in a comment only\nVALUE = 1\n")
    write(root, "mylib/broken.py", "import tensorflow as tf\nimport not_installed_anywhere\n" + CUSTOM)
    write(root, "tests/test_core.py", "import snapshottest\nfrom mylib.core import square\n\ndef test_it(): pass\n")
    write(root, "docs/build_docs.py", "import tensorflow_docs\nfrom mylib import core\n\ndef main(): pass\n")


# -- the walk, from the source alone ----------------------------------------------------------


def test_markers_count_in_code_only(tmp_path: Path) -> None:
    code = write(tmp_path, "code.py", "import tensorflow as tf\nf = tf.custom_gradient(lambda x: (x, None))\n")
    comment = write(tmp_path, "comment.py", "# tf.custom_gradient would go here\n")
    string = write(tmp_path, "string.py", 'DOC = "uses tf.RegisterGradient"\n')
    registered = write(
        tmp_path, "registered.py", "import tensorflow as tf\n@tf.RegisterGradient('X')\ndef g(op, dy): pass\n"
    )
    found = walk.walk(tmp_path)
    assert set(found.files) == {code, registered}
    assert set(found.scanned) == {code, comment, string, registered}


def test_a_layer_file_comes_in_through_its_import_of_a_marked_module(tmp_path: Path) -> None:
    _lay_out_repository(tmp_path)
    found = walk.walk(tmp_path)
    names = {path.relative_to(tmp_path).as_posix() for path in found.files}
    # The test module imports a marked module but is a test; notes.py mentions markers in a comment.
    assert names == {"mylib/core.py", "mylib/layers.py", "mylib/broken.py", "docs/build_docs.py"}


@pytest.mark.parametrize(
    "importer",
    [
        "from . import core\n\nclass L:\n    pass\n",
        "from .core import square\n\ndef public(x):\n    return square(x)\n",
        "import pkg.core\n\nVALUE = pkg.core.square(1.0)\n",
        "import pkg\n\nclass L:\n    pass\n",  # the package's __init__ imports the marked module
    ],
)
def test_relative_absolute_and_package_imports_are_followed(tmp_path: Path, importer: str) -> None:
    write(tmp_path, "pkg/__init__.py", "from pkg.core import square\n")
    write(tmp_path, "pkg/core.py", CUSTOM)
    user = write(tmp_path, "pkg/user.py", importer)
    assert user in walk.walk(tmp_path).files


def test_a_file_that_defines_nothing_reachable_is_not_brought_in(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/core.py", CUSTOM)
    script = write(tmp_path, "pkg/script.py", "from pkg.core import square\n\ndef _private(): pass\nprint(1)\n")
    other = write(tmp_path, "pkg/other.py", "import numpy\n\nclass Unrelated:\n    pass\n")
    files = walk.walk(tmp_path).files
    assert script not in files and other not in files


def test_non_regular_files_are_never_opened(tmp_path: Path) -> None:
    write(tmp_path, "ops.py", CUSTOM)
    os.mkfifo(tmp_path / "pipe.py")
    result: list[walk.Walk] = []
    thread = threading.Thread(target=lambda: result.append(walk.walk(tmp_path)), daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert result, "the walk blocked on a FIFO"
    assert result[0].not_regular == (tmp_path / "pipe.py",)
    assert result[0].files == (tmp_path / "ops.py",)


def test_exclusions_leave_files_and_whole_folders_out(tmp_path: Path) -> None:
    write(tmp_path, "pkg/ops.py", CUSTOM)
    write(tmp_path, "pkg/ops_test.py", CUSTOM)
    write(tmp_path, "vendor/deep/more/ops.py", CUSTOM)
    os.mkfifo(tmp_path / "vendor" / "pipe.py")
    excluded = walk.walk(tmp_path, [walk.Exclusion("vendor", tmp_path), walk.Exclusion("*_test.py", tmp_path)])
    assert excluded.files == (tmp_path / "pkg/ops.py",)
    assert set(excluded.excluded) == {tmp_path / "vendor", tmp_path / "pkg/ops_test.py"}
    assert excluded.not_regular == ()  # the excluded folder was not entered
    included = walk.walk(tmp_path, [walk.Exclusion("other/*", tmp_path)])
    assert len(included.files) == 3 and not included.excluded


def test_an_exclusion_matches_below_its_own_base(tmp_path: Path) -> None:
    pattern = walk.Exclusion("sub/*", tmp_path / "project")
    assert pattern.matches(tmp_path / "project" / "sub" / "a.py")
    assert not pattern.matches(tmp_path / "sub" / "a.py")
    # An installed package's files match below the folder the package sits in.
    assert walk.Exclusion("larq/*_test.py", tmp_path).matches(Path("/site/larq/a_test.py"), package_base=Path("/site"))


# -- namespace packages and the hash seed -----------------------------------------------------


def test_namespace_packages_never_crash_whatever_the_hash_seed(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/ops.py", "from pkg.ns.sub import helper\n" + CUSTOM)
    write(tmp_path, "pkg/ns/sub/helper.py", "def helper():\n    return 1\n")
    write(tmp_path, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    codes = []
    for seed in ("0", "1", "7", "11"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        process = subprocess.run(
            [sys.executable, "-m", "gradcheck", "run", ".", "--format", "json"],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        codes.append(process.returncode)
        assert process.returncode == 0, process.stderr[-2000:]
        assert json.loads(process.stdout)["summary"]["passed"] == 1
    assert codes == [0, 0, 0, 0]


def test_a_marked_module_inside_a_namespace_folder_imports_by_its_full_name(project: Path) -> None:
    write(project, "pkg/__init__.py", "")
    write(project, "pkg/ns/sub/ops.py", "from . import helper\n" + CUSTOM)
    write(project, "pkg/ns/sub/helper.py", "VALUE = 1\n")
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    report = run_json(".")
    assert report["exit_code"] == 0 and report["summary"]["passed"] == 1


# -- import failures are results ----------------------------------------------------------------


def test_a_module_that_fails_to_import_is_a_result_and_the_rest_is_checked(project: Path) -> None:
    _lay_out_repository(project)
    result = invoke("run", ".", "--format", "json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    modules = {r["id"]: r for r in report["results"] if r["kind"] == "module"}
    assert set(modules) == {"mylib/broken.py", "docs/build_docs.py"}
    broken = modules["mylib/broken.py"]
    assert broken["status"] == "error"
    [problem] = broken["problems"]
    assert problem["check"] == "import" and problem["input"] is None
    assert problem["message"] == "mylib/broken.py:2: import failed: No module named 'not_installed_anywhere'"
    assert "install not_installed_anywhere" in problem["hint"] and '"mylib/broken.py"' in problem["hint"]
    checked = {r["name"]: r["status"] for r in report["results"] if r["kind"] != "module"}
    assert checked == {"square": "passed", "Squares": "passed"}
    collection = report["collection"]
    assert collection["imported"]["paths"] == ["mylib/core.py", "mylib/layers.py"]
    assert set(collection["failed"]["paths"]) == {"mylib/broken.py", "docs/build_docs.py"}
    assert collection["scanned"]["count"] == 7


def test_a_tensorflow_add_on_that_is_missing_is_named_as_what_it_is(project: Path) -> None:
    write(project, "docs/build_docs.py", "import tensorflow_docs\nimport tensorflow as tf\n" + CUSTOM)
    report = run_json(".")
    [problem] = report["results"][0]["problems"]
    assert "No module named 'tensorflow_docs'" in problem["message"]
    assert "TensorFlow is not installed" not in json.dumps(report)
    named = invoke("run", "docs/build_docs.py")  # named on the command line: a usage error, as before
    assert named.exit_code == 2
    assert "docs/build_docs.py:1: import failed: No module named 'tensorflow_docs'" in named.stderr
    assert "TensorFlow is not installed" not in named.stderr


def test_shape_only_list_and_init_report_import_failures_too(project: Path) -> None:
    _lay_out_repository(project)
    shape_only = run_json(".", "--shape-only")
    assert shape_only["exit_code"] == 1 and shape_only["summary"] == {
        "passed": 2,
        "failed": 0,
        "error": 2,
        "skipped": 0,
    }
    listed = invoke("list", ".")
    assert listed.exit_code == 1
    assert "mylib/core.py::square" in listed.stdout and "mylib/layers.py::Squares" in listed.stdout
    assert "mylib/broken.py:2: import failed: No module named 'not_installed_anywhere'" in listed.stderr
    (project / "gradcheck.toml").unlink()
    started = invoke("init", ".")
    assert started.exit_code == 1
    assert "[functions.square]" in (project / "gradcheck.toml").read_text(encoding="utf-8")
    assert "docs/build_docs.py:1: import failed: No module named 'tensorflow_docs'" in started.stderr


def test_excluding_what_cannot_import_makes_the_run_green(project: Path) -> None:
    _lay_out_repository(project)
    flags = invoke("run", ".", "--exclude", "docs", "--exclude", "mylib/broken.py")
    assert flags.exit_code == 0, flags.output
    assert "collection: 5 files scanned, 2 imported, 2 excluded" in flags.stdout
    write(project, "gradcheck.toml", 'exclude = ["docs/*", "mylib/broken.py"]\n')
    assert invoke("run", ".").exit_code == 0
    assert invoke("list", ".").exit_code == 0
    (project / "gradcheck.toml").unlink()
    assert invoke("init", ".", "--exclude", "docs", "--exclude", "*/broken.py").exit_code == 0


def test_config_exclusions_are_relative_to_the_config_file(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lay_out_repository(project)
    write(project, "gradcheck.toml", 'exclude = ["docs", "mylib/broken.py"]\n')
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    report = run_json(str(project))
    assert report["exit_code"] == 0 and report["summary"]["passed"] == 2
    # On the command line a glob is relative to the current folder: from here it matches nothing.
    write(project, "gradcheck.toml", "")
    report = run_json(str(project), "--exclude", "docs", "--exclude", "mylib/broken.py")
    assert report["exit_code"] == 1 and report["collection"]["excluded"]["count"] == 0


def test_exclusions_hold_under_shard_and_changed_since(project: Path) -> None:
    _lay_out_repository(project)
    for shard in ("1/2", "2/2"):
        report = run_json(".", "--shard", shard, "--exclude", "docs", "--exclude", "mylib/broken.py")
        assert all(r["kind"] != "module" for r in report["results"])
    both = [run_json(".", "--shard", shard) for shard in ("1/2", "2/2")]
    modules = [r["id"] for report in both for r in report["results"] if r["kind"] == "module"]
    assert sorted(modules) == ["docs/build_docs.py", "mylib/broken.py"]  # each in one shard only


def test_an_unreadable_file_is_an_error_result_never_silence(project: Path) -> None:
    write(project, "ops.py", CUSTOM)
    (project / "dangling.py").symlink_to(project / "nowhere.py")
    report = run_json(".")
    assert report["exit_code"] == 1
    modules = [r for r in report["results"] if r["kind"] == "module"]
    assert [r["id"] for r in modules] == ["dangling.py"]
    assert "dangling.py: cannot be read: No such file or directory" in modules[0]["problems"][0]["message"]
    assert by_name(report)["square"]["status"] == "passed"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads a file of mode 000")
def test_a_file_without_read_permission_is_an_error_result(project: Path) -> None:
    write(project, "ops.py", CUSTOM)
    locked = write(project, "locked.py", CUSTOM)
    locked.chmod(0)
    try:
        report = run_json(".")
    finally:
        locked.chmod(0o644)
    assert "locked.py: cannot be read: Permission denied" in json.dumps(report)


def test_a_fifo_in_a_target_folder_does_not_hang_the_run(tmp_path: Path) -> None:
    write(tmp_path, "ops.py", CUSTOM)
    write(tmp_path, "gradcheck.toml", "[functions.square]\ninputs = { x = [3] }\n")
    os.mkfifo(tmp_path / "pipe.py")
    process = subprocess.run(
        [sys.executable, "-m", "gradcheck", "run", "."], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert process.returncode == 0, process.stderr[-2000:]
    assert "1 not regular files (not opened)" in process.stdout


def test_import_failures_count_towards_maxfail(project: Path) -> None:
    _lay_out_repository(project)
    report = run_json(".", "--maxfail", "2")
    assert [r["kind"] for r in report["results"]] == ["module", "module"]
    assert report["not_checked"] == ["mylib/core.py::square", "mylib/layers.py::Squares"]


def test_the_pytest_plugin_makes_an_import_failure_one_failing_item(pytester: pytest.Pytester) -> None:
    _lay_out_repository(pytester.path)
    pytester.makefile(".toml", gradcheck="")
    # In a process of its own: an in-process inner run drops the modules it imported first, which
    # would leave this process's later CLI tests with classes that no longer pickle.
    result = pytester.runpytest_subprocess("--gradcheck", "mylib", "-p", "no:cacheprovider", "mylib")
    result.assert_outcomes(passed=2, failed=1, errors=0)
    result.stdout.fnmatch_lines(["*broken.py:2: import failed: No module named 'not_installed_anywhere'*"])


# -- packages by name, shadowing, one result per object -----------------------------------------


def test_a_local_package_by_dotted_name_walks_the_package(project: Path) -> None:
    _lay_out_repository(project)
    report = run_json("mylib")
    assert {r["name"] for r in report["results"] if r["kind"] != "module"} == {"square", "Squares"}
    assert [r["id"] for r in report["results"] if r["kind"] == "module"] == ["mylib/broken.py"]
    assert report["collection"]["scanned"]["count"] == 5


def test_a_package_without_custom_gradients_says_how_many_modules_it_scanned(project: Path) -> None:
    write(project, "plain/__init__.py", "")
    write(project, "plain/a.py", "class Layer:\n    pass\n")
    write(project, "plain/b.py", "def f(x):\n    return x\n")
    result = invoke("run", "plain")
    assert result.exit_code == 5
    assert "nothing checked (3 files scanned; none holds a custom gradient)" in result.stdout
    listed = invoke("list", "plain")
    assert listed.exit_code == 5 and "3 files scanned; none holds a custom gradient" in listed.stderr


def test_an_installed_package_by_name_is_walked_from_any_folder(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path_factory.mktemp("site")
    write(site, "installed_pkg/__init__.py", "")
    write(site, "installed_pkg/ops.py", WRONG)
    write(site, "installed_pkg/sub/__init__.py", "")
    write(site, "installed_pkg/sub/more.py", "from installed_pkg.ops import square\n\nclass L:\n    pass\n")
    monkeypatch.syspath_prepend(str(site))
    report = run_json("installed_pkg")
    assert report["exit_code"] == 1
    assert [r["name"] for r in report["results"]] == ["square"]
    assert report["collection"]["scanned"]["count"] == 4
    # The project checking an installed package configures it from its own folder.
    write(project, "gradcheck.toml", "[functions.square]\ninputs = { x = [5] }\n")
    [result] = run_json("installed_pkg")["results"]
    assert result["inputs"][0]["shape"] == [5]


def test_a_local_file_shadowing_a_standard_module_is_what_a_dotted_target_means(project: Path) -> None:
    write(project, "random.py", WRONG)
    report = run_json("random")
    assert report["exit_code"] == 1
    assert [r["id"] for r in report["results"]] == ["random.py::square"]


def test_an_alias_is_checked_once_with_a_note(project: Path) -> None:
    write(
        project,
        "layers.py",
        """
        import tensorflow as tf


        @tf.custom_gradient
        def square(x):
            def grad(dy):
                return 2.0 * x * dy
            return x * x, grad


        class Squares(tf.keras.layers.Layer):
            def call(self, x):
                return square(x)


        SquaresAlias = Squares
        square_alias = square
        """,
    )
    report = run_json("layers.py")
    assert [r["name"] for r in report["results"]] == ["square", "Squares"]
    notes = by_name(report)["Squares"]["notes"]
    assert "checked once: the module also names it SquaresAlias" in notes
    assert invoke("run", "layers.py::SquaresAlias").exit_code == 0  # an alias still selects it


def test_a_re_export_in_init_is_checked_once_under_its_defining_module(project: Path) -> None:
    write(project, "pkg/__init__.py", "from .core import square\nfrom .core import square as also_square\n")
    write(project, "pkg/core.py", CUSTOM)
    write(project, "pkg/sibling.py", "from .core import square\n\nVALUE = square\n")
    report = run_json(".")
    assert [r["id"] for r in report["results"]] == ["pkg/core.py::square"]


def test_modules_of_the_same_name_in_different_folders_are_each_checked(project: Path) -> None:
    write(project, "one/ops.py", CUSTOM)
    write(project, "two/ops.py", WRONG)
    report = run_json(".")
    assert {r["id"]: r["status"] for r in report["results"]} == {
        "one/ops.py::square": "passed",
        "two/ops.py::square": "failed",
    }


# -- the text report's collection line -----------------------------------------------------------


def test_the_text_report_says_what_collection_did(project: Path) -> None:
    _lay_out_repository(project)
    plain = invoke("run", ".", "--exclude", "tests")
    assert "collection: 6 files scanned, 2 imported, 1 excluded, 2 failed to import" in plain.stdout
    assert "  imported: mylib/core.py" not in plain.stdout
    verbose = invoke("run", ".", "--exclude", "tests", "-v")
    for line in ("  imported: mylib/core.py", "  excluded: tests", "  failed to import: docs/build_docs.py"):
        assert line in verbose.stdout


def test_every_report_format_renders_a_module_result(project: Path) -> None:
    write(project, "ops.py", GOOD_AND_BAD)
    write(project, "broken.py", "import not_installed_anywhere\nimport tensorflow as tf\n" + CUSTOM)
    for format_ in ("junit", "github", "sarif", "html", "text"):
        result = invoke("run", ".", "--format", format_)
        assert result.exit_code == 1, (format_, result.output)
        assert "not_installed_anywhere" in result.stdout, format_
