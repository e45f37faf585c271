"""What the command line writes: one-line errors, the rich console, the reports and the job summary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from gradcheck.report_files import write_report
from gradcheck.reporting.safe_text import shown


def echo_error(message: str) -> None:
    """``gradcheck: error: MESSAGE`` on stderr, as one line whatever the message holds.

    The message often quotes user text (an import error, a config key). Its
    line breaks and control characters are escaped, so it stays one line that
    no CI runner reads as a command and no terminal obeys.
    """
    click.echo(f"gradcheck: error: {shown(message)}", err=True)


def echo_lines(text: str) -> None:
    """Several lines of text from user code (a traceback) on stderr, each one made safe to show."""
    click.echo(shown(text.rstrip("\n"), keep_newlines=True), err=True)


def console(color: str, stderr: bool = False) -> Any:
    """A rich console for the terminal that honours ``--color`` (and, with ``auto``, ``NO_COLOR``)."""
    from rich.console import Console

    if color == "always":
        # An explicit command-line choice wins over NO_COLOR, as no-color.org asks.
        return Console(stderr=stderr, force_terminal=True, no_color=False, highlight=False)
    if color == "never":
        return Console(stderr=stderr, color_system=None, no_color=True, highlight=False)
    return Console(stderr=stderr, highlight=False)


def emit(report: Any, reports: list[tuple[str, Path | None]], verbosity: int, color: str) -> None:
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
        render_text(report, console(color), verbosity)
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
