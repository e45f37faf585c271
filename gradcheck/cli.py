"""The command line: options -> RunOptions -> session.run -> reporters -> exit code.

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

from gradcheck.config import DTYPES, EXECUTIONS, MODES
from gradcheck.errors import UsageError
from gradcheck.reporting import FORMATS
from gradcheck.results import ExitCode

VERSION = "0.1.0"


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
            if verbose and error.__cause__ is not None:
                traceback.print_exception(error.__cause__, file=sys.stderr)
            click.echo(f"gradcheck: error: {error}", err=True)
            code = ExitCode.USAGE_ERROR
        except KeyboardInterrupt:
            click.echo("gradcheck: interrupted", err=True)
            code = ExitCode.INTERRUPTED
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception:
            traceback.print_exc(file=sys.stderr)
            click.echo(
                "gradcheck: internal error: this is a bug in gradcheck, please report it with the traceback above",
                err=True,
            )
            code = ExitCode.INTERNAL_ERROR
        ctx.exit(int(code))

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "--version", prog_name="gradcheck")
def main() -> None:
    """Check the gradients written by hand with @tf.custom_gradient."""


_target_argument = click.argument("targets", nargs=-1, required=True, metavar="TARGET...")


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


@main.command()
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
@click.option("--format", "format_", type=click.Choice(FORMATS), help="Report format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report there.")
@click.option("--strict", is_flag=True, default=None, help="A skipped function counts as a failure.")
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
    format_: str | None,
    output: Path | None,
    strict: bool | None,
    quiet: int,
) -> int:
    """Check the gradients of every custom-gradient function in TARGET."""
    from gradcheck import _tf, session

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
    }
    options = _run_options(targets, config, shapes, dims, keyword, overrides)
    report_settings = session.report_settings(options)
    format_ = format_ or report_settings.get("format", "text")
    output = output or (Path(report_settings["output"]) if "output" in report_settings else None)
    if output is not None:
        session.refuse_user_file(output, options)
    report = session.run(options)
    verbosity = verbose - quiet
    _emit(report, format_, output, verbosity)
    return report.exit_code


def _emit(report: Any, format_: str, output: Path | None, verbosity: int) -> None:
    from rich.console import Console

    from gradcheck.reporting.json_report import render_json
    from gradcheck.reporting.text import render_text, render_text_string, summary_line

    if format_ == "json":
        document = render_json(report)
    else:
        document = render_text_string(report, verbosity)
    if output is not None:
        write_atomically(output, document)
    if format_ == "text" or output is not None:
        render_text(report, Console(highlight=False), verbosity)
    else:
        sys.stdout.write(document)
        sys.stdout.flush()
        click.echo(summary_line(report), err=True)


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


if __name__ == "__main__":  # pragma: no cover
    main()
