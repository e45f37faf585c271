"""The terminal report, drawn with rich: a line per function, a table per failure."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradcheck.results import Problem, Result, RunReport

_STATUS_STYLE = {
    "passed": ("PASSED", "green"),
    "failed": ("FAILED", "bold red"),
    "error": ("ERROR", "bold magenta"),
    "skipped": ("SKIPPED", "yellow"),
}


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def format_shape(shape: tuple[int, ...]) -> str:
    """``(3,)`` for one axis, as Python writes tuples."""
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _index(index: tuple[int, ...] | None) -> str:
    return "" if index is None else "[" + ", ".join(map(str, index)) + "]"


def summary_line(report: RunReport) -> str:
    """``3 passed, 1 failed, 1 skipped in 2.41s``, as pytest ends its report."""
    counts = report.summary
    parts = [f"{counts[status]} {status}" for status in ("passed", "failed", "error", "skipped") if counts[status]]
    if not parts:
        parts = ["nothing checked"]
    line = ", ".join(parts) + f" in {report.seconds:.2f}s"
    if report.interrupted:
        line += " (interrupted)"
    return line


def result_line(result: Result) -> Text:
    """The one line that opens a function's entry."""
    label, style = _STATUS_STYLE[result.status]
    line = Text()
    line.append(f"{label:<8}", style=style)
    line.append(result.id)
    extra = f" ({result.seconds:.2f}s"
    if result.dtype and result.dtype != "float64":
        extra += f", {result.dtype}"
    line.append(extra + ")", style="dim")
    return line


_PROBLEM_COLUMNS = (
    ("input", lambda p: p.input or "-"),
    ("check", lambda p: p.check),
    ("execution", lambda p: p.execution or ""),
    ("expected", lambda p: p.expected or ""),
    ("got", lambda p: p.got or ""),
    ("max abs", lambda p: _number(p.max_abs_error)),
    ("max rel", lambda p: _number(p.max_rel_error)),
    ("worst index", lambda p: _index(p.worst_index)),
)


def problem_table(problems: tuple[Problem, ...]) -> Table:
    """The table of one function's problems: where, which check, and by how much.

    Columns that no problem fills are left out.
    """
    cells = [[cell(problem) for _, cell in _PROBLEM_COLUMNS] for problem in problems]
    keep = [i for i, (name, _) in enumerate(_PROBLEM_COLUMNS) if i < 2 or any(row[i] for row in cells)]
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style="bold")
    for i in keep:
        table.add_column(_PROBLEM_COLUMNS[i][0], overflow="fold")
    for row in cells:
        table.add_row(*(row[i] for i in keep))
    return table


def input_table(result: Result) -> Table:
    """The inputs as fed (shown with ``-v``)."""
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style="bold")
    for column in ("input", "shape", "dtype", "role"):
        table.add_column(column)
    for item in result.inputs:
        shape = "" if item.shape is None else format_shape(item.shape)
        table.add_row(item.name, shape + (" guessed" if item.guessed else ""), item.dtype, item.role)
    return table


def _render_details(result: Result, console: Console, verbose: bool) -> None:
    indent = "    "
    if result.status == "skipped" and result.skip_reason:
        console.print(Text(indent + result.skip_reason, style="yellow"), soft_wrap=True)
    if result.problems:
        console.print(Padding(problem_table(result.problems), (0, 0, 0, len(indent))), crop=False)
        for problem in result.problems:
            head = f"{indent}{problem.input or result.name} ({problem.check}): "
            console.print(Text(head, style="bold") + Text(problem.message), soft_wrap=True)
            if problem.hint:
                console.print(Text(f"{indent}  hint: ", style="cyan") + Text(problem.hint), soft_wrap=True)
    if verbose and result.inputs:
        console.print(Padding(input_table(result), (0, 0, 0, len(indent))))
    if result.notes and (verbose or result.status != "passed"):
        for note in result.notes:
            console.print(Text(f"{indent}note: {note}", style="dim"), soft_wrap=True)
    if result.reproduce and result.status in ("failed", "error"):
        console.print(Text(f"{indent}reproduce: ", style="dim") + Text(result.reproduce), soft_wrap=True)


def render_text(report: RunReport, console: Console, verbosity: int = 0) -> None:
    """Write the report: ``verbosity`` -1 is ``-q``, 0 the default, 1 ``-v``."""
    quiet = verbosity < 0
    verbose = verbosity > 0
    if not quiet:
        console.print(
            Text(f"gradcheck {report.version}, seed {report.seed}, {len(report.results)} checked", style="bold")
        )
    for result in report.results:
        if quiet and result.status not in ("failed", "error"):
            continue
        console.print(result_line(result), soft_wrap=True)
        if result.status != "passed" or verbose:
            _render_details(result, console, verbose)
    console.print(Text(summary_line(report), style="bold"), soft_wrap=True)


def render_text_string(report: RunReport, verbosity: int = 0, width: int = 100) -> str:
    """The plain-text report (no colour), as a string: for ``-o`` files and assertion messages."""
    import io

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)
    render_text(report, console, verbosity)
    return buffer.getvalue()
