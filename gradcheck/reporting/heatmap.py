"""Heat-map layout shared by the text and HTML reports: pooling a grid to fit, levels, the worst cell.

Standard library only. This is drawing, not checking: every value laid out
here comes from a :class:`~gradcheck.results.HeatMap` record; a big grid is
reduced by keeping, for each block of elements, the one that differs most,
so that a single wrong element still shows at any size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gradcheck.results import HeatMap, Problem

#: The checks whose problems carry a heat map of |custom - reference|.
VALUE_CHECKS = ("native", "numeric")

#: Plain-character ramp, from no difference to the largest (no colour, NO_COLOR).
PLAIN_RAMP = " .:-=+*#%@"
#: The number of levels a difference is shown with: one per ramp character.
LEVELS = len(PLAIN_RAMP)


@dataclass(frozen=True)
class Grid:
    """A heat map laid out as rows of cells, each standing for a block of elements."""

    custom: list[list[float]]
    """The custom gradient at each cell's element."""
    reference: list[list[float]]
    """The reference at each cell's element."""
    difference: list[list[float]]
    """``|custom - reference|`` at each cell's element: the largest of its block."""
    shape: tuple[int, int]
    """Rows and columns of the two-dimensional view before pooling (a vector is one row)."""
    block: tuple[int, int]
    """Elements per cell along rows and columns (1, 1 when nothing was pooled)."""
    worst: tuple[int, int] | None
    """The cell holding the worst element, where known."""
    worst_element: tuple[int, int] | None
    """The worst element's row and column in the two-dimensional view."""

    @property
    def rows(self) -> int:
        """Number of rows of cells."""
        return len(self.difference)

    @property
    def columns(self) -> int:
        """Number of cells per row."""
        return len(self.difference[0]) if self.difference else 0

    @property
    def largest_difference(self) -> float:
        """The largest difference shown (the top of the difference scale)."""
        return max((value for row in self.difference for value in row), default=0.0)

    @property
    def largest_magnitude(self) -> float:
        """The largest |value| of custom and reference together (their shared colour scale)."""
        values = [abs(v) for grid in (self.custom, self.reference) for row in grid for v in row]
        return max(values, default=0.0)


def _as_rows(values: Any) -> list[list[float]]:
    """A vector as one row; a matrix as it is; a scalar as one cell."""
    if not isinstance(values, list):
        return [[float(values)]]
    if values and isinstance(values[0], list):
        return [[float(v) for v in row] for row in values]
    return [[float(v) for v in values]]


def worst_element(heatmap: HeatMap, problem: Problem, shape: tuple[int, int]) -> tuple[int, int] | None:
    """The problem's worst index as a row and column of the heat map's two-dimensional view."""
    index = problem.worst_index
    if index is None:
        return None
    try:
        picked = [index[axis] for axis in heatmap.axes]
    except IndexError:
        return None
    if len(picked) == 1:
        picked = [0, picked[0]]
    if len(picked) != 2 or not (0 <= picked[0] < shape[0] and 0 <= picked[1] < shape[1]):
        return None
    return picked[0], picked[1]


def layout(problem: Problem, max_rows: int, max_columns: int) -> Grid | None:
    """The problem's heat map pooled to at most ``max_rows`` x ``max_columns`` cells; None without one."""
    heatmap = problem.heatmap
    if heatmap is None:
        return None
    custom, reference, difference = (_as_rows(v) for v in (heatmap.custom, heatmap.reference, heatmap.difference))
    if not difference or not difference[0]:
        return None
    rows, columns = len(difference), len(difference[0])
    block = (math.ceil(rows / max_rows), math.ceil(columns / max_columns))
    pooled: tuple[list[list[float]], list[list[float]], list[list[float]]] = ([], [], [])
    for top in range(0, rows, block[0]):
        row_cells: tuple[list[float], list[float], list[float]] = ([], [], [])
        for left in range(0, columns, block[1]):
            # The element that differs most stands for its block, with its own custom
            # and reference values, so the three panels stay consistent.
            picked = max(
                (
                    (r, c)
                    for r in range(top, min(top + block[0], rows))
                    for c in range(left, min(left + block[1], columns))
                ),
                key=lambda rc: difference[rc[0]][rc[1]],
            )
            for target, source in zip(row_cells, (custom, reference, difference)):
                target.append(source[picked[0]][picked[1]])
        for panel_rows, cells in zip(pooled, row_cells):
            panel_rows.append(cells)
    element = worst_element(heatmap, problem, (rows, columns))
    worst = (element[0] // block[0], element[1] // block[1]) if element is not None else None
    return Grid(
        custom=pooled[0],
        reference=pooled[1],
        difference=pooled[2],
        shape=(rows, columns),
        block=block,
        worst=worst,
        worst_element=element,
    )


def level(value: float, top: float) -> int:
    """Which of :data:`LEVELS` levels ``value`` falls on, on a scale from 0 to ``top`` (rounded)."""
    if top <= 0 or not math.isfinite(value) or value <= 0:
        return 0
    return min(LEVELS - 1, int(value / top * (LEVELS - 1) + 0.5))


def pictured_problems(problems: tuple[Problem, ...]) -> list[Problem]:
    """The value problems to draw: the first with a heat map for each input.

    The native and numeric problems of one input usually show the same
    picture; one per input is enough.
    """
    chosen: list[Problem] = []
    seen: set[str | None] = set()
    for problem in problems:
        if problem.check in VALUE_CHECKS and problem.heatmap is not None and problem.input not in seen:
            seen.add(problem.input)
            chosen.append(problem)
    return chosen


REFERENCE_NAMES = {"native": "native autodiff", "numeric": "finite differences"}
