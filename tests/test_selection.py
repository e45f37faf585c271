"""--shard and --changed-since: the pure selection functions, and real runs (a temporary git repository)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gradcheck import selection
from gradcheck.errors import UsageError
from tests.helpers import FIXTURES, invoke, write

# ---- shards, without TensorFlow ----


@pytest.mark.parametrize("text", ["0/2", "3/2", "x", "1/0", "1", "1/2/3", "-1/2", "a/b", ""])
def test_bad_shard_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--shard"):
        selection.parse_shard(text)


def test_shard_parses() -> None:
    assert selection.parse_shard("2/3") == (2, 3)
    assert selection.parse_shard("1/1") == (1, 1)


def test_shards_partition_and_adding_ids_moves_none() -> None:
    ids = [f"ops/m{i % 7}.py::f{i}" for i in range(200)]
    for count in (1, 2, 3, 5):
        owners = [[k for k in range(1, count + 1) if selection.in_shard(i, (k, count))] for i in ids]
        assert all(len(owner) == 1 for owner in owners)
        if count > 1:
            assert len({owner[0] for owner in owners}) == count  # every shard gets some of 200
    before = {i: selection.shard_of(i, 4) for i in ids}
    more = ids + [f"new.py::g{i}" for i in range(50)]
    assert {i: selection.shard_of(i, 4) for i in more if i in before} == before


def test_shard_is_a_stable_hash_not_python_hash() -> None:
    # CRC-32 is fixed by its definition; Python's str hash changes with PYTHONHASHSEED.
    assert selection.shard_of("a.py::f", 1000) in range(1, 1001)
    code = "from gradcheck.selection import shard_of; print(shard_of('ops.py::f', 97))"
    seen = {
        subprocess.run(
            ["python3", "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(Path.cwd())},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1


# ---- the import graph, without TensorFlow ----


def test_project_imports_follow_absolute_relative_and_packages(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/base.py", "X = 1\n")
    write(tmp_path, "pkg/util.py", "from .base import X\n")
    write(tmp_path, "pkg/ops.py", "import os\nimport numpy\nfrom pkg import util\n")
    write(tmp_path, "script.py", "import helper\n")
    write(tmp_path, "helper.py", "")
    ops = (tmp_path / "pkg/ops.py").resolve()
    root = tmp_path.resolve()
    assert selection.project_imports(ops, root) == {root / "pkg/__init__.py", root / "pkg/util.py"}
    assert selection.project_imports(root / "pkg/util.py", root) == {root / "pkg/base.py"}
    assert selection.project_imports(root / "script.py", root) == {root / "helper.py"}
    changed = frozenset({root / "pkg/base.py"})
    files = [ops, root / "pkg/util.py", root / "script.py"]
    assert selection.affected(files, changed, root) == {ops, root / "pkg/util.py"}


def test_import_cycles_end(tmp_path: Path) -> None:
    write(tmp_path, "a.py", "import b\n")
    write(tmp_path, "b.py", "import a\nimport c\n")
    write(tmp_path, "c.py", "")
    root = tmp_path.resolve()
    assert selection.affected([root / "a.py"], frozenset({root / "c.py"}), root) == {root / "a.py"}
    assert selection.affected([root / "a.py"], frozenset(), root) == set()


# ---- real runs ----


def _checked(*args: str) -> list[str]:
    outcome = invoke("run", *args, "--shape-only", "--format", "json")
    assert outcome.exit_code in (0, 1, 5), outcome.output
    return [result["id"] for result in json.loads(outcome.stdout)["results"]] if outcome.exit_code != 5 else []


def test_shards_of_a_run_check_every_function_exactly_once() -> None:
    everything = _checked(str(FIXTURES / "core"))
    shards = [_checked(str(FIXTURES / "core"), "--shard", f"{k}/3") for k in (1, 2, 3)]
    assert sorted(i for shard in shards for i in shard) == sorted(everything)
    assert all(shards), "13 functions over 3 shards: none empty"


@pytest.mark.parametrize("value", ["0/2", "3/2", "x"])
def test_bad_shard_on_the_command_line(value: str) -> None:
    outcome = invoke("run", str(FIXTURES / "core"), "--shard", value)
    assert outcome.exit_code == 2
    assert len(outcome.stderr.strip().splitlines()) == 1 and "--shard" in outcome.stderr


BASE = """
    import tensorflow as tf


    def scale():
        return 2.0


    @tf.custom_gradient
    def doubled(x):
        def grad(dy):
            return scale() * dy
        return scale() * x, grad
"""

TOP = """
    import tensorflow as tf

    from base import scale


    @tf.custom_gradient
    def tripled(x):
        def grad(dy):
            return (scale() + 1.0) * dy
        return (scale() + 1.0) * x, grad
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(tmp_path, "base.py", BASE)
    write(tmp_path, "top.py", TOP)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "start")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_changing_the_imported_module_checks_both(repo: Path) -> None:
    (repo / "base.py").write_text((repo / "base.py").read_text() + "\n# changed\n")
    assert sorted(_checked(".", "--changed-since", "HEAD")) == ["base.py::doubled", "top.py::tripled"]


def test_changing_only_the_importer_checks_only_it(repo: Path) -> None:
    (repo / "top.py").write_text((repo / "top.py").read_text() + "\n# changed\n")
    _git(repo, "commit", "-q", "-am", "top only")
    assert _checked(".", "--changed-since", "HEAD~1") == ["top.py::tripled"]


def test_nothing_changed_exits_5_and_says_so(repo: Path) -> None:
    outcome = invoke("run", ".", "--changed-since", "HEAD")
    assert outcome.exit_code == 5
    assert "nothing changed since HEAD" in outcome.stderr


def test_unknown_ref_and_no_repository_are_usage_errors(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outcome = invoke("run", ".", "--changed-since", "no-such-branch")
    assert outcome.exit_code == 2 and len(outcome.stderr.strip().splitlines()) == 1
    assert "no-such-branch" in outcome.stderr
    outside = tmp_path_factory.mktemp("plain")
    write(outside, "base.py", BASE)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(outside)
        outcome = invoke("run", ".", "--changed-since", "HEAD")
    assert outcome.exit_code == 2 and "not in a git repository" in outcome.stderr
    assert len(outcome.stderr.strip().splitlines()) == 1
