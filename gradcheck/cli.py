"""The command line: options -> RunOptions -> worker.run -> reporters -> exit code.

The options of ``run`` that are settings come from the table of :mod:`gradcheck.settings`.

The only module that imports click or exits. Exit codes are
:class:`gradcheck.results.ExitCode`; bad input is one line on stderr and 2,
a bug in gradcheck is a traceback and 3.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gradcheck.errors import ConfigError, UsageError
from gradcheck.report_files import check_writable, write_atomically, write_report
from gradcheck.reporting.safe_text import shown
from gradcheck.results import VERSION, ExitCode
from gradcheck.settings import (
    BY_NAME,
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


def _parse_pairs(values: tuple[str, ...], option: str, parse: Callable[[str, str], Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name or not raw.strip():
            raise click.BadParameter(f"'{item}' is not NAME=VALUE", param_hint=option)
        parsed[name] = parse(name, raw.strip())
    return parsed


def _parse_dim(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise click.BadParameter(f"{name}={raw}: the size must be a positive integer", param_hint="--dim") from None
    if value < 1:
        raise click.BadParameter(f"{name}={raw}: the size must be a positive integer", param_hint="--dim")
    return value


def _parse_shape(name: str, raw: str) -> tuple[int | str, ...]:
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


def echo_error(message: str) -> None:
    """``gradcheck: error: MESSAGE`` on stderr, as one line whatever the message holds.

    The message often quotes user text (an import error, a config key). Its
    line breaks and control characters are escaped, so it stays one line that
    no CI runner reads as a command and no terminal obeys.
    """
    click.echo(f"gradcheck: error: {shown(message)}", err=True)


def _echo_lines(text: str) -> None:
    """Several lines of text from user code (a traceback) on stderr, each one made safe to show."""
    click.echo(shown(text.rstrip("\n"), keep_newlines=True), err=True)


def _guarded(command: Callable[..., int]) -> Callable[..., None]:
    """Turn what a command returns or raises into gradcheck's exit codes."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        ctx = click.get_current_context()
        verbose = kwargs.get("verbose", 0) > 0
        try:
            code = command(*args, **kwargs)
        except UsageError as error:
            if verbose:
                if error.details:  # raised in the worker: the traceback behind it comes as text
                    _echo_lines(error.details)
                elif error.__cause__ is not None:
                    _echo_lines("".join(traceback.format_exception(error.__cause__)))
            echo_error(str(error))
            code = ExitCode.USAGE_ERROR
        except KeyboardInterrupt:
            click.echo("gradcheck: interrupted", err=True)
            code = ExitCode.INTERRUPTED
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as error:
            from gradcheck.worker import WorkerError

            if isinstance(error, WorkerError):  # a bug met in the worker: its traceback there
                _echo_lines(error.details)
            else:
                _echo_lines(traceback.format_exc())
            click.echo(
                "gradcheck: internal error: this is a bug in gradcheck, please report it with the traceback above",
                err=True,
            )
            code = ExitCode.INTERNAL_ERROR
        ctx.exit(int(code))

    return wrapper


class _OneLineErrors(click.Group):
    """A group whose bad options and arguments are one line on stderr, as every other usage error.

    Click's own format (the usage, a hint, a blank line, ``Error: ...``) takes
    four lines; gradcheck promises one that names the option, and exit 2.
    Help is not an error: ``gradcheck`` alone shows click's whole help.
    """

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as error:
            # The bare command, the first thing a new user types: the help, as git and pip show it.
            error.show()
            sys.exit(error.exit_code)
        except click.UsageError as error:
            ctx = error.ctx
            command = f"gradcheck {ctx.info_name}" if ctx is not None and ctx.parent is not None else "gradcheck"
            message = " ".join(error.format_message().split()).rstrip(".")
            echo_error(f"{message}; see '{command} --help'")
            sys.exit(ExitCode.USAGE_ERROR)
        except click.ClickException as error:
            echo_error(error.format_message())
            sys.exit(error.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "--version", prog_name="gradcheck")
def main() -> None:
    """Check the gradients written by hand with @tf.custom_gradient."""


# click.Path (not checked for existence: a TARGET may be a module name or carry ::NAME)
# gives shell completion of file names.
_target_argument = click.argument("targets", nargs=-1, required=True, metavar="TARGET...", type=click.Path())


