"""Result records of a gradcheck run and the exit-code enum.

Standard library only: reporters, the command line and user code can import
this module without pulling in TensorFlow or numpy.
"""

from __future__ import annotations

import enum
import importlib.metadata
from dataclasses import dataclass, field
from typing import Any, Literal

#: The checks a problem can belong to, as the JSON report (documented in docs/ci.md) lists them.
CHECKS = (
    "count",
    "shape",
    "dtype",
    "finite",
    "native",
    "numeric",
    "variables",
    "execution",
    "exception",
    "import",
)

#: Why a problem was found, or why a subject could not be built, as a code for the code that must tell
#: the situation from others (the message says it to people, and may be reworded): set where the
#: situation is found, and no part of any report.
Reason = Literal[
    "non-finite-gradient",  # a custom gradient holds NaN or Inf
    "unreliable-numeric",  # finite differences could not judge the gradient at any draw, nor anything else
    "needs-init",  # a class needs constructor arguments the config does not give
    "init-raised",  # the class's constructor raised on the arguments it was given
    "needs-constants",  # arguments that are Python values, which the config must give
    "eager-only",  # the code reads tensor values (.numpy(), numpy) or asserts eager execution: no tf.function
]

STATUSES = ("passed", "failed", "error", "skipped")

#: The statuses ``--fail-on`` can name, and those that fail a run by default (as pytest).
FAIL_ON_STATUSES = ("failed", "error", "skipped")
DEFAULT_FAIL_ON = ("failed", "error")


def _installed_version() -> str:
    # pyproject.toml holds the one version literal; a source tree that was never installed has none.
    try:
        return importlib.metadata.version("gradcheck")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


#: gradcheck's version, from the package metadata.
VERSION = _installed_version()


def format_shape(shape: tuple[int | None, ...] | None) -> str:
    """``(3,)`` for one axis, as Python writes tuples; ``?`` for an unknown size, ``unknown`` for no shape."""
    if shape is None:
        return "unknown"
    return (
        "(" + ", ".join("?" if size is None else str(size) for size in shape) + ("," if len(shape) == 1 else "") + ")"
    )


def split_id(text: str) -> tuple[str, str | None]:
    """``path::NAME`` -> the path and the name (None where there is none).

    The one reading of that form: a result's id, and a target as the user
    writes it, whose ``::NAME`` names a function by its id's name.
    """
    location, _, name = text.partition("::")
    return location, name or None


class ExitCode(enum.IntEnum):
    """Exit codes of ``gradcheck run``, as pytest's.

    When several apply, the first in this order wins:
    INTERNAL_ERROR > INTERRUPTED > USAGE_ERROR > FAILED > NO_TESTS > OK.
    """

    OK = 0
    """Every checked function and layer passed."""
    FAILED = 1
    """At least one function or layer failed or raised."""
    USAGE_ERROR = 2
    """Bad option, bad config, target missing or failed to import."""
    INTERNAL_ERROR = 3
    """A bug in gradcheck itself."""
    NO_TESTS = 5
    """Nothing to check was found in the targets."""
    INTERRUPTED = 130
    """Interrupted by Ctrl-C; the results collected so far are reported."""


_PRECEDENCE = (
    ExitCode.INTERNAL_ERROR,
    ExitCode.INTERRUPTED,
    ExitCode.USAGE_ERROR,
    ExitCode.FAILED,
    ExitCode.NO_TESTS,
    ExitCode.OK,
)


def most_severe(codes: list[ExitCode]) -> ExitCode:
    """The exit code that wins among ``codes`` (OK when there are none)."""
    for code in _PRECEDENCE:
        if code in codes:
            return code
    return ExitCode.OK


