"""The terminal report, drawn with rich: a line per function, a table per failure, heat maps."""

from __future__ import annotations

import io

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradcheck.reporting import RenderOptions
from gradcheck.reporting.heatmap import PLAIN_RAMP, REFERENCE_NAMES, Grid, layout, level, pictured_problems
from gradcheck.reporting.safe_text import cell, shown
from gradcheck.results import Collection, Problem, Result, RunReport, format_shape

#: The largest heat map drawn in the terminal, in cells (two characters each).
HEATMAP_ROWS = 16
HEATMAP_COLUMNS = 32
#: One colour per level above zero, dark to bright (the "inferno" colour map).
_HEAT_COLOURS = (
    "#1b0c41",
    "#4a0c6b",
    "#781c6d",
    "#a52c60",
    "#cf4446",
    "#ed6925",
    "#fb9b06",
    "#f7d13d",
    "#fcffa4",
)
#: How the worst element's cell is drawn, in place of its level.
WORST_MARK = "XX"

_STATUS_STYLE = {
    "passed": ("PASSED", "green"),
    "failed": ("FAILED", "bold red"),
    "error": ("ERROR", "bold magenta"),
    "skipped": ("SKIPPED", "yellow"),
}


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def _index(index: tuple[int, ...] | None) -> str:
    return "" if index is None else "[" + ", ".join(map(str, index)) + "]"


def summary_line(report: RunReport) -> str:
    """``3 passed, 1 failed, 1 skipped in 2.41s``, as pytest ends its report.

    A run that stopped early says why and how much was left:
    ``2 failed in 0.40s (stopped after 2 failures: 3 not checked)``.
    """
    counts = report.summary
    # As pytest: "2 errors", but "2 passed", "2 failed", "2 skipped".
    parts = [
        f"{counts[status]} {status}{'s' if status == 'error' and counts[status] != 1 else ''}"
        for status in ("passed", "failed", "error", "skipped")
        if counts[status]
    ]
    if not parts:
        why = nothing_found(report.collection)
        parts = ["nothing checked" + (f" ({why})" if why else "")]
    line = ", ".join(parts) + f" in {report.seconds:.2f}s"
    left = f": {len(report.not_checked)} not checked" if report.not_checked else ""
    if report.interrupted:
        line += f" (interrupted{left})"
    elif report.stopped_by_maxfail:
        plural = "s" if report.maxfail != 1 else ""
        line += f" (stopped after {report.maxfail} failure{plural}{left})"
    return line


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def nothing_found(collection: Collection | None) -> str | None:
    """Why a walk found nothing to check (``3 files scanned; none holds a custom gradient``); None without a walk.

    The summary line of ``run`` and the message of ``list`` both say it.
    """
    if collection is None or not collection.scanned:
        return None
    scanned = f"{_files(len(collection.scanned))} scanned"
    if not collection.imported:
        return f"{scanned}; none holds a custom gradient"
    return f"{scanned}, {len(collection.imported)} imported; none defines a custom-gradient function or layer"


def collection_line(collection: Collection) -> str:
    """``collection: 223 files scanned, 2 imported, 12 excluded, 1 failed to import``."""
    parts = []
    if collection.scanned:
        parts.append(f"{_files(len(collection.scanned))} scanned")
    parts.append(f"{len(collection.imported)} imported")
    if collection.excluded:
        parts.append(f"{len(collection.excluded)} excluded")
    if collection.failed:
        parts.append(f"{len(collection.failed)} failed to import")
    if collection.not_regular:
        parts.append(f"{len(collection.not_regular)} not regular files (not opened)")
    return "collection: " + ", ".join(parts)


def collection_lists(collection: Collection, verbosity: int) -> list[str]:
    """With ``-v``, the paths behind each count of :func:`collection_line`; ``-vv`` adds those not imported."""
    if verbosity < 1:
        return []
    lists = [
        ("imported", collection.imported),
        ("excluded", collection.excluded),
        ("failed to import", collection.failed),
        ("not regular files", collection.not_regular),
    ]
    if verbosity >= 2:
        imported = set(collection.imported) | set(collection.failed)
        lists.append(("scanned, not imported", tuple(p for p in collection.scanned if p not in imported)))
    return [f"  {label}: {path}" for label, paths in lists for path in paths]


