"""The options of ``run``, ``list`` and ``init``: rows of the settings table as click options, the
``TARGET...`` selection, ``NAME=VALUE`` pairs, and each ``-o`` paired with its ``--format``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import click

from gradcheck.cli.help import GuideCommand, grouped
from gradcheck.errors import UsageError
from gradcheck.settings import (
    BY_NAME,
    CHECKING,
    REPORTS,
    SELECTION,
    TABLE,
    Choice,
    FilePath,
    Flag,
    Globs,
    InvalidValue,
    Setting,
    Statuses,
    WorkerCount,
)


def parse_pairs(values: tuple[str, ...], option: str, parse: Callable[[str, str], Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name or not raw.strip():
            raise click.BadParameter(f"'{item}' is not NAME=VALUE", param_hint=option)
        parsed[name] = parse(name, raw.strip())
    return parsed


def parse_dim(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise click.BadParameter(f"{name}={raw}: the size must be a positive integer", param_hint="--dim") from None
    if value < 1:
        raise click.BadParameter(f"{name}={raw}: the size must be a positive integer", param_hint="--dim")
    return value


def parse_shape(name: str, raw: str) -> tuple[int | str, ...]:
    sizes: list[int | str] = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit() and int(part) > 0:
            sizes.append(int(part))
        elif part.isidentifier():
            sizes.append(part)
        elif part == "" and raw.strip() in ("", ","):
            continue
        else:
            raise click.BadParameter(
                f"{name}={raw}: sizes must be positive integers or dim names, e.g. {name}=32,16",
                param_hint="--shape",
            )
    return tuple(sizes)


target_argument = click.argument("targets", nargs=-1, required=True, metavar="TARGET...", type=click.Path())


@dataclass(frozen=True)
class Selection:
    """``TARGET...`` with ``-c``, ``--shape``, ``--dim`` and ``-k``, as written: what a command looks at."""

    targets: tuple[str, ...]
    config: Path | None
    shapes: tuple[str, ...]
    dims: tuple[str, ...]
    keyword: str | None


def common_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options ``run`` and ``list`` share; the command receives them as one ``selection``."""

    @functools.wraps(command)
    def with_selection(
        *, targets: tuple[str, ...], config: Path | None, shapes: tuple[str, ...], dims: tuple[str, ...], **kwargs: Any
    ) -> Any:
        keyword = kwargs.pop("keyword")
        return command(selection=Selection(targets, config, shapes, dims, keyword), **kwargs)

    options = [
        click.option(
            "-c",
            "--config",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Config file (default: the nearest gradcheck.toml, or pyproject.toml with [tool.gradcheck]).",
            **grouped(SELECTION),
        ),
        click.option(
            "-k",
            "keyword",
            metavar="EXPR",
            help="Only functions and layers whose id contains EXPR.",
            **grouped(SELECTION),
        ),
        click.option(
            "--shape",
            "shapes",
            multiple=True,
            metavar="NAME=DIMS",
            help="Shape of an input, e.g. A=32,16 or A=N,16 (repeatable).",
            **grouped(CHECKING),
        ),
        click.option(
            "--dim",
            "dims",
            multiple=True,
            metavar="NAME=INT",
            help="Value of a named dimension (repeatable).",
            **grouped(CHECKING),
        ),
        click.option("-v", "--verbose", count=True, help="More detail; tracebacks for errors.", **grouped(REPORTS)),
    ]
    wrapped: Callable[..., Any] = with_selection
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def run_options(
    selection: Selection,
    given: dict[str, Any],
    narrowing: dict[str, Any] | None = None,
) -> Any:
    from gradcheck import session

    config = selection.config
    if config is not None and not config.is_file():
        raise UsageError(f"{config}: config file not found (-c)")
    return session.run_options(
        selection.targets,
        config_path=config,
        given=given,
        dims=parse_pairs(selection.dims, "--dim", parse_dim),
        shapes=parse_pairs(selection.shapes, "--shape", parse_shape),
        keyword=selection.keyword,
        narrowing=narrowing,
    )


