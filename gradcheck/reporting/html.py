"""One self-contained HTML page: the summary table, each failure, and heat maps as inline SVG.

No external assets and no JavaScript: the style sheet is inline, pictures
are SVG in the page, values show as tooltips (``<title>``). For each input
with a failing gradient the page draws three panels side by side: the custom
gradient, the reference, and ``|custom - reference|``. Custom and reference
share one diverging colour scale (so equal colours mean equal values); the
difference has its own scale from 0 to its largest value, as the legend says.
The worst element is outlined in all three panels.

Built with ``xml.etree.ElementTree`` and written with its HTML serialiser, so
every text and attribute is escaped by the library; before that, every text
and attribute is :func:`~gradcheck.reporting.safe_text.shown` (control
characters escaped as ``repr`` does; only ``<pre>`` and the style sheet keep
their line breaks).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from gradcheck.reporting import RenderOptions
from gradcheck.reporting.heatmap import REFERENCE_NAMES, Grid, layout, pictured_problems
from gradcheck.reporting.safe_text import shown
from gradcheck.reporting.text import summary_line
from gradcheck.results import Problem, Result, RunReport, format_shape

#: The largest heat map drawn, in cells per side; bigger inputs are pooled.
MAX_CELLS = 48
#: Size of the whole grid of one panel, in pixels (cells are square).
PANEL_PIXELS = 192
_GAP = 28
_TITLE = 18
_LEGEND = 46

_NEGATIVE = (33, 102, 172)  # blue
_POSITIVE = (178, 24, 43)  # red
_DIFFERENCE = (63, 0, 125)  # dark purple

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; }
h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.9em; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; }
.passed { color: #1a7f37; }
.failed { color: #cf222e; font-weight: bold; }
.error { color: #8250df; font-weight: bold; }
.skipped { color: #9a6700; }
.hint { color: #0969da; }
figure { margin: 1em 0; }
figcaption { font-size: 0.9em; margin-bottom: 0.4em; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: #222; }
"""


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(min(max(channel, 0.0), 255.0)):02x}" for channel in rgb)


def _blend(colour: tuple[int, int, int], amount: float) -> str:
    """White blended towards ``colour`` by ``amount`` in [0, 1]."""
    amount = min(max(amount, 0.0), 1.0)
    red, green, blue = (255.0 + (c - 255.0) * amount for c in colour)
    return _hex((red, green, blue))


def diverging_colour(value: float, top: float) -> str:
    """Blue for negative, white for zero, red for positive, saturated at ``±top``."""
    if top <= 0:
        return "#ffffff"
    return _blend(_POSITIVE if value >= 0 else _NEGATIVE, abs(value) / top)


def sequential_colour(value: float, top: float) -> str:
    """White for zero to dark purple at ``top``."""
    return "#ffffff" if top <= 0 else _blend(_DIFFERENCE, value / top)


def _number(value: float) -> str:
    return f"{value:.3g}"


def _element(
    parent: ET.Element, tag: str, text: str | None = None, *, lines: bool = False, **attributes: str
) -> ET.Element:
    """A child element; ``lines``: its text keeps its line breaks (``<pre>``, ``<style>``)."""
    element = ET.SubElement(
        parent, tag, {key.rstrip("_").replace("_", "-"): shown(value) for key, value in attributes.items()}
    )
    if text is not None:
        element.text = shown(text, keep_newlines=lines)
    return element


def _cell_index(grid: Grid, row: int, column: int) -> str:
    top, left = row * grid.block[0], column * grid.block[1]
    if grid.block == (1, 1):
        return f"[{top}, {left}]" if grid.shape[0] > 1 else f"[{left}]"
    return f"rows {top}-{top + grid.block[0] - 1}, columns {left}-{left + grid.block[1] - 1}"