@dataclass(frozen=True)
class _Selection:
    """``TARGET...`` with ``-c``, ``--shape``, ``--dim`` and ``-k``, as written: what a command looks at."""

    targets: tuple[str, ...]
    config: Path | None
    shapes: tuple[str, ...]
    dims: tuple[str, ...]
    keyword: str | None


def _common_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options ``run`` and ``list`` share; the command receives them as one ``selection``."""

    @functools.wraps(command)
    def with_selection(
        *, targets: tuple[str, ...], config: Path | None, shapes: tuple[str, ...], dims: tuple[str, ...], **kwargs: Any
    ) -> Any:
        keyword = kwargs.pop("keyword")
        return command(selection=_Selection(targets, config, shapes, dims, keyword), **kwargs)

    options = [
        click.option("-c", "--config", type=click.Path(dir_okay=False, path_type=Path), help="Config file."),
        click.option("--shape", "shapes", multiple=True, metavar="NAME=DIMS", help="Shape of an input, e.g. A=32,16."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=INT", help="Value of a named dimension."),
        click.option("-k", "keyword", metavar="EXPR", help="Only functions and layers whose id contains EXPR."),
        click.option("-v", "--verbose", count=True, help="More detail; tracebacks for errors."),
    ]
    wrapped: Callable[..., Any] = with_selection
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def _run_options(
    selection: _Selection,
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
        dims=_parse_pairs(selection.dims, "--dim", _parse_dim),
        shapes=_parse_pairs(selection.shapes, "--shape", _parse_shape),
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


def _setting_option(setting: Setting) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of one row of the settings table."""
    names = [name for name in (setting.short, setting.long_flag) if name is not None]
    kind = setting.kind
    declared: dict[str, Any] = {"help": setting.help, "metavar": setting.metavar, "multiple": setting.multiple}
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


def _setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Every row of the settings table with a flag, as a click option, in the table's order."""
    for setting in reversed(TABLE):
        if setting.long_flag is not None:
            command = _setting_option(setting)(command)
    return command


#: Where the parser's record of the order of --format and -o goes (see _ReportPairsCommand).
_ORDER_KEY = "gradcheck.report_option_order"
_COLORS = ("auto", "always", "never")
#: The options paired by :func:`pair_reports`, by click's name for them.
_PAIRED = {"format": "format_", "output": "output"}


class _ReportPairsCommand(click.Command):
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
            ctx.meta[_ORDER_KEY] = [_PAIRED[param.name] for param in order if param.name in _PAIRED]
            return opts, largs, order

        parser.parse_args = parse_recording_order
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


def _resolve_reports(pairs: list[tuple[str | None, Path | None]], options: Any) -> list[tuple[str, Path | None]]:
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


def _console(color: str, stderr: bool = False) -> Any:
    """A rich console for the terminal that honours ``--color`` (and, with ``auto``, ``NO_COLOR``)."""
    from rich.console import Console

    if color == "always":
        # An explicit command-line choice wins over NO_COLOR, as no-color.org asks.
        return Console(stderr=stderr, force_terminal=True, no_color=False, highlight=False)
    if color == "never":
        return Console(stderr=stderr, color_system=None, no_color=True, highlight=False)
    return Console(stderr=stderr, highlight=False)


