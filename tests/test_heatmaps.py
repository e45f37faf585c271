"""Heat maps of |custom - reference|: in the terminal (rich, plain under NO_COLOR) and as SVG in HTML."""

from __future__ import annotations

import io
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

from rich.console import Console

import gradcheck
from gradcheck.reporting import render
from gradcheck.reporting.heatmap import LEVELS, PLAIN_RAMP, layout, level
from gradcheck.reporting.html import diverging_colour, sequential_colour
from gradcheck.reporting.text import HEATMAP_COLUMNS, HEATMAP_ROWS, WORST_MARK, render_text, render_text_string
from gradcheck.results import HeatMap, Problem, Result, RunReport
from tests.helpers import REPO, invoke, run_json, write

#: A gradient returned transposed: |G^T - G| is zero on the diagonal and symmetric.
TRANSPOSED = """
    import tensorflow as tf

    @tf.custom_gradient
    def transposed_grad(X, W):
        def grad(dy):
            grad_X = tf.matmul(dy, W, transpose_b=True)
            return tf.transpose(grad_X), tf.matmul(X, dy, transpose_a=True)  # X's gradient transposed
        return tf.matmul(X, W), grad
"""


def heat_map_rows(text: str, title: str) -> list[list[str]]:
    """The cells (two characters each) of the heat map whose title line contains ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    assert lines[start + 1].strip().startswith("+-")
    rows = []
    for line in lines[start + 2 :]:
        body = line.strip()
        if body.startswith("+-"):
            break
        assert body.startswith("|") and body.endswith("|"), line
        cells = body[1:-1]
        rows.append([cells[i : i + 2] for i in range(0, len(cells), 2)])
    return rows


def _level_of(cell: str) -> int:
    return LEVELS - 1 if cell == WORST_MARK else PLAIN_RAMP.index(cell[0])


def test_a_transposed_gradient_shows_where_it_differs(project: Path) -> None:
    write(project, "ops.py", TRANSPOSED)
    write(project, "gradcheck.toml", "[functions.transposed_grad]\ninputs = { X = [6, 6], W = [6, 4] }\n")
    result = invoke("run", "ops.py")
    assert result.exit_code == 1
    rows = heat_map_rows(result.stdout, "X (6, 6): |custom - native autodiff|")
    assert len(rows) == 6 and all(len(row) == 6 for row in rows)
    levels = [[_level_of(cell) for cell in row] for row in rows]
    # G^T - G vanishes on the diagonal: those cells are blank, the others mostly are not.
    assert [rows[i][i] for i in range(6)] == ["  "] * 6
    assert sum(level > 0 for r, row in enumerate(levels) for c, level in enumerate(row) if r != c) >= 20
    # |G^T - G| is symmetric: the picture is symmetric about the diagonal.
    for r in range(6):
        for c in range(6):
            assert abs(levels[r][c] - levels[c][r]) <= 1, (r, c)
    # The worst element is marked where the report says it is.
    worst = next(p for p in run_json("ops.py")["results"][0]["problems"] if p["check"] == "native")["worst_index"]
    assert rows[worst[0]][worst[1]] == WORST_MARK
    assert sum(row.count(WORST_MARK) for row in rows) == 1
    assert "XX = worst element" in result.stdout


def test_the_bundled_missing_transpose_heat_map_matches_the_differences() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("broken_ops", REPO / "examples" / "broken" / "broken_ops.py")
    assert spec is not None and spec.loader is not None
    broken_ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(broken_ops)
    result = gradcheck.check(broken_ops.matmul_missing_transpose, inputs={"A": (4, 4), "W": (4, 4)})
    problem = next(p for p in result.problems if p.check == "native" and p.input == "A")
    assert "transpose" in (problem.hint or "")
    assert problem.heatmap is not None
    text = render_text_string(RunReport(results=(result,), seed=0))
    rows = heat_map_rows(text, "A (4, 4): |custom - native autodiff|")
    difference = problem.heatmap.difference
    top = max(max(row) for row in difference)
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            if (r, c) == tuple(problem.worst_index or ()):
                assert cell == WORST_MARK
            else:
                # Each cell is drawn at the level of its own difference, in place.
                assert cell == PLAIN_RAMP[level(difference[r][c], top)] * 2, (r, c)


def _vector_problem(size: int, wrong: int) -> Problem:
    custom = [0.0] * size
    custom[wrong] = 1.0
    heatmap = HeatMap(custom=custom, reference=[0.0] * size, difference=[abs(v) for v in custom], axes=(0,))
    return Problem("native", "x", "differs", worst_index=(wrong,), heatmap=heatmap)


def test_big_inputs_are_pooled_so_one_wrong_element_still_shows() -> None:
    grid = layout(_vector_problem(100, 77), HEATMAP_ROWS, HEATMAP_COLUMNS)
    assert grid is not None
    assert (grid.rows, grid.columns, grid.block) == (1, 25, (1, 4))
    assert grid.worst == (0, 77 // 4)
    assert [c for c, value in enumerate(grid.difference[0]) if value] == [77 // 4]
    matrix = [[0.0] * 40 for _ in range(50)]
    matrix[33][21] = 2.0
    problem = Problem(
        "numeric",
        "A",
        "differs",
        worst_index=(33, 21),
        heatmap=HeatMap(custom=matrix, reference=[[0.0] * 40 for _ in range(50)], difference=matrix, axes=(0, 1)),
    )
    grid = layout(problem, HEATMAP_ROWS, HEATMAP_COLUMNS)
    assert grid is not None and (grid.rows, grid.columns) == (13, 20) and grid.block == (4, 2)
    assert grid.worst == (33 // 4, 21 // 2)
    result = Result(id="ops.py::f", name="f", kind="function", status="failed", problems=(problem,), inputs=())
    text = render_text_string(RunReport(results=(result,), seed=0))
    rows = heat_map_rows(text, "A: |custom - finite differences|")
    assert "each cell the largest of 4x2 elements" in text
    marked = [(r, c) for r, row in enumerate(rows) for c, cell in enumerate(row) if cell != "  "]
    assert marked == [(33 // 4, 21 // 2)]


def test_heat_maps_use_colour_blocks_where_allowed_and_plain_characters_otherwise() -> None:
    ramp = [0.0, 0.25, 0.5, 0.75, 1.0]
    heatmap = HeatMap(custom=ramp, reference=[0.0] * 5, difference=ramp, axes=(0,))
    problem = Problem("native", "x", "differs", worst_index=(4,), heatmap=heatmap)
    result = Result(id="ops.py::f", name="f", kind="function", status="failed", problems=(problem,))
    report = RunReport(results=(result,), seed=0)
    coloured = io.StringIO()
    render_text(report, Console(file=coloured, width=100, force_terminal=True, color_system="truecolor"))
    assert "\x1b[" in coloured.getvalue() and "██" in coloured.getvalue()
    plain = io.StringIO()
    render_text(report, Console(file=plain, width=100, force_terminal=True, color_system="truecolor", no_color=True))
    assert "██" not in plain.getvalue() and "|  ::++##XX|" in plain.getvalue()
    assert not re.search(r"\x1b\[[0-9;]*3[0-9];", plain.getvalue())  # no colour codes


def test_quiet_leaves_heat_maps_out() -> None:
    result = Result(id="ops.py::f", name="f", kind="function", status="failed", problems=(_vector_problem(5, 2),))
    assert "|custom -" not in render_text_string(RunReport(results=(result,), seed=0), verbosity=-1)
    assert "|custom -" in render_text_string(RunReport(results=(result,), seed=0), verbosity=0)


# -- HTML ----------------------------------------------------------------------


class _Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: _Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[_Node] = []
        self.text = ""

    def iter(self, tag: str) -> list[_Node]:
        found = [self] if self.tag == tag else []
        for child in self.children:
            found += child.iter(tag)
        return found

    def all_text(self) -> str:
        return self.text + "".join(child.all_text() for child in self.children)


class _TreeBuilder(HTMLParser):
    """The page as browsers parse it (stdlib html.parser), as a small tree."""

    VOID = frozenset({"meta", "br", "img", "link", "input", "hr"})

    def __init__(self) -> None:
        super().__init__()
        self.root = _Node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = _Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in self.VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(_Node(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag: str) -> None:
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"unbalanced </{tag}>"
        self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.text += data


def _parse_html(text: str) -> _Node:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    assert builder.current is builder.root, "unclosed elements"
    return builder.root


def _cell_value(rect: _Node) -> float:
    return float(rect.attrs["data-value"])


def test_html_report_of_the_broken_example(project: Path) -> None:
    shutil.copytree(REPO / "examples" / "broken", project / "broken")
    result = invoke("run", "broken", "--format", "html", "-o", "report.html", "--format", "json", "-o", "r.json")
    assert result.exit_code == 1
    page = (project / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    tree = _parse_html(page)
    # Self-contained: no scripts, no external style sheets, images or links.
    assert not tree.iter("script") and not tree.iter("link") and not tree.iter("img")
    assert all(a.attrs.get("href", "").startswith("#") for a in tree.iter("a"))
    summary = next(t for t in tree.iter("table") if t.attrs.get("class") == "summary")
    assert len(summary.iter("tbody")[0].iter("tr")) == 7

    import json

    document = json.loads((project / "r.json").read_text())
    pictured = {}  # the first value problem of each input of each failing function
    for entry in document["results"]:
        for problem in entry["problems"]:
            if problem["check"] in ("native", "numeric"):
                pictured.setdefault((entry["id"], problem["input"]), problem)
    figures = tree.iter("figure")
    svgs = tree.iter("svg")
    assert len(figures) == len(svgs) == len(pictured) == 3  # one per failing input
    for svg in svgs:
        panels = [g for g in svg.iter("g") if g.attrs.get("class") == "panel"]
        assert [g.attrs["data-panel"] for g in panels] == ["custom", "reference", "difference"]
        figure = svg.parent
        assert figure is not None
        section = figure.parent
        assert section is not None
        result_id = section.iter("h2")[0].iter("code")[0].all_text().strip()
        problem = pictured[(result_id, figure.attrs["data-input"])]
        worst = problem["worst_index"]
        expected = [0, worst[0]] if len(worst) == 1 else worst
        for panel in panels:
            (marker,) = [r for r in panel.iter("rect") if r.attrs.get("class") == "worst"]
            assert [int(marker.attrs["data-row"]), int(marker.attrs["data-column"])] == expected
            cells = [r for r in panel.iter("rect") if r.attrs.get("class") == "cell"]
            at_marker = [c for c in cells if (c.attrs["x"], c.attrs["y"]) == (marker.attrs["x"], marker.attrs["y"])]
            assert len(at_marker) == 1
        custom, reference, difference = (
            [r for r in panel.iter("rect") if r.attrs.get("class") == "cell"] for panel in panels
        )
        # Custom and reference share one colour scale; the difference has its own.
        shared_top = max(abs(_cell_value(r)) for r in custom + reference)
        for rect in custom + reference:
            assert rect.attrs["fill"] == diverging_colour(_cell_value(rect), shared_top)
        own_top = max(_cell_value(r) for r in difference)
        assert own_top == problem["max_abs_error"]
        for rect in difference:
            assert rect.attrs["fill"] == sequential_colour(_cell_value(rect), own_top)
        legends = [g.iter("text")[0].all_text() for g in svg.iter("g") if g.attrs.get("class") == "legend"]
        assert legends == ["custom and reference: one shared scale", "difference: its own scale"]


def test_html_escapes_what_it_shows() -> None:
    problem = Problem("exception", None, "raised <script>alert(1)</script> & more", traceback="Traceback <b>")
    result = Result(id="a.py::f", name="f", kind="function", status="error", problems=(problem,))
    page = render(RunReport(results=(result,), seed=0), "html")
    tree = _parse_html(page)
    assert not tree.iter("script") and not tree.iter("b")
    assert "raised <script>alert(1)</script> & more" in tree.all_text()
