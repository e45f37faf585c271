"""The live progress bar of ``gradcheck run`` on a terminal: the function being checked, the count done.

Driven by the ``on_import``/``on_start``/``on_result`` callbacks of a run;
it draws on the console it is given (standard error) and disappears when
the run ends, so the report that follows stands alone. Whether to show it at
all is the command line's decision (:func:`wanted`): only on a terminal,
never in CI logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gradcheck.reporting.safe_text import shown
from gradcheck.results import Result


def wanted(stream: IO[str], environ: Mapping[str, str]) -> bool:
    """True when ``stream`` is a terminal and no CI system is running us.

    CI runners set ``CI``; their logs keep every redraw of a live display as
    a line of its own, so a progress bar there is noise.
    """
    if environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """A transient rich progress bar: ``checking ops.py::f  ━━━━━━━━  3/7  0:00:02``."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: Any = None

    def __enter__(self) -> ProgressBar:
        self._progress.start()
        # Until the first module is imported, the checker process is starting (TensorFlow's import).
        self._task = self._progress.add_task("[bold]starting[/] the checker", total=None)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._progress.stop()

    def on_import(self, path: str) -> None:
        """A module is being imported (before the functions to check are known)."""
        self._progress.update(self._task, description=f"[bold]importing[/] {escape(shown(path))}")

    def on_start(self, function_id: str, index: int, total: int) -> None:
        """A function is about to be checked."""
        self._progress.update(
            self._task, description=f"[bold]checking[/] {escape(shown(function_id))}", completed=index, total=total
        )

    def on_result(self, result: Result, index: int, total: int) -> None:
        """A function's check is done."""
        self._progress.update(self._task, completed=index + 1)