def result_line(result: Result) -> Text:
    """The one line that opens a function's entry."""
    label, style = _STATUS_STYLE[result.status]
    line = Text()
    line.append(f"{label:<8}", style=style)
    line.append(shown(result.id))
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
    cells = [[value_of(problem) for _, value_of in _PROBLEM_COLUMNS] for problem in problems]
    keep = [i for i, (name, _) in enumerate(_PROBLEM_COLUMNS) if i < 2 or any(row[i] for row in cells)]
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style="bold")
    for i in keep:
        table.add_column(_PROBLEM_COLUMNS[i][0], overflow="fold")
    for row in cells:
        # Text, not str: rich would parse a str cell as markup ("w [/]" raises MarkupError).
        table.add_row(*(Text(cell(row[i])) for i in keep))
    return table


def input_table(result: Result) -> Table:
    """The inputs as fed (shown with ``-v``)."""
    table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style="bold")
    for column in ("input", "shape", "dtype", "role"):
        table.add_column(column)
    for item in result.inputs:
        shape = "" if item.shape is None else format_shape(item.shape)
        row = (item.name, shape + (" guessed" if item.guessed else ""), item.dtype, item.role)
        table.add_row(*(Text(cell(value)) for value in row))
    return table


def colour_allowed(console: Console) -> bool:
    """True when the console draws colours (not ``NO_COLOR``, ``--color never`` or a plain file)."""
    return console.color_system is not None and not console.no_color


def _heat_cell(value: float, top: float, worst: bool, colour: bool) -> Text:
    step = level(value, top)
    if colour:
        if worst:
            return Text(WORST_MARK, style=f"bold reverse {_HEAT_COLOURS[max(step, 1) - 1]}")
        if step == 0:
            return Text("··", style="dim")
        return Text("██", style=_HEAT_COLOURS[step - 1])
    return Text(WORST_MARK if worst else PLAIN_RAMP[step] * 2)


def heat_map_lines(problem: Problem, grid: Grid, colour: bool, shape: tuple[int, ...] | None = None) -> list[Text]:
    """|custom - reference| of one input as lines: a title, rows of two-character cells in a frame, a legend.

    Each cell shows its level on a scale from 0 to the largest difference
    (``PLAIN_RAMP``, or colours where allowed); the worst element's cell is
    ``XX``. Big inputs are pooled: each cell then stands for a block of
    elements and shows the largest difference in it.
    """
    heatmap = problem.heatmap
    assert heatmap is not None
    top = grid.largest_difference
    reference = REFERENCE_NAMES.get(problem.check, problem.check)
    shape_text = f" {format_shape(shape)}" if shape else ""
    if len(heatmap.axes) >= 2:
        axes = f"rows: axis {heatmap.axes[0]}, columns: axis {heatmap.axes[1]}"
        if shape and len(shape) > 2:
            axes += " (largest over the other axes)"
    else:
        axes = "one row"
    head = f"{shown(problem.input)}{shape_text}: |custom - {reference}|, {axes}"
    if grid.block != (1, 1):
        head += f"; each cell the largest of {grid.block[0]}x{grid.block[1]} elements"
    border = Text("+" + "-" * (2 * grid.columns) + "+")
    lines = [Text(head, style="bold"), border]
    for r, row in enumerate(grid.difference):
        line = Text("|")
        for c, value in enumerate(row):
            line.append_text(_heat_cell(value, top, grid.worst == (r, c), colour))
        lines.append(line + Text("|"))
    lines.append(border)
    if colour:
        legend = Text("scale: ")
        legend.append("··", style="dim")
        for hue in _HEAT_COLOURS:
            legend.append("█", style=hue)
    else:
        legend = Text(f"scale: '{PLAIN_RAMP}'")
    legend.append(f" from 0 to {_number(top)}")
    if problem.worst_index is not None and grid.worst is not None:
        legend.append(f"; {WORST_MARK} = worst element {_index(problem.worst_index)}")
    lines.append(legend)
    return lines


def _render_heat_maps(result: Result, console: Console, indent: str) -> None:
    shapes = {item.name: item.shape for item in result.inputs}
    colour = colour_allowed(console)
    for problem in pictured_problems(result.problems):
        grid = layout(problem, HEATMAP_ROWS, HEATMAP_COLUMNS)
        if grid is None:
            continue
        for line in heat_map_lines(problem, grid, colour, shapes.get(problem.input or "")):
            # A picture must not wrap: each line as it is, however narrow the terminal.
            console.print(Text(indent + "  ") + line, soft_wrap=True)