@dataclass(frozen=True)
class HeatMap:
    """Element-wise values behind a value problem, for pictures in reports.

    Arrays are nested lists of floats (row-major, at most 2-D: higher ranks
    are reduced to their two largest axes by the checker), so reporters need
    no numpy and records stay plain data.
    """

    custom: list[Any]
    """The gradient the backward function returned."""
    reference: list[Any]
    """The reference gradient it was compared with."""
    difference: list[Any]
    """``|custom - reference|`` element-wise."""
    axes: tuple[int, ...]
    """Which axes of the input the two dimensions stand for."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one gradient (or with the function as a whole)."""

    check: str
    """Which check found it: one of :data:`CHECKS`."""
    input: str | None
    """The input (or variable) the problem is about; None for the whole function."""
    message: str
    """One sentence saying what is wrong."""
    execution: str | None = None
    """``eager`` or ``function`` where the problem was seen in one mode only."""
    expected: str | None = None
    """What was expected (a shape, a dtype, a count), as text."""
    got: str | None = None
    """What the backward function gave instead, as text."""
    max_abs_error: float | None = None
    """Largest absolute difference from the reference."""
    max_rel_error: float | None = None
    """Largest absolute difference divided by the largest reference magnitude."""
    worst_index: tuple[int, ...] | None = None
    """Index of the element with the largest difference, where known."""
    hint: str | None = None
    """The likely bug, where the pattern is recognisable."""
    heatmap: HeatMap | None = field(default=None, compare=False)
    """Element-wise values for pictures; not part of the JSON report."""
    order: int = 1
    """1 for the gradient itself, 2 for the gradient of the gradient (``--order 2``)."""
    line: int | None = None
    """The line of the user's file the problem points at (where their code raised), if any."""
    traceback: str | None = field(default=None, compare=False)
    """The formatted traceback of an ``exception`` (or ``execution``) problem, from the
    first frame in the user's file on; shown with ``-v`` and in JUnit ``<error>``
    texts, not part of the JSON report (the message already names the user's line)."""
    reason: Reason | None = None
    """What situation this is, for code that must recognise it (not the message); in no report."""

    def to_dict(self) -> dict[str, Any]:
        """This problem as one entry of the JSON report's ``problems`` list."""
        return {
            "check": self.check,
            "input": self.input,
            "execution": self.execution,
            "message": self.message,
            "expected": self.expected,
            "got": self.got,
            "max_abs_error": self.max_abs_error,
            "max_rel_error": self.max_rel_error,
            "worst_index": list(self.worst_index) if self.worst_index is not None else None,
            "hint": self.hint,
            "order": self.order,
            "line": self.line,
        }


@dataclass(frozen=True)
class InputRecord:
    """One argument of a checked function as it was fed."""

    name: str
    """Argument name (or variable name)."""
    shape: tuple[int, ...] | None
    """Shape of the tensor fed; None for a constant."""
    dtype: str
    """Dtype of the tensor fed, or the Python type name of a constant."""
    role: str = "input"
    """``input`` (differentiated), ``constant``, ``integer`` or ``variable``."""
    guessed: bool = False
    """True when the shape was found by probing, not configured."""

    def to_dict(self) -> dict[str, Any]:
        """This input as one entry of the JSON report's ``inputs`` list."""
        record: dict[str, Any] = {
            "name": self.name,
            "shape": list(self.shape) if self.shape is not None else None,
            "dtype": self.dtype,
        }
        if self.role != "input":
            record["role"] = self.role
        if self.guessed:
            record["guessed"] = True
        return record


@dataclass(frozen=True)
class Result:
    """What checking one custom-gradient function or layer found: its status, problems and notes."""

    id: str
    """``path::name``, as on the command line."""
    name: str
    """The function's name in its module (``Class.method`` for methods)."""
    kind: str
    """``function``, ``layer``, or ``module`` (a module of a walk that failed to import)."""
    status: str
    """``passed``, ``failed``, ``error`` or ``skipped``."""
    dtype: str | None = None
    """The dtype the inputs were drawn in."""
    inputs: tuple[InputRecord, ...] = ()
    """The arguments as fed."""
    problems: tuple[Problem, ...] = ()
    """What is wrong; empty when passed."""
    seconds: float = 0.0
    """Wall time of this check."""
    notes: tuple[str, ...] = ()
    """Things worth knowing that are not problems (guessed shapes, redraws)."""
    skip_reason: str | None = None
    """Why the function was skipped, with the config to write."""
    path: str | None = None
    """Source file of the function, as given on the command line."""
    line: int | None = None
    """Line of the function's ``def``."""
    backward_line: int | None = None
    """Line of the backward function's ``def``, where known."""
    custom_gradients: tuple[dict[str, Any], ...] = ()
    """For a function or layer checked through the custom gradients it reaches as it runs: each
    inner function reached (``function``, ``backward_line``, ``backward_file``)."""
    reproduce: str | None = None
    """The command that reproduces this result."""

    @property
    def module(self) -> str:
        """The module part of the id (the path before ``::``)."""
        return split_id(self.id)[0]

    def to_dict(self) -> dict[str, Any]:
        """This result as one entry of the JSON report's ``results`` list."""
        record: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "dtype": self.dtype,
            "inputs": [item.to_dict() for item in self.inputs],
            "problems": [problem.to_dict() for problem in self.problems],
            "seconds": round(self.seconds, 4),
        }
        if self.notes:
            record["notes"] = list(self.notes)
        if self.skip_reason is not None:
            record["skip_reason"] = self.skip_reason
        if self.custom_gradients:
            record["custom_gradients"] = [dict(item) for item in self.custom_gradients]
        if self.reproduce is not None:
            record["reproduce"] = self.reproduce
        return record


