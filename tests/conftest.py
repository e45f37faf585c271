"""Fixtures shared by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

# pytest's own fixture for running pytest in a test: the plugin's tests use it.
pytest_plugins = ["pytester"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project as the current directory.

    It holds an empty gradcheck.toml, so the config search stops here and no
    config from outside the test (the repository's own) can leak in.
    """
    (tmp_path / "gradcheck.toml").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the caller's terminal settings and CI variables out of the tests.

    rich reads FORCE_COLOR, NO_COLOR, TTY_COMPATIBLE and COLUMNS; a test that
    runs ``--format github`` inside GitHub Actions must not append to the
    job's real summary. Tests that need one of these set it themselves.
    """
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
