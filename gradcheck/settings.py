"""Every setting, declared once: :data:`TABLE`.

One row per setting gives its name, its kind (type or choices, with the
message for a bad value), default, help, scope, command-line flag, config
key and whether ``gradcheck.check`` takes it as a keyword. The click options
(:mod:`gradcheck.cli`), the config validation (:mod:`gradcheck.config`),
``gradcheck.check``'s keywords (:mod:`gradcheck.api`), the reproduce command
(:func:`gradcheck.check_requests.reproduce_command`) and :class:`Settings` itself
are derived from it, so a new setting is one new row.

Stdlib only, and no click: :mod:`gradcheck.cli` turns each kind into a click
type. Imports :mod:`gradcheck.results` and the format names of
:mod:`gradcheck.reporting`, nothing above them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gradcheck.dtypes import FLOAT_DTYPES
from gradcheck.reporting import FORMATS
from gradcheck.results import FAIL_ON_STATUSES

MODES = ("fast", "full")
EXECUTIONS = ("eager", "function", "both")
REFERENCES = ("both", "numeric", "native", "none")
DEVICES = ("auto", "cpu", "gpu")
#: Seconds a function's check may take before it is stopped (``--timeout``; 0: no limit).
DEFAULT_TIMEOUT = 60.0

#: Scopes. ``function``: each check reads it from its :class:`Settings` (the config's top level,
#: and for ``per_function`` settings a function's table, may set it). ``run``: the run as a
#: whole reads it once, from the command line or the config's top level.
FUNCTION = "function"
RUN = "run"

#: Groups: where ``gradcheck run --help`` and the guide's references list an option or a key, in this order.
#: ``selection``: what is checked; ``checking``: how; ``reports``: what is written; ``CI``: what fails the
#: run and how a job splits it; ``resources``: time, memory, processes and devices.
SELECTION = "Selection"
CHECKING = "Checking"
REPORTS = "Reports"
CI = "CI"
RESOURCES = "Resources"
GROUPS = (SELECTION, CHECKING, REPORTS, CI, RESOURCES)


class InvalidValue(ValueError):
    """A setting's value that its kind refuses; the message says why, without naming the key."""