def _render_details(result: Result, console: Console, verbosity: int) -> None:
    indent = "    "
    verbose = verbosity > 0
    if result.status == "skipped" and result.skip_reason:
        console.print(Text(indent + shown(result.skip_reason), style="yellow"), soft_wrap=True)
    # A module that failed to import has one problem, and no inputs or numbers to tabulate.
    module = result.kind == "module"
    if result.problems and not module:
        console.print(Padding(problem_table(result.problems), (0, 0, 0, len(indent)), expand=False), crop=False)
    for problem in result.problems:
        head = Text("" if module else f"{shown(problem.input or result.name)} ({problem.check}): ", style="bold")
        console.print(Text(indent) + head + Text(shown(problem.message)), soft_wrap=True)
        if problem.hint:
            console.print(Text(f"{indent}  hint: ", style="cyan") + Text(shown(problem.hint)), soft_wrap=True)
        if verbose and problem.traceback:
            lines = problem.traceback.rstrip("\n").splitlines()
            console.print(Text("\n".join(f"{indent}  | {shown(line)}" for line in lines), style="dim"), soft_wrap=True)
    if result.problems and not module and verbosity >= 0:
        _render_heat_maps(result, console, indent)
    if verbose and result.inputs:
        console.print(Padding(input_table(result), (0, 0, 0, len(indent)), expand=False))
    if result.notes and (verbose or result.status != "passed"):
        for note in result.notes:
            console.print(Text(f"{indent}note: {shown(note)}", style="dim"), soft_wrap=True)
    if result.reproduce and result.status in ("failed", "error"):
        console.print(Text(f"{indent}reproduce: ", style="dim") + Text(shown(result.reproduce)), soft_wrap=True)


def render_result(result: Result, console: Console, verbosity: int = 0) -> None:
    """One function's entry: its status line, then (unless it passed, or with ``-v``) the details."""
    console.print(result_line(result), soft_wrap=True)
    if result.status != "passed" or verbosity > 0:
        _render_details(result, console, verbosity)


def render_text(report: RunReport, console: Console, verbosity: int = 0) -> None:
    """Write the report: ``verbosity`` -1 is ``-q``, 0 the default, 1 ``-v``.

    With ``-q`` only what fails the run is shown (failures and errors, and
    skips where ``--fail-on``/``--strict`` counts them), without heat maps;
    the last line is always the summary.
    """
    quiet = verbosity < 0
    if not quiet:
        console.print(
            Text(f"gradcheck {report.version}, seed {report.seed}, {_checked_count(report)} checked", style="bold")
        )
        if report.collection is not None:
            console.print(Text(shown(collection_line(report.collection)), style="dim"), soft_wrap=True)
            for line in collection_lists(report.collection, verbosity):
                console.print(Text(shown(line), style="dim"), soft_wrap=True)
    for result in report.results:
        if quiet and result.status not in ("failed", "error") and result.status not in report.fail_on:
            continue
        render_result(result, console, verbosity)
    console.print(Text(summary_line(report), style="bold"), soft_wrap=True)


def _checked_count(report: RunReport) -> int:
    return sum(1 for result in report.results if result.kind != "module")


def plain_console(buffer: io.StringIO, width: int = 100) -> Console:
    """A console that writes plain text (no colour, no terminal codes) into ``buffer``."""
    return Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False)


def render_text_string(report: RunReport, verbosity: int = 0, width: int = 100) -> str:
    """The plain-text report (no colour), as a string: for ``-o`` files and assertion messages."""
    buffer = io.StringIO()
    render_text(report, plain_console(buffer, width), verbosity)
    return buffer.getvalue()


def render_result_string(result: Result, verbosity: int = 0, width: int = 100) -> str:
    """One function's entry as plain text: the pytest plugin's failure report."""
    buffer = io.StringIO()
    render_result(result, plain_console(buffer, width), verbosity)
    return buffer.getvalue()


def render(report: RunReport, options: RenderOptions) -> str:
    """The text report as a document (``--format text -o FILE``)."""
    return render_text_string(report, options.verbosity, options.width)
