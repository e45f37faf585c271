"""Hostile or odd user text and paths (issue 11): items landed so far are 6 and 9."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

from gradcheck.config import Settings, find_config_file
from gradcheck.session import RunOptions, reproduce_command


def test_config_search_stops_at_the_project_root(tmp_path: Path) -> None:
    # A gradcheck.toml in a shared folder above the project must not apply.
    (tmp_path / "gradcheck.toml").write_text("seed = 3\n")
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / ".git").mkdir()
    assert find_config_file(project / "src") is None
    (project / "gradcheck.toml").write_text("seed = 4\n")
    assert find_config_file(project / "src") == (project / "gradcheck.toml").resolve()


def test_setup_cfg_also_marks_the_project_root(tmp_path: Path) -> None:
    (tmp_path / "gradcheck.toml").write_text("seed = 3\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "setup.cfg").write_text("[metadata]\n")
    assert find_config_file(project) is None


def test_reproduce_line_is_shell_quoted(tmp_path: Path) -> None:
    hostile = "dir with 'quote' `touch pwned`/m.py::f"
    subject = SimpleNamespace(id=hostile)
    config = tmp_path / "my config.toml"
    line = reproduce_command(subject, Settings(), RunOptions(targets=(), config_path=config))  # type: ignore[arg-type]
    words = shlex.split(line)
    assert words[:3] == ["gradcheck", "run", hostile]
    assert words[-2:] == ["-c", str(config)]