def closest(name: str, candidates: Collection[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or ``''``."""
    by_lower = {candidate.lower(): candidate for candidate in sorted(candidates)}
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean '{by_lower[matches[0]]}'?)" if matches else ""


# -- kinds: what a value may be, and what to say when it is not ---------------------------------


@dataclass(frozen=True)
class Choice:
    """One of a few words."""

    choices: tuple[str, ...]

    def parse(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            hint = closest(value, self.choices) if isinstance(value, str) else ""
            raise InvalidValue(f"{value!r} is not one of {', '.join(self.choices)}{hint}")
        return value


@dataclass(frozen=True)
class Flag:
    """True or false."""

    def parse(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise InvalidValue(f"{value!r} must be true or false")
        return value


@dataclass(frozen=True)
class Number:
    """An integer or a finite float within bounds."""

    integer: bool
    """Whole numbers only (booleans never count as numbers)."""
    minimum: float
    """The lowest value allowed (excluded where ``above``)."""
    must: str
    """What the value must be, for the message: ``must be a positive integer``."""
    maximum: float | None = None
    above: bool = False
    """``minimum`` itself is refused: a positive number."""
    not_number: str | None = None
    """The message for a value that is no number at all; None: ``must``."""

    def parse(self, value: Any) -> int | float:
        wanted = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise InvalidValue(f"{value!r} {self.not_number or self.must}")
        too_low = value <= self.minimum if self.above else value < self.minimum
        if (
            (isinstance(value, float) and not math.isfinite(value))
            or too_low
            or (self.maximum is not None and value > self.maximum)
        ):
            raise InvalidValue(f"{value!r} {self.must}")
        return value if self.integer else float(value)


@dataclass(frozen=True)
class Statuses:
    """Result statuses: a list, or one string of comma-separated statuses."""

    def parse(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            items: list[Any] = [part.strip() for part in value.split(",")]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise InvalidValue(f'{value!r} must be a list of statuses, e.g. ["failed", "error"]')
        kind = Choice(FAIL_ON_STATUSES)
        statuses = tuple(dict.fromkeys(kind.parse(item) for item in items))
        if not statuses:
            raise InvalidValue(f"name at least one of {', '.join(FAIL_ON_STATUSES)}")
        return statuses


@dataclass(frozen=True)
class FilePath:
    """A file path, as the text written (the command line's flag makes it a ``Path`` itself)."""

    def parse(self, value: Any) -> str:
        if not isinstance(value, str):
            raise InvalidValue("must be a file path")
        return value


#: The most workers ``-j`` may ask for: each is a Python process with TensorFlow loaded (hundreds of
#: MB); however many are asked for, no more start than there are functions to check.
MAX_JOBS = 256


@dataclass(frozen=True)
class WorkerCount:
    """A positive number of worker processes, or ``auto``: as many as this process may use cores."""

    def parse(self, value: Any) -> int | str:
        if value == "auto":
            return "auto"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidValue(f"{value!r} must be a positive integer or auto")
        if value > MAX_JOBS:
            raise InvalidValue(f"{value!r} must be at most {MAX_JOBS} (or auto)")
        return value

    def parse_text(self, text: str) -> int | str:
        """A value as the command line gives it (``4``, ``auto``)."""
        return self.parse(int(text) if text.strip().lstrip("-").isdigit() else text)


@dataclass(frozen=True)
class Globs:
    """Path globs (``tests/*``, ``*_test.py``): a list in the config, a repeated flag on the command line."""

    def parse(self, value: Any) -> tuple[str, ...]:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) and item.strip() for item in items):
            raise InvalidValue(f'{value!r} must be a list of glob patterns, such as ["tests/*", "docs"]')
        return tuple(items)


Kind = Choice | Flag | Number | Statuses | FilePath | WorkerCount | Globs

_POSITIVE = Number(False, 0, "must be a positive number", above=True, not_number="is not a number")


# -- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting: how it is written, checked, defaulted and used."""

    name: str
    """The attribute of :class:`Settings` (or of the run) and the keyword of ``gradcheck.check``."""
    kind: Kind
    """What a value may be; ``kind.parse`` checks one and says what is wrong."""
    default: Any
    help: str
    scope: str = FUNCTION
    """:data:`FUNCTION` or :data:`RUN`."""
    per_function: bool = False
    """A ``[functions.NAME]`` or ``[layers.NAME]`` table may set it."""
    flag: str | None = ""
    """The long command-line flag; ``""``: ``--name`` with hyphens; None: no flag."""
    short: str | None = None
    """A one-letter flag as well (``-o``)."""
    metavar: str | None = None
    multiple: bool = False
    """The flag may be repeated (``--format``, ``-o``, ``--fail-on``)."""
    keyword: bool = False
    """``gradcheck.check`` takes it as a keyword argument."""
    reproduce: str = "never"
    """When the reproduce command carries it: ``always``; ``given`` (on the command line, and not
    the default); ``set`` (a flag, whenever it is on); ``never``."""
    config_key: str = ""
    """The key in the config file; ``""``: the name."""
    group: str = CHECKING
    """Where ``--help`` and the guide's references list it: one of :data:`GROUPS`."""

    @property
    def key(self) -> str:
        """The config key."""
        return self.config_key or self.name

    @property
    def long_flag(self) -> str | None:
        """``--name``, or None for a setting the command line does not take."""
        return None if self.flag is None else (self.flag or "--" + self.name.replace("_", "-"))

    def parse(self, value: Any) -> Any:
        """The value, checked (and a whole float made a float); raise :class:`InvalidValue`."""
        return self.kind.parse(value)

    def phrase(self, value: Any, way: str) -> str:
        """This setting with ``value`` as a message quotes it: written as a ``flag``, ``keyword`` or config ``key``."""
        if way == "flag" and self.long_flag is not None:
            return f"{self.long_flag} {value}"
        if way == "keyword":
            return f"{self.name}={value!r}"
        if isinstance(value, bool):
            return f"{self.key} = {str(value).lower()}"
        return f'{self.key} = "{value}"' if isinstance(value, str) else f"{self.key} = {value}"


TABLE: tuple[Setting, ...] = (
    Setting("shape_only", Flag(), False, "Audit counts, shapes and dtypes only.", keyword=True, reproduce="set"),
    Setting(
        "mode",
        Choice(MODES),
        "fast",
        "fast: projected checks; full: whole Jacobians.",
        per_function=True,
        keyword=True,
        reproduce="given",
    ),
    Setting(
        "dtype",
        Choice(FLOAT_DTYPES),
        "float64",
        "Dtype the inputs are drawn in.",
        per_function=True,
        keyword=True,
        reproduce="given",
    ),
    Setting(
        "seed",
        Number(True, 0, "must be a non-negative integer"),
        0,
        "Seed of every random draw.",
        keyword=True,
        reproduce="always",
    ),
    Setting("atol", _POSITIVE, None, "Absolute tolerance.", per_function=True, keyword=True, reproduce="given"),
    Setting("rtol", _POSITIVE, None, "Relative tolerance.", per_function=True, keyword=True, reproduce="given"),
    Setting(
        "eps", _POSITIVE, None, "Relative finite-difference step.", per_function=True, keyword=True, reproduce="given"
    ),
    Setting(
        "projections",
        Number(True, 1, "must be a positive integer"),
        3,
        "Random directions per input in fast mode (the first look takes one joint direction per three).",
        per_function=True,
        metavar="N",
        keyword=True,
        reproduce="given",
    ),
    Setting(
        "execution",
        Choice(EXECUTIONS),
        "both",
        "Run eagerly, in tf.function, or both.",
        per_function=True,
        keyword=True,
        reproduce="given",
    ),
    Setting(
        "order",
        Number(True, 1, "must be 1 or 2", maximum=2),
        1,
        "2: also check the gradient of each custom gradient.",
        per_function=True,
        metavar="[1|2]",
        keyword=True,
        reproduce="given",
    ),
    Setting(
        "reference",
        Choice(REFERENCES),
        "both",
        "Which references to compare with: both, numeric, native or none.",
        per_function=True,
        flag=None,
        keyword=True,
    ),
    Setting(
        "format",
        Choice(FORMATS),
        "text",
        "Report format; repeat for several reports, each followed by its own -o.",
        scope=RUN,
        multiple=True,
        group=REPORTS,
    ),
    Setting(
        "output",
        FilePath(),
        None,
        "Write the --format before it to FILE (atomically).",
        scope=RUN,
        short="-o",
        multiple=True,
        group=REPORTS,
    ),
    Setting("strict", Flag(), False, "A skipped function counts as a failure.", group=CI),
    Setting(
        "fail_on",
        Statuses(),
        None,
        "Statuses that fail the run: failed, error, skipped (default: failed,error).",
        scope=RUN,
        metavar="STATUS[,STATUS]",
        multiple=True,
        group=CI,
    ),
    Setting(
        "maxfail",
        Number(True, 1, "must be a positive integer"),
        None,
        "Stop after N failures.",
        scope=RUN,
        metavar="N",
        group=CI,
    ),
    Setting(
        "timeout",
        Number(False, 0, "must be a number of seconds, 0 or more (0: no limit)"),
        DEFAULT_TIMEOUT,
        f"Stop a function's check after SECONDS; it is an error (default {DEFAULT_TIMEOUT:g}; 0: no limit).",
        per_function=True,
        metavar="SECONDS",
        group=RESOURCES,
    ),
    Setting(
        "max_memory",
        Number(True, 0, "must be a whole number of megabytes, 0 or more (0: no limit)"),
        None,
        "Stop a check whose process holds more than MB of memory (default: half the machine's; 0: no limit).",
        scope=RUN,
        metavar="MB",
        group=RESOURCES,
    ),
    Setting(
        "jobs",
        WorkerCount(),
        1,
        f"Check N functions at once (at most {MAX_JOBS}), each in its own worker process, never more workers than "
        "functions; auto: up to one per usable core, each started only when the work ahead outlasts its start-up.",
        scope=RUN,
        short="-j",
        metavar="N|auto",
        group=RESOURCES,
    ),
    Setting(
        "exclude",
        Globs(),
        (),
        "Leave files and folders matching GLOB out of directory and package walks (repeatable; "
        "relative to the current folder, the config's relative to its own).",
        scope=RUN,
        metavar="GLOB",
        multiple=True,
        group=SELECTION,
    ),
    Setting(
        "device",
        Choice(DEVICES),
        "auto",
        "Where checks run; auto: the GPU where there is one.",
        keyword=True,
        group=RESOURCES,
    ),
)

BY_NAME: dict[str, Setting] = {setting.name: setting for setting in TABLE}
BY_KEY: dict[str, Setting] = {setting.key: setting for setting in TABLE}
#: What each check reads: the fields of :class:`Settings`.
FUNCTION_SETTINGS = tuple(s for s in TABLE if s.scope == FUNCTION)
#: What the run reads once: ``format``, ``output``, ``fail_on``, ``maxfail``, ``max_memory``, ``jobs``.
RUN_SETTINGS = tuple(s for s in TABLE if s.scope == RUN)
#: ``gradcheck.check``'s settings keywords.
KEYWORD_SETTINGS = tuple(s for s in TABLE if s.keyword)


@dataclass(frozen=True)
class Settings:
    """How to check one function: a field per function-scope row of :data:`TABLE`, with its default.

    Declared field by field so that readers and type checkers see the types; a test holds the
    fields and defaults equal to the table's rows (``tests/test_settings.py``).
    """

    shape_only: bool = False
    mode: str = "fast"
    dtype: str = "float64"
    seed: int = 0
    atol: float | None = None
    rtol: float | None = None
    eps: float | None = None
    projections: int = 3
    execution: str = "both"
    order: int = 1
    reference: str = "both"
    strict: bool = False
    timeout: float = DEFAULT_TIMEOUT
    device: str = "auto"

    @property
    def executions(self) -> tuple[str, ...]:
        """The execution modes to run, eager first."""
        return ("eager", "function") if self.execution == "both" else (self.execution,)

    @property
    def compares_native(self) -> bool:
        """Whether gradients are compared with native autodiff (``reference`` is ``both`` or ``native``)."""
        return self.reference in ("both", "native") and not self.shape_only


def resolve(given: Mapping[str, Any], configured: Mapping[str, Any], settings: tuple[Setting, ...]) -> dict[str, Any]:
    """Each of ``settings``: the given value where there is one, else the configured one, else the default."""
    return {
        s.name: given[s.name] if given.get(s.name) is not None else configured.get(s.key, s.default) for s in settings
    }