@main.command(cls=_ReportPairsCommand)
@_target_argument
@_common_options
@_setting_options
@click.option("--shard", metavar="K/N", help="Check only shard K of N (split by a stable hash of the function id).")
@click.option(
    "--changed-since",
    metavar="REF",
    help="Check only functions whose module, or a project module it imports, changed since git REF.",
)
@click.option(
    "--color",
    type=click.Choice(_COLORS),
    default="auto",
    show_default=True,
    help="Colour in the terminal; auto honours NO_COLOR.",
)
@click.option("-q", "--quiet", count=True, help="Only failures and the summary line.")
@_guarded
def run(
    selection: _Selection,
    verbose: int,
    shard: str | None,
    changed_since: str | None,
    color: str,
    quiet: int,
    **given: Any,
) -> int:
    """Check the gradients of every custom-gradient function in TARGET."""
    from gradcheck import _tf, session

    _refuse_conflicts(
        quiet=quiet, verbose=verbose, shape_only=given["shape_only"], mode=given["mode"], order=given["order"]
    )
    _tf.set_verbose(verbose > 0)
    # Each -o pairs with a --format (pair_reports); the config's format and output fill in the rest.
    formats, outputs = given.pop("format"), given.pop("output")
    narrowing = _narrowing(shard, changed_since)
    options = _run_options(selection, given, narrowing)
    order = click.get_current_context().meta.get(_ORDER_KEY, [])
    reports = _resolve_reports(pair_reports(order, formats, outputs), options)
    for _, path in reports:
        if path is not None:
            session.refuse_user_file(path, options)
            check_writable(path)  # before the first check: a long run must not end unable to write
    if not _tf.tensorflow_available():
        raise _tf.TensorFlowMissing()
    with _sigterm_as_interrupt():
        report = _run_with_progress(options, color, verbose > 0)
    _emit(report, reports, verbose - quiet, color)
    if not report.results and not report.interrupted:
        _explain_empty_selection(options, shard, changed_since)
    return report.exit_code


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI runner cancelling the job, or its timeout) stops the run as Ctrl-C does.

    The workers are stopped and the results so far written to every report,
    with exit 130, rather than the process dying with no report at all.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _narrowing(shard: str | None, changed_since: str | None) -> dict[str, Any]:
    """RunOptions fields for --shard and --changed-since; bad values are a UsageError (before TensorFlow)."""
    from gradcheck import selection

    fields: dict[str, Any] = {}
    if shard is not None:
        fields["shard"] = selection.parse_shard(shard)
    if changed_since is not None:
        fields["changed"] = selection.changed_files(changed_since)
        fields["changed_root"] = selection.git_root()
    return fields


def _explain_empty_selection(options: Any, shard: str | None, changed_since: str | None) -> None:
    """Say why a run with --shard or --changed-since checked nothing (it exits 5, as an empty run)."""
    if options.changed is not None and not options.changed:
        click.echo(f"nothing to check: nothing changed since {changed_since}", err=True)
    elif changed_since is not None:
        click.echo(f"nothing to check: no function depends on what changed since {changed_since}", err=True)
    elif shard is not None:
        click.echo(f"nothing to check: shard {shard} is empty", err=True)


def _refuse_conflicts(
    *, quiet: int, verbose: int, shape_only: bool | None, mode: str | None, order: int | None
) -> None:
    """Options that ask for opposite things are a usage error, not a silent choice of one."""
    if quiet and verbose:
        raise UsageError("-q and -v: choose one (-q shows only what fails, -v adds detail)")
    if shape_only and mode == "full":
        raise UsageError(
            "--shape-only and --mode full: --shape-only compares no values, so there are no Jacobians to "
            "compute; drop one of them"
        )
    if shape_only and order == 2:
        raise UsageError(
            "--shape-only and --order 2: --shape-only compares no values, second-order ones included; drop one of them"
        )


def _run_with_progress(options: Any, color: str, verbose: bool) -> Any:
    """The run in worker processes, with a progress bar on standard error when that is a terminal."""
    from gradcheck import progress, worker

    max_memory = options.max_memory if options.max_memory is not None else worker.default_max_memory()
    bounds: dict[str, Any] = {
        "verbose": verbose,
        "import_timeout": options.timeout,
        "max_memory": max_memory or None,
    }
    if not progress.wanted(sys.stderr, os.environ):
        return worker.run(options, **bounds)
    with progress.ProgressBar(_console(color, stderr=True)) as bar:
        return worker.run(options, on_import=bar.on_import, on_start=bar.on_start, on_result=bar.on_result, **bounds)


def _emit(report: Any, reports: list[tuple[str, Path | None]], verbosity: int, color: str) -> None:
    """Render every report first, then write the files, standard output and the GitHub job summary.

    Rendering everything before writing anything means a reporter that fails
    leaves every earlier report file as it was.
    """
    from gradcheck.reporting import RenderOptions, render
    from gradcheck.reporting.text import render_text, summary_line

    documents = [
        (format_, path, render(report, format_, RenderOptions(verbosity=verbosity))) for format_, path in reports
    ]
    summary = None
    if "github" in (format_ for format_, _ in reports) and os.environ.get("GITHUB_STEP_SUMMARY"):
        from gradcheck.reporting.github import render_summary

        summary = render_summary(report)
    for _, path, document in documents:
        if path is not None:
            write_report(path, document)
    stdout_document = next(((f, d) for f, p, d in documents if p is None), None)
    if stdout_document is None or stdout_document[0] == "text":
        # The text report goes to the terminal, in colour where allowed, whatever the files hold.
        render_text(report, _console(color), verbosity)
    else:
        # A document for machines: standard output carries it alone, the summary goes to stderr.
        sys.stdout.write(stdout_document[1])
        sys.stdout.flush()
        click.echo(summary_line(report), err=True)
    if summary is not None:
        _append_job_summary(Path(os.environ["GITHUB_STEP_SUMMARY"]), summary)


