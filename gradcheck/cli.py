"""The command line: options -> RunOptions -> worker.run -> reporters -> exit code.

The only module that imports click or exits. Exit codes are
:class:`gradcheck.results.ExitCode`; bad input is one line on stderr and 2,
a bug in gradcheck is a traceback and 3.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gradcheck.config import DEFAULT_TIMEOUT, DEVICES, DTYPES, EXECUTIONS, MODES
from gradcheck.errors import UsageError
from gradcheck.reporting import FORMATS
from gradcheck.results import VERSION, ExitCode


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


def _positive(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise click.BadParameter(f"{value} must be a positive number")
    return value


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    An interrupted or failing write leaves any earlier file at ``path`` whole.
    """
    directory = path.resolve().parent
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


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
                    click.echo(error.details.rstrip("\n"), err=True)
                elif error.__cause__ is not None:
                    traceback.print_exception(error.__cause__, file=sys.stderr)
            click.echo(f"gradcheck: error: {error}", err=True)
            code = ExitCode.USAGE_ERROR
        except KeyboardInterrupt:
            click.echo("gradcheck: interrupted", err=True)
            code = ExitCode.INTERRUPTED
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as error:
            from gradcheck.worker import WorkerError

            if isinstance(error, WorkerError):  # a bug met in the worker: its traceback there
                click.echo(error.details.rstrip("\n"), err=True)
            else:
                traceback.print_exc(file=sys.stderr)
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
    """

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as error:
            ctx = error.ctx
            command = f"gradcheck {ctx.info_name}" if ctx is not None and ctx.parent is not None else "gradcheck"
            message = " ".join(error.format_message().split()).rstrip(".")
            click.echo(f"gradcheck: error: {message}; see '{command} --help'", err=True)
            sys.exit(ExitCode.USAGE_ERROR)
        except click.ClickException as error:
            error.show()
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


def _common_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("-c", "--config", type=click.Path(dir_okay=False, path_type=Path), help="Config file."),
        click.option("--shape", "shapes", multiple=True, metavar="NAME=DIMS", help="Shape of an input, e.g. A=32,16."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=INT", help="Value of a named dimension."),
        click.option("-k", "keyword", metavar="EXPR", help="Only functions and layers whose id contains EXPR."),
        click.option("-v", "--verbose", count=True, help="More detail; tracebacks for errors."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _run_options(
    targets: tuple[str, ...],
    config: Path | None,
    shapes: tuple[str, ...],
    dims: tuple[str, ...],
    keyword: str | None,
    overrides: dict[str, Any],
) -> Any:
    from gradcheck.session import RunOptions

    if config is not None and not config.is_file():
        raise UsageError(f"{config}: config file not found (-c)")
    return RunOptions(
        targets=targets,
        config_path=config,
        overrides={k: v for k, v in overrides.items() if v is not None},
        dims=_parse_pairs(dims, "--dim", _parse_dim),
        shapes=_parse_pairs(shapes, "--shape", _parse_shape),
        keyword=keyword,
    )


#: Where the parser's record of the order of --format and -o goes (see _ReportPairsCommand).
_ORDER_KEY = "gradcheck.report_option_order"
_COLORS = ("auto", "always", "never")


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
            ctx.meta[_ORDER_KEY] = [param.name for param in order if param.name in ("format_", "output")]
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


def _resolve_reports(
    pairs: list[tuple[str | None, Path | None]], configured: dict[str, Any]
) -> list[tuple[str, Path | None]]:
    """Fill in the config's ``format``/``output`` for a run that names one report or none; check the set."""
    if not pairs:
        pairs = [(None, None)]
    if len(pairs) == 1:
        format_, output = pairs[0]
        config_output = Path(configured["output"]) if "output" in configured else None
        pairs = [(format_ or configured.get("format"), output or config_output)]
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


