"""The command line: options (:mod:`.options`) -> RunOptions -> worker.run -> reporters (:mod:`.output`) -> exit code.

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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from gradcheck.cli.help import GuideCommand, GuideEpilog, grouped, guide_epilog
from gradcheck.cli.options import (
    COLORS,
    ORDER_KEY,
    ReportPairsCommand,
    Selection,
    common_options,
    pair_reports,
    resolve_reports,
    run_options,
    setting_option,
    setting_options,
    target_argument,
)
from gradcheck.cli.output import console, echo_error, echo_lines, emit
from gradcheck.errors import ConfigError, UsageError
from gradcheck.report_files import check_writable, write_atomically
from gradcheck.reporting.safe_text import shown
from gradcheck.results import VERSION, ExitCode
from gradcheck.settings import BY_NAME, CI, REPORTS


def guarded(command: Callable[..., int]) -> Callable[..., None]:
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
                    echo_lines(error.details)
                elif error.__cause__ is not None:
                    echo_lines("".join(traceback.format_exception(error.__cause__)))
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
                echo_lines(error.details)
            else:
                echo_lines(traceback.format_exc())
            click.echo(
                "gradcheck: internal error: this is a bug in gradcheck, please report it with the traceback above",
                err=True,
            )
            code = ExitCode.INTERNAL_ERROR
        ctx.exit(int(code))

    return wrapper


class _OneLineErrors(GuideEpilog, click.Group):
    """A group whose bad options and arguments are one line on stderr, as every other usage error.

    Click's own format (the usage, a hint, a blank line, ``Error: ...``) takes
    four lines; gradcheck promises one that names the option, and exit 2.
    Help is not an error: ``gradcheck`` alone shows click's whole help.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
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


@click.group(
    cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]}, epilog=guide_epilog("gradcheck")
)
@click.version_option(VERSION, "--version", prog_name="gradcheck")
def main() -> None:
    """Check the gradients written by hand with @tf.custom_gradient."""


# click.Path (not checked for existence: a TARGET may be a module name or carry ::NAME)


@main.command(cls=ReportPairsCommand, epilog=guide_epilog("run"))
@target_argument
@common_options
@setting_options
@click.option(
    "--shard",
    metavar="K/N",
    help="Check only shard K of N (split by a stable hash of the function id).",
    **grouped(CI),
)
@click.option(
    "--changed-since",
    metavar="REF",
    help="Check only functions whose module, or a project module it imports, changed since git REF.",
    **grouped(CI),
)
@click.option(
    "--color",
    type=click.Choice(COLORS),
    default="auto",
    show_default=True,
    help="Colour in the terminal; auto honours NO_COLOR.",
    **grouped(REPORTS),
)
@click.option("-q", "--quiet", count=True, help="Only failures and the summary line.", **grouped(REPORTS))
@guarded
def run(
    selection: Selection,
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
    options = run_options(selection, given, narrowing)
    order = click.get_current_context().meta.get(ORDER_KEY, [])
    reports = resolve_reports(pair_reports(order, formats, outputs), options)
    for _, path in reports:
        if path is not None:
            session.refuse_user_file(path, options)
            check_writable(path)  # before the first check: a long run must not end unable to write
    if not _tf.tensorflow_available():
        raise _tf.TensorFlowMissing()
    with _sigterm_as_interrupt():
        report = _run_with_progress(options, color, verbose > 0)
    emit(report, reports, verbose - quiet, color)
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
    with progress.ProgressBar(console(color, stderr=True)) as bar:
        return worker.run(options, on_import=bar.on_import, on_start=bar.on_start, on_result=bar.on_result, **bounds)


@main.command("list", cls=GuideCommand, epilog=guide_epilog("list"))
@target_argument
@common_options
@setting_option(BY_NAME["exclude"])
@guarded
def list_(selection: Selection, verbose: int, exclude: tuple[str, ...] | None) -> int:
    """Show what would be checked, with signatures and shapes."""
    from gradcheck import _tf, session

    _tf.set_verbose(verbose > 0)
    options = run_options(selection, {"exclude": exclude})
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


@main.command(cls=GuideCommand, epilog=guide_epilog("init"))
@target_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gradcheck.toml"),
    show_default=True,
    help="Where to write the config.",
)
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
@setting_option(BY_NAME["exclude"])
@click.option("-v", "--verbose", count=True, help="Tracebacks for usage errors.")
@guarded
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