def _append_job_summary(path: Path, markdown: str) -> None:
    """Append to GitHub's job summary file: the one side effect of ``--format github``."""
    try:
        with path.open("a", encoding="utf-8") as stream:
            stream.write(markdown)
    except OSError as error:
        # The report itself is out already; a summary GitHub cannot take is worth a warning, not a failure.
        click.echo(f"gradcheck: warning: {shown(f'cannot append the job summary to {path}: {error}')}", err=True)


@main.command("list")
@_target_argument
@_common_options
@_setting_option(BY_NAME["exclude"])
@_guarded
def list_(selection: _Selection, verbose: int, exclude: tuple[str, ...] | None) -> int:
    """Show what would be checked, with signatures and shapes."""
    from gradcheck import _tf, session

    _tf.set_verbose(verbose > 0)
    options = _run_options(selection, {"exclude": exclude})
    listing = session.listing(options)
    for entry in listing.entries:
        click.echo(f"{shown(entry.id)}{shown(entry.signature)}  [{entry.kind}]")
        for line in entry.inputs:
            click.echo(f"    {shown(line)}")
    _echo_module_failures(listing.module_results)
    if listing.module_results:
        return ExitCode.FAILED
    if not listing.entries:
        from gradcheck.reporting.text import nothing_found

        why = nothing_found(listing.summary) or "no custom-gradient functions found"
        click.echo(f"nothing to check: {why}", err=True)
        return ExitCode.NO_TESTS
    return ExitCode.OK


def _echo_module_failures(results: Any) -> None:
    """One line per module of a walk that failed to import: where, why, and what to do."""
    for result in results:
        problem = result.problems[0]
        click.echo(f"gradcheck: error: {shown(problem.message)}; {shown(problem.hint or '')}", err=True)


@main.command()
@_target_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gradcheck.toml"),
    show_default=True,
    help="Where to write the config.",
)
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
@_setting_option(BY_NAME["exclude"])
@click.option("-v", "--verbose", count=True, help="Tracebacks for usage errors.")
@_guarded
def init(targets: tuple[str, ...], output: Path, force: bool, exclude: tuple[str, ...] | None, verbose: int) -> int:
    """Write a starter config for TARGET, with the shapes that probing finds."""
    from gradcheck import _tf, session, starter

    _tf.set_verbose(verbose > 0)
    if output.suffix == ".py" or output.name == "pyproject.toml":
        raise UsageError(
            f"{output}: gradcheck init writes a gradcheck.toml of its own; choose another -o path "
            "(to use pyproject.toml, copy the keys under [tool.gradcheck])"
        )
    if output.exists() and not force:
        raise UsageError(f"{output}: already exists; pass --force to overwrite it, or -o to write elsewhere")
    # The walk leaves out what --exclude and an existing config's `exclude` say, as `run` does;
    # a config that does not read is the one being replaced, and only the flag counts then.
    try:
        exclusions = session.run_options(targets, given={"exclude": exclude}).exclusions
    except ConfigError:
        from gradcheck.walk import Exclusion

        exclusions = tuple(Exclusion(pattern, Path.cwd()) for pattern in exclude or ())
    found = starter.starter_entries(targets, exclusions=exclusions)
    entries = found.entries
    _echo_module_failures(found.module_results)
    if not entries:
        click.echo("nothing to check: no custom-gradient functions found; no config written", err=True)
        return ExitCode.FAILED if found.module_results else ExitCode.NO_TESTS
    # Shell-quoted to rerun as written, and one line: it goes in a TOML comment that a newline would end.
    written = ["gradcheck", "init", *targets] + (["-o", str(output)] if output != Path("gradcheck.toml") else [])
    command = shown(shlex.join(written))
    write_atomically(output, starter.render_starter(entries, command))
    guessed = sum(1 for entry in entries if entry.failure is None and entry.inputs)
    todo = sum(1 for entry in entries if entry.failure is not None)
    click.echo(
        f"wrote {output}: {len(entries)} function{'s' if len(entries) != 1 else ''}, "
        f"{guessed} with guessed shapes, {todo} to fill in (marked TODO)"
    )
    # The config is written for what imported; the modules that did not still fail the command.
    return ExitCode.FAILED if found.module_results else ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    main()