def _checked(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A flag's value, checked by its row of the settings table (the config's checks and messages)."""
    if value is None or value == ():
        return None
    setting = BY_NAME[str(param.name)]
    try:
        if isinstance(setting.kind, Globs):
            return setting.parse(value)  # a glob may hold a comma: each flag is one pattern
        # A repeated flag (--fail-on error --fail-on failed) reads as one comma-separated value.
        return setting.parse(",".join(value) if setting.multiple else value)
    except InvalidValue as error:
        raise click.BadParameter(str(error)) from None


def _checked_count(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """``-j``: a number of workers, or ``auto``, from the text of the command line."""
    if value is None:
        return None
    try:
        return WorkerCount().parse_text(value)
    except InvalidValue as error:
        raise click.BadParameter(str(error)) from None


def setting_option(setting: Setting) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of one row of the settings table."""
    names = [name for name in (setting.short, setting.long_flag) if name is not None]
    kind = setting.kind
    declared: dict[str, Any] = {"help": setting.help, "metavar": setting.metavar, "multiple": setting.multiple}
    declared.update(grouped(setting.group))
    if isinstance(kind, Flag):
        declared.update(is_flag=True, default=None)
    elif isinstance(kind, Choice):
        declared["type"] = click.Choice(kind.choices)
    elif isinstance(kind, FilePath):
        declared["type"] = click.Path(dir_okay=False, path_type=Path)
    elif isinstance(kind, (Statuses, Globs)):
        declared["callback"] = _checked
    elif isinstance(kind, WorkerCount):
        declared["callback"] = _checked_count
    else:
        declared.update(type=click.INT if kind.integer else click.FLOAT, callback=_checked)
    return click.option(*names, setting.name, **declared)


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Every row of the settings table with a flag, as a click option, in the table's order."""
    for setting in reversed(TABLE):
        if setting.long_flag is not None:
            command = setting_option(setting)(command)
    return command


#: Where the parser's record of the order of --format and -o goes (see ReportPairsCommand).
ORDER_KEY = "gradcheck.report_option_order"
COLORS = ("auto", "always", "never")
#: The options paired by :func:`pair_reports`, by click's name for them.
_PAIRED = {"format": "format_", "output": "output"}


class ReportPairsCommand(GuideCommand):
    """A command that remembers in which order ``--format`` and ``-o`` were written.

    Click hands each repeated option over as one tuple, which loses how the
    two interleave; the parser's own record of the order (``param_order``)
    keeps it, and :func:`pair_reports` needs it to pair each ``-o`` with its
    ``--format``.
    """

    def make_parser(self, ctx: click.Context) -> Any:
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_recording_order(args: list[str]) -> Any:
            opts, largs, order = parse(args=args)
            ctx.meta[ORDER_KEY] = [_PAIRED[param.name] for param in order if param.name in _PAIRED]
            return opts, largs, order

        cast(Any, parser).parse_args = parse_recording_order  # click types it a method; it is ours to wrap
        return parser


def pair_reports(
    order: list[str], formats: tuple[str, ...], outputs: tuple[Path, ...]
) -> list[tuple[str | None, Path | None]]:
    """Pair each ``-o FILE`` with the ``--format`` written just before it.

    ``order`` lists ``format_`` and ``output`` as they came on the command
    line. A ``-o`` written before any ``--format`` belongs to the first one
    (so ``-o r.json --format json`` works as well); a ``--format`` with no
    ``-o`` writes to standard output. With no ``--format`` at all, a single
    ``-o`` gets the config's format (else text).
    """
    if sorted(order) != sorted(["format_"] * len(formats) + ["output"] * len(outputs)):
        # The parser gave no usable order (it cannot, unless click changes): pair by position.
        order = [name for pair in zip(["format_"] * len(formats), ["output"] * len(outputs)) for name in pair]
        order += ["format_"] * (len(formats) - len(outputs)) + ["output"] * (len(outputs) - len(formats))
    pairs: list[list[Any]] = []
    early: list[Path] = []
    format_values, output_values = iter(formats), iter(outputs)
    for name in order:
        if name == "format_":
            pairs.append([next(format_values), None])
            continue
        path = next(output_values)
        if not pairs:
            early.append(path)
        elif pairs[-1][1] is None:
            pairs[-1][1] = path
        else:
            raise UsageError(
                f"-o {path}: --format {pairs[-1][0]} already writes to {pairs[-1][1]}; write one -o after each --format"
            )
    if early:
        if len(early) > 1 or (pairs and pairs[0][1] is not None):
            raise UsageError(f"-o {early[-1]}: write one -o after each --format (--format junit -o report.xml)")
        if pairs:
            pairs[0][1] = early[0]
        else:
            pairs.append([None, early[0]])
    return [(format_, output) for format_, output in pairs]


def resolve_reports(pairs: list[tuple[str | None, Path | None]], options: Any) -> list[tuple[str, Path | None]]:
    """Fill in the config's ``format``/``output`` for a run that names one report or none; check the set."""
    if not pairs:
        pairs = [(None, None)]
    if len(pairs) == 1:
        format_, output = pairs[0]
        pairs = [(format_ or options.format, output or options.output)]
    reports = [(format_ or "text", output) for format_, output in pairs]
    to_stdout = [format_ for format_, output in reports if output is None]
    if len(to_stdout) > 1:
        raise UsageError(
            f"--format {' and '.join(to_stdout)}: only one report can go to standard output; give the others -o FILE"
        )
    paths = [output.resolve() for _, output in reports if output is not None]
    if len(set(paths)) != len(paths):
        raise UsageError("-o: two reports would be written to the same file; give each its own -o FILE")
    return reports
