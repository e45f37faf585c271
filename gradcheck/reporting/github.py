"""GitHub Actions workflow commands: one ``::error`` annotation per problem, and a job summary.

Each problem becomes ``::error file=PATH,line=N,title=gradcheck::MESSAGE``;
GitHub shows it on the pull request's diff at that line. ``line`` is the
``def`` of the custom-gradient function, or of its backward function where
the problem is in what the backward function returned (count, shape, dtype,
values). Escaping follows the runner's own (``actions/toolkit``
``command.ts``): in the message ``%``, CR and LF; in properties also ``:``
and ``,``.

:func:`render_summary` is the Markdown job summary; the command line appends
it to the file that ``$GITHUB_STEP_SUMMARY`` names.

User text (messages, names, paths) is :func:`~gradcheck.reporting.safe_text.shown`
first, so no control character, lone surrogate or ``##[`` reaches the log; in
the job summary it is :func:`~gradcheck.reporting.safe_text.markdown`, so it
opens no tag, link, emphasis or code span.
"""

from __future__ import annotations

from gradcheck.reporting import RenderOptions
from gradcheck.reporting.safe_text import html_text, markdown, shown
from gradcheck.reporting.text import summary_line
from gradcheck.results import Problem, Result, RunReport

#: Checks about what the backward function returned: annotated at its ``def``.
BACKWARD_CHECKS = ("count", "shape", "dtype", "finite", "native", "numeric", "variables")


def escape_data(text: str) -> str:
    """Escape a workflow command's message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value (``file``, ``title``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: str | int | None) -> str:
    """``::command key=value,...::message`` with everything escaped; None properties left out."""
    given = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{command}{' ' + given if given else ''}::{escape_data(message)}"


def annotation_line(result: Result, problem: Problem | None) -> int | None:
    """The line to annotate: where the user's code raised, else the backward function's ``def``
    for what it returned, else the function's."""
    if problem is not None and problem.line:
        return problem.line
    in_backward = (
        problem is not None
        and problem.check in BACKWARD_CHECKS
        # A finite problem with no input is NaN in the forward output, not in a gradient.
        and not (problem.check == "finite" and problem.input is None)
    )
    if in_backward and result.backward_line:
        return result.backward_line
    return result.line or None


def _message(result: Result, problem: Problem) -> str:
    where = f"{result.name}: {problem.input}" if problem.input else result.name
    lines = [f"{shown(where)} ({problem.check}): {shown(problem.message)}"]
    if problem.hint:
        lines.append(f"hint: {shown(problem.hint)}")
    if result.reproduce:
        lines.append(f"reproduce: {shown(result.reproduce)}")
    return "\n".join(lines)


def workflow_commands(report: RunReport) -> list[str]:
    """One workflow command per problem; a skipped function is a warning (an error where it fails the run)."""
    commands = []
    for result in report.results:
        for problem in result.problems:
            commands.append(
                workflow_command(
                    "error",
                    _message(result, problem),
                    file=shown(result.path) if result.path else None,
                    line=annotation_line(result, problem) if result.path else None,
                    title="gradcheck",
                )
            )
        if result.status == "skipped":
            level = "error" if "skipped" in report.fail_on else "warning"
            commands.append(
                workflow_command(
                    level,
                    f"{shown(result.name)}: skipped: {shown(result.skip_reason or 'no reason given')}",
                    file=shown(result.path) if result.path else None,
                    line=annotation_line(result, None) if result.path else None,
                    title="gradcheck",
                )
            )
    return commands


def render(report: RunReport, options: RenderOptions) -> str:
    """The workflow commands, one a line (empty when nothing is wrong)."""
    commands = workflow_commands(report)
    return "".join(command + "\n" for command in commands)


def _cell(text: str) -> str:
    # A table cell is one line (markdown() escapes newlines) and shows the text literally.
    return markdown(text)


def _code(text: str) -> str:
    """``text`` as code: a code span (literal inside) where nothing in it can close the span, the cell or a tag."""
    text = shown(text)
    if not any(char in text for char in "`|<>&"):
        return f"`{text}`"
    # A backtick would close a code span and a pipe the table cell; escaped text in <code> closes nothing.
    return f"<code>{markdown(text)}</code>"


_ICONS = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}


def render_summary(report: RunReport) -> str:
    """The Markdown job summary: the summary line, a table of what did not pass, how to reproduce."""
    lines = [f"## gradcheck: {summary_line(report)}", ""]
    troubled = [r for r in report.results if r.status != "passed"]
    if troubled:
        lines += ["| | function | input | check | what is wrong |", "|---|---|---|---|---|"]
        for result in troubled:
            icon = f"{_ICONS[result.status]} {result.status}"
            if not result.problems:
                reason = result.skip_reason or result.status
                lines.append(f"| {icon} | {_code(result.id)} | | | {_cell(reason)} |")
            for problem in result.problems:
                what = _cell(problem.message) + (f"<br>*hint:* {_cell(problem.hint)}" if problem.hint else "")
                where = _cell(problem.input or "")
                lines.append(f"| {icon} | {_code(result.id)} | {where} | {problem.check} | {what} |")
        lines.append("")
    passed = [r.id for r in report.results if r.status == "passed"]
    if passed:
        lines += [f"Passed: {', '.join(_code(item) for item in passed)}", ""]
    if report.not_checked:
        lines += [f"Not checked: {', '.join(_code(item) for item in report.not_checked)}", ""]
    commands = [r.reproduce for r in troubled if r.reproduce]
    if commands:
        # An HTML block, not a code fence: a path holding ``` would close a fence; escaped text closes no <pre>.
        block = "\n".join(html_text(command) for command in commands)
        lines += ["To reproduce:", "", f"<pre><code>{block}", "</code></pre>", ""]
    return "\n".join(lines)
