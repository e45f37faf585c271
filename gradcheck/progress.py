"""The live progress bar of ``gradcheck run`` on a terminal: the function being checked, the count done.

Driven by :func:`gradcheck.session.run`'s ``on_start``/``on_result`` callbacks;
it draws on the console it is given (standard error) and disappears when
the run ends, so the report that follows stands alone. Whether to show it at
all is the command line's decision (:func:`wanted`): only on a terminal,
never in CI logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

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
            TextColumn("[bold]checking[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: Any = None

    def __enter__(self) -> ProgressBar:
        self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._progress.stop()

    def on_start(self, subject: Any, index: int, total: int) -> None:
        """A function is about to be checked."""
        if self._task is None:
            self._task = self._progress.add_task(subject.id, total=total)
        self._progress.update(self._task, description=subject.id, completed=index)

    def on_result(self, result: Result, index: int, total: int) -> None:
        """A function's check is done."""
        if self._task is not None:
            self._progress.update(self._task, completed=index + 1)