def _split_fail_on(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...] | None:
    """``--fail-on error --fail-on failed`` and ``--fail-on error,failed`` alike."""
    from gradcheck.config import closest
    from gradcheck.results import FAIL_ON_STATUSES

    statuses: list[str] = []
    for value in values:
        for part in value.split(","):
            status = part.strip()
            if status not in FAIL_ON_STATUSES:
                raise click.BadParameter(
                    f"'{status}' is not one of {', '.join(FAIL_ON_STATUSES)}{closest(status, FAIL_ON_STATUSES)}"
                )
            if status not in statuses:
                statuses.append(status)
    return tuple(statuses) or None


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
@click.option("--shape-only", is_flag=True, default=None, help="Audit counts, shapes and dtypes only.")
@click.option("--mode", type=click.Choice(MODES), help="fast: projected checks; full: whole Jacobians.")
@click.option("--dtype", type=click.Choice(DTYPES), help="Dtype the inputs are drawn in.")
@click.option("--seed", type=click.IntRange(min=0), help="Seed of every random draw.")
@click.option("--atol", type=float, callback=_positive, help="Absolute tolerance.")
@click.option("--rtol", type=float, callback=_positive, help="Relative tolerance.")
@click.option("--eps", type=float, callback=_positive, help="Relative finite-difference step.")
@click.option("--execution", type=click.Choice(EXECUTIONS), help="Run eagerly, in tf.function, or both.")
@click.option("--order", type=click.IntRange(1, 2), help="2: also check the gradient of each custom gradient.")
@click.option(
    "--format",
    "format_",
    type=click.Choice(FORMATS),
    multiple=True,
    help="Report format; repeat for several reports, each followed by its own -o.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="Write the --format before it to FILE (atomically).",
)
@click.option("--strict", is_flag=True, default=None, help="A skipped function counts as a failure.")
@click.option(
    "--fail-on",
    multiple=True,
    callback=_split_fail_on,
    metavar="STATUS[,STATUS]",
    help="Statuses that fail the run: failed, error, skipped (default: failed,error).",
)
@click.option("--maxfail", type=click.IntRange(min=1), metavar="N", help="Stop after N failures.")
@click.option("--shard", metavar="K/N", help="Check only shard K of N (split by a stable hash of the function id).")
@click.option(
    "--changed-since",
    metavar="REF",
    help="Check only functions whose module, or a project module it imports, changed since git REF.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help=f"Stop a function's check after SECONDS; it is an error (default {DEFAULT_TIMEOUT:g}; 0: no limit).",
)
@click.option(
    "--max-memory",
    type=click.IntRange(min=0),
    metavar="MB",
    help="Stop a check whose process holds more than MB of memory (default: half the machine's; 0: no limit).",
)
@click.option("--device", type=click.Choice(DEVICES), help="Where checks run; auto: the GPU where there is one.")
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
    targets: tuple[str, ...],
    config: Path | None,
    shapes: tuple[str, ...],
    dims: tuple[str, ...],
    keyword: str | None,
    verbose: int,
    shape_only: bool | None,
    mode: str | None,
    dtype: str | None,
    seed: int | None,
    atol: float | None,
    rtol: float | None,
    eps: float | None,
    execution: str | None,
    order: int | None,
    format_: tuple[str, ...],
    output: tuple[Path, ...],
    strict: bool | None,
    fail_on: tuple[str, ...] | None,
    maxfail: int | None,
    shard: str | None,
    changed_since: str | None,
    timeout: float | None,
    max_memory: int | None,
    device: str | None,
    color: str,
    quiet: int,
) -> int:
    """Check the gradients of every custom-gradient function in TARGET."""
    from dataclasses import replace

    from gradcheck import _tf, session

    _refuse_conflicts(quiet=quiet, verbose=verbose, shape_only=shape_only, mode=mode, order=order)
    _tf.set_verbose(verbose > 0)
    overrides = {
        "shape_only": shape_only,
        "mode": mode,
        "dtype": dtype,
        "seed": seed,
        "atol": atol,
        "rtol": rtol,
        "eps": eps,
        "execution": execution,
        "order": order,
        "strict": strict,
        "timeout": timeout,
        "device": device,
    }
    options = _run_options(targets, config, shapes, dims, keyword, overrides)
    configured = session.run_settings(options)
    order = click.get_current_context().meta.get(_ORDER_KEY, [])
    reports = _resolve_reports(pair_reports(order, format_, output), configured)
    for _, path in reports:
        if path is not None:
            session.refuse_user_file(path, options)
    options = replace(
        options,
        fail_on=fail_on or configured.get("fail_on"),
        maxfail=maxfail if maxfail is not None else configured.get("maxfail"),
        max_memory=max_memory if max_memory is not None else configured.get("max_memory"),
        **_selection_options(shard, changed_since),
    )
    if not _tf.tensorflow_available():
        raise _tf.TensorFlowMissing()
    import_timeout = timeout if timeout is not None else configured.get("timeout", DEFAULT_TIMEOUT)
    report = _run_with_progress(options, color, verbose > 0, import_timeout)
    _emit(report, reports, verbose - quiet, color)
    if not report.results and not report.interrupted:
        _explain_empty_selection(options, shard, changed_since)
    return report.exit_code


