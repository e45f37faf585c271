"""What the user asked for a run: targets, and the options that override the config.

Resolved once per run (:func:`gradcheck.session.run_options`), read by
collection, by each check's request and by the run loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcheck.settings import DEFAULT_TIMEOUT
from gradcheck.walk import Exclusion


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for: targets and the options that override the config."""

    targets: tuple[str, ...]
    """Files, directories or module names, each with an optional ``::NAME``."""
    config_path: Path | None = None
    """``-c``: the config file to use instead of searching for one."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Settings given on the command line; they win over the config."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """``--dim`` values; they win over ``[dims]``."""
    shapes: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    """``--shape`` values, by input name."""
    keyword: str | None = None
    """``-k``: keep only functions whose id contains this."""
    fail_on: tuple[str, ...] | None = None
    """``--fail-on``: the statuses that fail the run; None: failed and error (``--strict`` adds skipped)."""
    maxfail: int | None = None
    """``--maxfail``: stop after this many results whose status is in ``fail_on``."""
    max_memory: int | None = None
    """``--max-memory``: megabytes the worker process may hold; None: the default, 0: no limit."""
    format: str = "text"
    """The config's ``format``: the report's, unless the command line names its own."""
    output: Path | None = None
    """The config's ``output``: where the report goes, unless the command line names its own."""
    jobs: int | str = 1
    """``-j``: how many worker processes check functions at once; ``auto``: one per usable core."""
    timeout: float = DEFAULT_TIMEOUT
    """The run's top-level ``timeout`` (command line, else config): it bounds each module's import."""
    shard: tuple[int, int] | None = None
    """``--shard K/N``: keep only the functions in shard K of N (see :mod:`gradcheck.selection`)."""
    changed: frozenset[Path] | None = None
    """``--changed-since``: the changed files; keep only functions whose module is or imports one."""
    changed_root: Path | None = None
    """The git repository those files are in; imports are followed inside it only."""
    exclusions: tuple[Exclusion, ...] = ()
    """``--exclude`` (relative to the current folder) and the config's ``exclude`` (relative to its folder)."""