@dataclass(frozen=True)
class Collection:
    """What collection did with the targets' files, for the report's header and ``-v``.

    Paths are as reports show them (relative to the current folder where below it).
    """

    scanned: tuple[str, ...] = ()
    """Every ``.py`` file a directory or package walk read (without importing it)."""
    imported: tuple[str, ...] = ()
    """The files imported: named on the command line, or brought in by a walk."""
    excluded: tuple[str, ...] = ()
    """Files and folders ``exclude`` left out of a walk."""
    failed: tuple[str, ...] = ()
    """Files of a walk that failed to import or to be read (each is a ``module`` result)."""
    not_regular: tuple[str, ...] = ()
    """``*.py`` names in a walk that are not regular files (FIFOs, sockets, devices): never opened."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's ``collection`` entry: each list, and how long it is."""
        return {
            name: {"count": len(getattr(self, name)), "paths": list(getattr(self, name))}
            for name in ("scanned", "imported", "excluded", "failed", "not_regular")
        }


@dataclass(frozen=True)
class RunReport:
    """Everything a run found, in the order it was checked."""

    results: tuple[Result, ...]
    """One result per function or layer."""
    seed: int
    """The seed every random draw came from."""
    seconds: float = 0.0
    """Wall time of the whole run."""
    interrupted: bool = False
    """True when Ctrl-C stopped the run early."""
    version: str = VERSION
    """gradcheck's version."""
    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    """The statuses that fail the run."""
    maxfail: int | None = None
    """``--maxfail``: the run stopped after this many results with a status in ``fail_on``."""
    not_checked: tuple[str, ...] = ()
    """Ids of the functions and layers left unchecked because the run stopped early
    (``--maxfail`` or Ctrl-C), in the order they would have been checked."""
    collection: Collection | None = None
    """What collection scanned, imported, excluded and failed to import; None where not known."""

    @property
    def summary(self) -> dict[str, int]:
        """How many results have each status."""
        counts = {status: 0 for status in STATUSES}
        for result in self.results:
            counts[result.status] += 1
        return counts

    @property
    def exit_code(self) -> ExitCode:
        """The exit code this report calls for.

        INTERRUPTED when the run was stopped, else FAILED when any result has
        a status in ``fail_on``, else NO_TESTS when there were no results,
        else OK.
        """
        codes = []
        if self.interrupted:
            codes.append(ExitCode.INTERRUPTED)
        if any(result.status in self.fail_on for result in self.results):
            codes.append(ExitCode.FAILED)
        if not self.results:
            codes.append(ExitCode.NO_TESTS)
        return most_severe(codes)

    @property
    def stopped_by_maxfail(self) -> bool:
        """True when ``--maxfail`` ended the run before everything was checked."""
        return self.maxfail is not None and bool(self.not_checked) and not self.interrupted

    def to_dict(self) -> dict[str, Any]:
        """The JSON report, as docs/ci.md documents it (``not_checked`` only when the run stopped early)."""
        document: dict[str, Any] = {
            "gradcheck": self.version,
            "seed": self.seed,
            "exit_code": int(self.exit_code),
            "summary": self.summary,
            "results": [result.to_dict() for result in self.results],
        }
        if self.not_checked:
            document["not_checked"] = list(self.not_checked)
        if self.collection is not None:
            document["collection"] = self.collection.to_dict()
        return document