def _selection_options(shard: str | None, changed_since: str | None) -> dict[str, Any]:
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


def _run_with_progress(options: Any, color: str, verbose: bool, import_timeout: float) -> Any:
    """The run in worker processes, with a progress bar on standard error when that is a terminal."""
    from gradcheck import progress, worker

    max_memory = options.max_memory if options.max_memory is not None else worker.default_max_memory()
    bounds: dict[str, Any] = {
        "verbose": verbose,
        "import_timeout": import_timeout,
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
            write_atomically(path, document)
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
        click.echo(f"gradcheck: warning: cannot append the job summary to {path}: {error}", err=True)


@main.command("list")
@_target_argument
@_common_options
@_guarded
def list_(
    targets: tuple[str, ...],
    config: Path | None,
    shapes: tuple[str, ...],
    dims: tuple[str, ...],
    keyword: str | None,
    verbose: int,
) -> int:
    """Show what would be checked, with signatures and shapes."""
    from gradcheck import _tf, session

    _tf.set_verbose(verbose > 0)
    options = _run_options(targets, config, shapes, dims, keyword, {})
    listing = session.listing(options)
    for entry in listing:
        click.echo(f"{entry.id}{entry.signature}  [{entry.kind}]")
        for line in entry.inputs:
            click.echo(f"    {line}")
    if not listing:
        click.echo("nothing to check: no custom-gradient functions found", err=True)
        return ExitCode.NO_TESTS
    return ExitCode.OK


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
@click.option("-v", "--verbose", count=True, help="Tracebacks for usage errors.")
@_guarded
def init(targets: tuple[str, ...], output: Path, force: bool, verbose: int) -> int:
    """Write a starter config for TARGET, with the shapes that probing finds."""
    from gradcheck import _tf, starter

    _tf.set_verbose(verbose > 0)
    if output.suffix == ".py" or output.name == "pyproject.toml":
        raise UsageError(
            f"{output}: gradcheck init writes a gradcheck.toml of its own; choose another -o path "
            "(to use pyproject.toml, copy the keys under [tool.gradcheck])"
        )
    if output.exists() and not force:
        raise UsageError(f"{output}: already exists; pass --force to overwrite it, or -o to write elsewhere")
    entries = starter.starter_entries(targets)
    if not entries:
        click.echo("nothing to check: no custom-gradient functions found; no config written", err=True)
        return ExitCode.NO_TESTS
    command = " ".join(["gradcheck init", *targets] + ([f"-o {output}"] if output != Path("gradcheck.toml") else []))
    write_atomically(output, starter.render_starter(entries, command))
    guessed = sum(1 for entry in entries if entry.failure is None and entry.inputs)
    todo = sum(1 for entry in entries if entry.failure is not None)
    click.echo(
        f"wrote {output}: {len(entries)} function{'s' if len(entries) != 1 else ''}, "
        f"{guessed} with guessed shapes, {todo} to fill in (marked TODO)"
    )
    return ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    main()
