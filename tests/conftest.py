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