def _panel(
    svg: ET.Element,
    grid: Grid,
    name: str,
    title: str,
    values: list[list[float]],
    colour: Callable[[float], str],
    x: int,
    cell: int,
) -> None:
    group = _element(svg, "g", class_="panel", data_panel=name, transform=f"translate({x},0)")
    _element(group, "text", title, x="0", y="12")
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            rect = _element(
                group,
                "rect",
                class_="cell",
                x=str(c * cell),
                y=str(_TITLE + r * cell),
                width=str(cell),
                height=str(cell),
                fill=colour(value),
                data_value=repr(value),
            )
            _element(rect, "title", f"{_cell_index(grid, r, c)}: {value:.6g}")
    if grid.worst is not None:
        worst_row, worst_column = grid.worst
        _element(
            group,
            "rect",
            class_="worst",
            data_row=str(worst_row),
            data_column=str(worst_column),
            x=str(worst_column * cell),
            y=str(_TITLE + worst_row * cell),
            width=str(cell),
            height=str(cell),
            fill="none",
            stroke="#000000",
            stroke_width="2",
        )


def _legend(svg: ET.Element, y: int, x: int, width: int, label: str, stops: list[str], low: str, high: str) -> None:
    group = _element(svg, "g", class_="legend", transform=f"translate({x},{y})")
    _element(group, "text", label, x="0", y="11")
    step = width / len(stops)
    for i, fill in enumerate(stops):
        _element(group, "rect", x=f"{i * step:.1f}", y="16", width=f"{step + 0.5:.1f}", height="10", fill=fill)
    _element(group, "text", low, x="0", y="40")
    _element(group, "text", high, x=str(width), y="40", text_anchor="end")


def _caption(problem: Problem, shape: tuple[int, ...] | None, grid: Grid, reference: str) -> str:
    """What the three panels show, for the figure's caption and the picture's title."""
    caption = f"{problem.input}"
    if shape:
        caption += f" {format_shape(shape)}"
    caption += f": the custom gradient, {reference}, and their difference"
    if grid.block != (1, 1):
        caption += f"; each cell is the element that differs most in a block of {grid.block[0]}x{grid.block[1]}"
    if problem.worst_index is not None and grid.worst is not None:
        caption += f"; outlined: the worst element {list(problem.worst_index)}"
    return caption


def heat_map_figure(parent: ET.Element, problem: Problem, shape: tuple[int, ...] | None) -> None:
    """The three panels of one input: custom, reference and their difference, with legends."""
    grid = layout(problem, MAX_CELLS, MAX_CELLS)
    if grid is None:
        return
    reference = REFERENCE_NAMES.get(problem.check, problem.check)
    cell = max(3, PANEL_PIXELS // max(grid.rows, grid.columns))
    width = grid.columns * cell
    height = _TITLE + grid.rows * cell
    figure = _element(parent, "figure", class_="heatmaps", data_input=problem.input or "", data_check=problem.check)
    caption = _caption(problem, shape, grid, reference)
    _element(figure, "figcaption", caption)
    magnitude = grid.largest_magnitude
    largest = grid.largest_difference
    total_width = 3 * width + 2 * _GAP
    svg = _element(
        figure,
        "svg",
        xmlns="http://www.w3.org/2000/svg",
        class_="heatmaps",
        width=str(total_width),
        height=str(height + _LEGEND + 8),
        viewBox=f"0 0 {total_width} {height + _LEGEND + 8}",
        role="img",
    )
    _element(svg, "title", caption)

    def shared(value: float) -> str:
        return diverging_colour(value, magnitude)

    def own(value: float) -> str:
        return sequential_colour(value, largest)

    _panel(svg, grid, "custom", "custom gradient", grid.custom, shared, 0, cell)
    _panel(svg, grid, "reference", reference, grid.reference, shared, width + _GAP, cell)
    _panel(svg, grid, "difference", "|custom - reference|", grid.difference, own, 2 * (width + _GAP), cell)
    legend_y = height + 8
    _legend(
        svg,
        legend_y,
        0,
        2 * width + _GAP,
        "custom and reference: one shared scale",
        [diverging_colour(magnitude * (i / 8 - 1), magnitude) for i in range(17)],
        _number(-magnitude),
        _number(magnitude),
    )
    _legend(
        svg,
        legend_y,
        2 * (width + _GAP),
        width,
        "difference: its own scale",
        [sequential_colour(largest * i / 8, largest) for i in range(9)],
        "0",
        _number(largest),
    )


def _problem_table(parent: ET.Element, problems: tuple[Problem, ...]) -> None:
    table = _element(parent, "table", class_="problems")
    head = _element(_element(table, "thead"), "tr")
    columns = ("input", "check", "execution", "expected", "got", "max abs", "max rel", "worst index")
    for column in columns:
        _element(head, "th", column)
    body = _element(table, "tbody")
    for problem in problems:
        row = _element(body, "tr")
        cells = (
            problem.input or "-",
            problem.check,
            problem.execution or "",
            problem.expected or "",
            problem.got or "",
            _number(problem.max_abs_error) if problem.max_abs_error is not None else "",
            _number(problem.max_rel_error) if problem.max_rel_error is not None else "",
            str(list(problem.worst_index)) if problem.worst_index is not None else "",
        )
        for value in cells:
            _element(row, "td", value)


def _anchor(index: int) -> str:
    return f"result-{index}"


def _result_section(body: ET.Element, index: int, result: Result) -> None:
    section = _element(body, "section", class_=f"result {result.status}", id=_anchor(index))
    heading = _element(section, "h2")
    _element(heading, "span", result.status.upper(), class_=result.status)
    _element(heading, "code", " " + result.id)
    if result.skip_reason:
        _element(section, "p", result.skip_reason)
    if result.problems:
        _problem_table(section, result.problems)
        listing = _element(section, "ul")
        for problem in result.problems:
            item = _element(listing, "li")
            _element(item, "strong", f"{problem.input or result.name} ({problem.check}): ")
            _element(item, "span", problem.message)
            if problem.hint:
                _element(item, "div", f"hint: {problem.hint}", class_="hint")
            if problem.traceback:
                details = _element(item, "details")
                _element(details, "summary", "traceback")
                _element(details, "pre", problem.traceback, lines=True)
    shapes = {item.name: item.shape for item in result.inputs}
    for problem in pictured_problems(result.problems):
        heat_map_figure(section, problem, shapes.get(problem.input or ""))
    if result.notes:
        notes = _element(section, "ul", class_="notes")
        for note in result.notes:
            _element(notes, "li", f"note: {note}")
    if result.reproduce:
        line = _element(section, "p", "reproduce: ")
        _element(line, "code", result.reproduce)


def render(report: RunReport, options: RenderOptions) -> str:
    """The report as one HTML page."""
    html = ET.Element("html", lang="en")
    head = _element(html, "head")
    _element(head, "meta", charset="utf-8")
    _element(head, "title", f"gradcheck: {summary_line(report)}")
    _element(head, "style", _STYLE, lines=True)
    body = _element(html, "body")
    _element(body, "h1", "gradcheck report")
    _element(
        body,
        "p",
        f"{summary_line(report)} · seed {report.seed} · gradcheck {report.version}",
        class_="summary",
    )
    table = _element(body, "table", class_="summary")
    header = _element(_element(table, "thead"), "tr")
    for column in ("status", "function", "seconds", "problems"):
        _element(header, "th", column)
    rows = _element(table, "tbody")
    for index, result in enumerate(report.results):
        row = _element(rows, "tr", class_=result.status)
        _element(row, "td", result.status, class_=result.status)
        name = _element(row, "td")
        if result.status != "passed":
            # Only what did not pass has a section of its own to link to.
            name = _element(name, "a", href=f"#{_anchor(index)}")
        _element(name, "code", result.id)
        _element(row, "td", f"{result.seconds:.2f}")
        checks = ", ".join(dict.fromkeys(p.check for p in result.problems))
        _element(row, "td", checks or result.skip_reason or "")
    if report.not_checked:
        _element(body, "p", "not checked: " + ", ".join(report.not_checked))
    for index, result in enumerate(report.results):
        if result.status != "passed":
            _result_section(body, index, result)
    ET.indent(html)
    return "<!DOCTYPE html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"
