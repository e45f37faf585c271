"""Hostile or odd user text and paths (issue 11): no crash, no injected CI command, escape or markup.

Reporters are run directly on records built from crafted and generated
strings (no TensorFlow); a few full runs of the command line check the same
on a crafted module, and the usage errors and report files around a run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import textwrap
import threading
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from gradcheck.check_requests import reproduce_command
from gradcheck.config import Settings
from gradcheck.config_files import find_config_file
from gradcheck.options import RunOptions
from gradcheck.report_files import write_atomically
from gradcheck.reporting import FORMATS, RenderOptions, render
from gradcheck.reporting.github import render_summary, workflow_commands
from gradcheck.reporting.safe_text import markdown, shown
from gradcheck.reporting.text import render_text, render_text_string
from gradcheck.results import HeatMap, InputRecord, Problem, Result, RunReport
from tests.helpers import REPO, STATUSES, invoke


def test_config_search_stops_at_the_project_root(tmp_path: Path) -> None:
    # A gradcheck.toml in a shared folder above the project must not apply.
    (tmp_path / "gradcheck.toml").write_text("seed = 3\n")
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / ".git").mkdir()
    assert find_config_file(project / "src") is None
    (project / "gradcheck.toml").write_text("seed = 4\n")
    assert find_config_file(project / "src") == (project / "gradcheck.toml").resolve()


def test_setup_cfg_also_marks_the_project_root(tmp_path: Path) -> None:
    (tmp_path / "gradcheck.toml").write_text("seed = 3\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "setup.cfg").write_text("[metadata]\n")
    assert find_config_file(project) is None


def test_pyproject_toml_also_marks_the_project_root(tmp_path: Path) -> None:
    (tmp_path / "gradcheck.toml").write_text("seed = 3\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    assert find_config_file(project) is None


def test_reproduce_line_is_shell_quoted(tmp_path: Path) -> None:
    hostile = "dir with 'quote' `touch pwned`/m.py::f"
    subject = SimpleNamespace(id=hostile)
    config = tmp_path / "my config.toml"
    line = reproduce_command(subject, Settings(), RunOptions(targets=(), config_path=config))  # type: ignore[arg-type]
    words = shlex.split(line)
    assert words[:3] == ["gradcheck", "run", hostile]
    assert words[-2:] == ["-c", str(config)]


# ---------------------------------------------------------------------------
# Hostile text in every report format (issue 11, items 1-5 and the test module)
# ---------------------------------------------------------------------------

#: Text that user code may put in a message, a name or a path, each aimed at one way to break a report.
HOSTILE = (
    "line one\nline two",
    "\n::error file=README.md,line=1::injected",
    "::warning::at the start",
    "  ::group::after blanks",
    "100% %0A %25 a, b: c",
    "##[error]legacy command",
    "".join(chr(code) for code in range(32)),
    "\x7f",
    "".join(chr(code) for code in range(0x80, 0xA0)),
    "\ufffe\uffff",
    "lone \ud800 surrogate \udce9",
    "\x1b[2J\x1b[H clear and home",
    "\x1b]0;window title\x07",
    "\x1b]8;;https://example.com\x1b\\a link\x1b]8;;\x1b\\",
    "\x9b2J C1 CSI",
    "[bold red]markup[/]",
    "w [/]",
    "[/]",
    "<img src=x onerror=alert(1)>",
    "<details><summary>open</summary>",
    "[a link](https://example.com) https://example.com",
    "```\nfence\n```",
    "**bold** _italic_ `tick` | pipe \\ backslash & amp",
    "\u202eright-to-left override",
)

#: What a terminal obeys beyond colour: any ESC that does not open an SGR (colour) sequence, or OSC and C1 CSI.
_NOT_COLOUR = re.compile(r"\x1b(?!\[[0-9;]*m)|\x9b|\x9d")


def runner_commands(text: str) -> list[str]:
    """Lines that GitHub's runner would take as a command: ``::`` after blanks, or ``##[`` anywhere."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]


def _unsafe_characters(text: str) -> list[str]:
    """Characters that no human-readable format may hold: controls (but newline), DEL, C1, surrogates, U+FFFE."""
    return sorted({char for char in text if char != "\n" and not char.isprintable() and char != " "})


def _no_nan(constant: str) -> None:
    raise ValueError(f"JSON holds {constant}")


def hostile_report(text: str) -> RunReport:
    """A run whose every string field is (or holds) ``text``: one failed, one error, one skipped, one passed."""
    heatmap = HeatMap(custom=[[1.0, 2.0]], reference=[[1.0, 0.0]], difference=[[0.0, 2.0]], axes=(0, 1))
    inputs = (InputRecord(text, (1, 2), "float64"), InputRecord(f"v{text}", (2,), "float64", role="variable"))
    path = f"{text}/m.py"
    return RunReport(
        results=(
            Result(
                id=f"{path}::{text}",
                name=text,
                kind="function",
                status="failed",
                dtype="float32",
                inputs=inputs,
                problems=(
                    Problem(
                        "numeric",
                        text,
                        text,
                        execution="eager",
                        max_abs_error=2.0,
                        worst_index=(0, 1),
                        hint=text,
                        heatmap=heatmap,
                        expected=text,
                        got=text,
                    ),
                    Problem("variables", f"v{text}", f"msg {text}"),
                ),
                notes=(text,),
                path=path,
                line=3,
                reproduce=f"gradcheck run {text}",
            ),
            Result(
                id=f"{path}::C.{text}",
                name=f"C.{text}",
                kind="function",
                status="error",
                problems=(Problem("exception", None, text, traceback=f"Traceback\n{text}\n"),),
                path=path,
                reproduce=text,
            ),
            Result(id=text, name=text, kind="layer", status="skipped", skip_reason=text, path=path),
            Result(id=f"{text}::ok", name="ok", kind="function", status="passed", path=path),
        ),
        seed=0,
        seconds=1.0,
        not_checked=(text,),
    )


def _colour_text(report: RunReport, color_system: str | None) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=color_system is not None, color_system=color_system)
    render_text(report, console, verbosity=1)
    return buffer.getvalue()


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)


#: Every tag that gradcheck's HTML page draws; a tag from user text would be something else.
_OWN_HTML_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "thead", "tbody", "tr", "th"),
    *("td", "a", "code", "section", "span", "ul", "li", "strong", "div", "details", "summary", "pre", "figure"),
    *("figcaption", "svg", "g", "rect", "text", "line", "defs", "lineargradient", "stop"),
}
#: The only HTML that the job summary writes itself.
_OWN_SUMMARY_TAGS = re.compile(r"</?code>|<br>|<pre>|</pre>")


def assert_reports_hold(report: RunReport, text: str) -> None:
    """Every format renders ``report``, well-formed, with ``text`` shown but never obeyed."""
    documents = {format_: render(report, format_, RenderOptions(verbosity=1)) for format_ in FORMATS}
    summary = render_summary(report)
    for format_, document in {**documents, "summary": summary}.items():
        document.encode("utf-8")  # strict: no lone surrogate reaches a file or a stream
        commands = runner_commands(document)
        if format_ == "github":
            commands = [line for line in commands if not _OWN_ANNOTATION.match(line) or "##[" in line]
        assert commands == [], (format_, commands)
    json.loads(documents["json"], parse_constant=_no_nan)
    json.loads(documents["sarif"], parse_constant=_no_nan)
    ET.fromstring(documents["junit"].encode("utf-8"))
    for format_ in ("text", "junit", "github", "html"):
        assert _unsafe_characters(documents[format_]) == [], format_
    assert _unsafe_characters(summary) == []
    assert len(documents["github"].splitlines()) == len(workflow_commands(report))
    parser = _Tags()
    parser.feed(documents["html"])
    assert parser.tags <= _OWN_HTML_TAGS, parser.tags - _OWN_HTML_TAGS
    assert "<" not in _OWN_SUMMARY_TAGS.sub("", summary.replace("<code>", "").replace("</code>", ""))
    assert not re.search(r"^\s*(```|~~~)", summary, re.MULTILINE)  # no code fence that a path could close
    never = _colour_text(report, None)
    assert "\x1b" not in never and _unsafe_characters(never) == []
    always = _colour_text(report, "truecolor")
    assert "\x1b[" in always  # colour is on ...
    assert not _NOT_COLOUR.search(always)  # ... and nothing but colour reaches the terminal
    assert runner_commands(never) == [] and runner_commands(always) == []


#: gradcheck's own annotation: one command a line, its properties and data escaped.
_OWN_ANNOTATION = re.compile(r"^::(error|warning)( file=[^:,]*(,line=\d+)?,title=gradcheck)?::[^\r\n]*$")


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_every_format_holds_against_hostile_text(text: str) -> None:
    assert_reports_hold(hostile_report(text), text)


_PIECES = st.one_of(
    st.sampled_from(HOSTILE),
    # exclude_categories=(): surrogates too, which hypothesis leaves out by default.
    st.text(st.characters(exclude_categories=()), max_size=12),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, min_size=1, max_size=4).map("".join))
def test_every_format_holds_against_generated_text(text: str) -> None:
    assert_reports_hold(hostile_report(text), text)


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=())))
def test_shown_text_is_printable_one_line_and_no_command(text: str) -> None:
    line = shown(text)
    assert _unsafe_characters(line) == []
    assert "\n" not in line and runner_commands(line) == []
    line.encode("utf-8")
    escaped = markdown(text)
    assert "<" not in escaped and "`" not in escaped.replace("\\`", "")


def test_markup_in_names_is_text_not_rich_markup() -> None:
    # Table cells were parsed as markup: "w [/]" raised MarkupError, "[bold]" vanished.
    report = hostile_report("w [/] [bold]b[/bold]")
    text = render_text_string(report, verbosity=1)
    assert "w [/] [bold]b[/bold]" in text
    junit = ET.fromstring(render(report, "junit").encode("utf-8"))
    assert "w [/] [bold]b[/bold]" in (junit.find(".//failure").text or "")


def test_control_characters_show_escaped_as_repr_does() -> None:
    text = render_text_string(hostile_report("a\x1b[2Jb\x07c\ud800d"))
    assert "a\\x1b[2Jb\\x07c\\ud800d" in text


def test_junit_attributes_are_cleaned() -> None:
    name = "f\x01\x1b\ufffe\ud800"
    document = render(hostile_report(name), "junit")
    root = ET.fromstring(document.encode("utf-8"))
    case = root.find(".//testcase")
    assert case is not None and case.get("name") == "f\\x01\\x1b\\ufffe\\ud800"
    suite = root.find("testsuite")
    assert suite is not None and "\\x01" in (suite.get("name") or "") and "\\x01" in (suite.get("file") or "")


def test_job_summary_shows_html_and_markdown_as_text() -> None:
    summary = render_summary(hostile_report("<img src=x onerror=alert(1)> ``` [l](u) a`b|c"))
    assert "<img" not in summary and "&lt;img src=x onerror=alert(1)&gt;" in summary
    assert "```" not in summary
    # Names without anything to escape stay code spans, as before.
    plain = render_summary(
        RunReport(results=(Result(id="m.py::f", name="f", kind="function", status="passed"),), seed=0)
    )
    assert "Passed: `m.py::f`" in plain


# ---------------------------------------------------------------------------
# The command line on a crafted module
# ---------------------------------------------------------------------------

#: One line of everything at once; the exception's first line is the message, the rest is in the traceback.
_EVIL = (
    "\x1b[2J\x1b]0;title\x07\x1b]8;;http://e.x\x07link\x1b]8;;\x07 ::error::x ##[error]y %0A [bold]m[/] [/] "
    "<img src=x onerror=alert(1)> ``` **md** \x7f\x9b\ufffe \ud800 \x00\x01 \u202e"
    "\n::error file=README.md,line=1::injected\n##[error]legacy"
)

CRAFTED = f"""
import tensorflow as tf

EVIL = {_EVIL!r}


@tf.custom_gradient
def raises(x):
    def grad(dy):
        raise ValueError(EVIL)
    return x * 2.0, grad


@tf.custom_gradient
def _wrong(x):
    def grad(dy):
        return dy * 3.0
    return x * 2.0, grad


# Held in a dict, not a global: gradcheck then names the variable by its own (hostile) name.
VARIABLES = {{"gain": tf.Variable([0.5, -1.5, 2.0], dtype=tf.float64, name="gain [/] <b>\\x1b[2J\\n::error::v ##[v]")}}


@tf.custom_gradient
def gain_wrong(x):
    gain = VARIABLES["gain"]

    def grad(dy, variables=None):
        return dy * gain, [tf.reduce_sum(dy, axis=0) for _ in variables]
    return x * gain, grad


_wrong.__name__ = "wrong\\x1b[2J[/]"
_wrong.__qualname__ = "wrong\\x1b[2J [/] ::error::q"
globals()["wrong\\x1b]0;t\\x07 [/] ##[x] <b>"] = _wrong
"""

#: A folder name with a space, quotes, a newline and a byte that is not UTF-8.
HOSTILE_FOLDER = os.fsdecode(b"dir 'q' \"dq\" caf\xe9 \n::error::nl ##[x]")

_ALL_FILES = (
    ("text", "r.txt"),
    ("json", "r.json"),
    ("junit", "r.xml"),
    ("github", "gh.txt"),
    ("html", "r.html"),
    ("sarif", "r.sarif"),
)


@pytest.fixture
def crafted(project: Path) -> Path:
    """The crafted module in a hostile folder of the project; its config pins no shapes (they are guessed)."""
    folder = project / HOSTILE_FOLDER
    folder.mkdir()
    (folder / "hostile_ops.py").write_text(CRAFTED, encoding="utf-8")
    return project


def _file_arguments() -> list[str]:
    return [argument for format_, name in _ALL_FILES for argument in ("--format", format_, "-o", name)]


def _assert_streams_hold(stdout: str, stderr: str) -> None:
    for stream in (stdout, stderr):
        commands = [line for line in runner_commands(stream) if not _OWN_ANNOTATION.match(line) or "##[" in line]
        assert commands == [], commands
        assert not _NOT_COLOUR.search(stream)


def _assert_files_hold(project: Path, summary: Path | None) -> None:
    documents = {format_: (project / name).read_text(encoding="utf-8") for format_, name in _ALL_FILES}
    json.loads(documents["json"], parse_constant=_no_nan)
    json.loads(documents["sarif"], parse_constant=_no_nan)
    ET.fromstring(documents["junit"].encode("utf-8"))
    for format_, document in documents.items():
        assert runner_commands(document) == [] or format_ == "github", format_
        if format_ in ("text", "junit", "github", "html"):
            assert _unsafe_characters(document) == [], format_
    for line in documents["github"].splitlines():
        assert _OWN_ANNOTATION.match(line) and "##[" not in line, line
    assert "\\x1b[2J" in documents["text"] and "\x1b" not in documents["text"]
    if summary is not None:
        markdown_text = summary.read_text(encoding="utf-8")
        assert "<" not in _OWN_SUMMARY_TAGS.sub("", markdown_text)
        assert _unsafe_characters(markdown_text) == [] and runner_commands(markdown_text) == []


def test_every_format_from_the_command_line_on_a_crafted_module(crafted: Path) -> None:
    summary = crafted / "summary.md"
    result = invoke("run", ".", "-v", "--color", "never", *_file_arguments(), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1, result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    _assert_streams_hold(result.stdout, result.stderr)
    _assert_files_hold(crafted, summary)
    assert "wrong\\x1b" in result.stdout and "caf\\udce9 \\n" in result.stdout
    assert "gain [/] <b>\\x1b[2J\\n" in result.stdout  # the variable's name, as text


def test_colour_never_carries_user_escapes_and_github_on_stdout(crafted: Path) -> None:
    always = invoke("run", ".", "-v", "--color", "always")
    assert always.exit_code == 1, always.stderr
    assert "\x1b[" in always.stdout  # colour is on, and nothing else from user text reaches the terminal
    _assert_streams_hold(always.stdout, always.stderr)
    github = invoke("run", ".", "--format", "github")
    assert github.exit_code == 1
    _assert_streams_hold(github.stdout, github.stderr)
    assert github.stdout.count("\n") == len(github.stdout.splitlines()) >= 3


def test_the_listing_shows_hostile_names_as_text(crafted: Path) -> None:
    result = invoke("list", ".")
    assert result.exit_code == 0, result.stderr
    _assert_streams_hold(result.stdout, result.stderr)
    assert "\x1b" not in result.stdout and "wrong\\x1b" in result.stdout


def test_a_real_process_writes_only_safe_bytes(crafted: Path) -> None:
    # Outside CliRunner: the real streams, encoded by the interpreter (a lone surrogate used to crash them).
    env = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_STEP_SUMMARY": str(crafted / "summary.md")}
    process = subprocess.run(
        [sys.executable, "-m", "gradcheck", "run", ".", "--format", "github", "--format", "text", "-o", "r.txt"],
        cwd=crafted,
        capture_output=True,
        timeout=300,
        env=env,
    )
    assert process.returncode == 1, process.stderr
    stdout, stderr = process.stdout.decode("utf-8"), process.stderr.decode("utf-8")
    _assert_streams_hold(stdout, stderr)
    assert "\x1b" not in stdout and "\x1b" not in (crafted / "r.txt").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# Usage errors: one line, whatever the user's text holds (items 3 and 8)
# ---------------------------------------------------------------------------

_INJECTED = "boom\n::error file=README.md,line=1::injected\n##[error]legacy \x1b]0;t\x07"


def _one_safe_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, lines
    assert runner_commands(stderr) == [] and "\x1b" not in stderr
    return lines[0]


def test_an_import_error_is_one_line_however_many_its_message_has(project: Path) -> None:
    (project / "ops.py").write_text(f"raise ImportError({_INJECTED!r})\n", encoding="utf-8")
    result = invoke("run", "ops.py")
    assert result.exit_code == 2
    assert "boom" in _one_safe_line(result.stderr)
    verbose = invoke("run", "ops.py", "-v")
    assert verbose.exit_code == 2
    assert runner_commands(verbose.stderr) == [] and "\x1b" not in verbose.stderr


def test_a_config_key_with_a_newline_is_one_line(project: Path) -> None:
    (project / "gradcheck.toml").write_text('"bad\\n::error::key ##[x]" = 1\n', encoding="utf-8")
    (project / "ops.py").write_text("x = 1\n", encoding="utf-8")
    result = invoke("run", "ops.py")
    assert result.exit_code == 2
    _one_safe_line(result.stderr)


def test_a_bad_option_value_is_one_line(project: Path) -> None:
    result = invoke("run", "ops.py", "--format", "x\n::error::y ##[z]")
    assert result.exit_code == 2
    _one_safe_line(result.stderr)


def test_the_bare_command_shows_the_whole_help() -> None:
    result = invoke()
    assert result.exit_code in (0, 2)
    shown_help = result.stdout + result.stderr
    lines = shown_help.splitlines()
    assert lines[0].startswith("Usage: ") and "Commands:" in lines and len(lines) > 5
    assert "error" not in lines[0]


# ---------------------------------------------------------------------------
# Report files (item 7)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output, config",
    [
        ("afile/x.json", ""),
        ("", 'output = "existing_dir"\nformat = "json"\n'),
        pytest.param(
            "/proc/x.json",
            "",
            marks=pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc"),
        ),
    ],
)
def test_an_unwritable_report_path_stops_before_any_check(project: Path, output: str, config: str) -> None:
    (project / "afile").write_text("a file, not a folder\n", encoding="utf-8")
    (project / "existing_dir").mkdir()
    (project / "gradcheck.toml").write_text(config, encoding="utf-8")
    (project / "ops.py").write_text(textwrap.dedent(STATUSES), encoding="utf-8")
    before = sorted(path.name for path in project.iterdir())
    first = ["--format", "junit", "-o", "first.xml"]
    args = ["run", "ops.py", *first, "--format", "json", "-o", output] if output else ["run", "ops.py"]
    started = time.monotonic()
    result = invoke(*args)
    assert result.exit_code == 2, result.stdout + result.stderr
    line = _one_safe_line(result.stderr)
    assert line.startswith("gradcheck: error: ")
    assert sorted(path.name for path in project.iterdir()) == before  # nothing written, first.xml neither
    assert time.monotonic() - started < 20  # refused before the run, not after it


def test_a_symlinked_report_is_replaced_as_mv_would(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    link = reports / "report.json"
    link.symlink_to(tmp_path / "elsewhere" / "deep" / "target.json")  # dangling
    write_atomically(link, "{}\n")
    assert not link.is_symlink() and link.read_text() == "{}\n"
    assert not (tmp_path / "elsewhere").exists()  # no folder made for the link's target
    assert [path.name for path in reports.iterdir()] == ["report.json"]  # no temporary file left


def test_a_live_symlink_is_replaced_and_its_target_kept(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    target = tmp_path / "other" / "kept.json"
    target.write_text("earlier\n")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    write_atomically(link, "new\n")
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert target.read_text() == "earlier\n"
    assert [path.name for path in (tmp_path / "other").iterdir()] == ["kept.json"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_report_files_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    earlier = os.umask(umask)
    try:
        write_atomically(tmp_path / "report.json", "{}\n")
    finally:
        os.umask(earlier)
    assert stat.S_IMODE((tmp_path / "report.json").stat().st_mode) == mode


def _char_device(path: Path) -> Path:
    """A copy of /dev/null (character device 1,3) at ``path``; the test is skipped where it cannot be made."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as error:
        pytest.skip(f"cannot make a device node here: {error}")
    return path


def test_a_report_at_a_device_node_is_written_to_the_device_not_over_it(project: Path) -> None:
    (project / "ops.py").write_text(textwrap.dedent(STATUSES), encoding="utf-8")
    device = _char_device(project / "null")
    result = invoke("run", "ops.py", "--format", "json", "-o", str(device))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert stat.S_ISCHR(device.lstat().st_mode) and device.lstat().st_rdev == os.makedev(1, 3)
    assert sorted(path.name for path in project.iterdir() if path.name.startswith(".")) == []  # no temporary file


def test_a_report_at_a_fifo_streams_to_its_reader(project: Path) -> None:
    (project / "ops.py").write_text(textwrap.dedent(STATUSES), encoding="utf-8")
    fifo = project / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        result = invoke("run", "ops.py", "--format", "json", "-o", str(fifo))
    finally:
        reader.join(timeout=10)  # after gradcheck's close the reader still has to see EOF and return
        if reader.is_alive():  # gradcheck never opened the FIFO: unblock the reader whatever happened
            with contextlib.suppress(OSError), open(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK), "wb"):
                pass
            reader.join(timeout=10)
    assert result.exit_code == 1, result.stdout + result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(received[0])["exit_code"] == 1


@pytest.mark.skipif(not Path("/bin/bash").exists() or not Path("/dev/fd").exists(), reason="needs bash and /dev/fd")
def test_a_report_at_a_process_substitution_streams_to_it(project: Path) -> None:
    (project / "ops.py").write_text(textwrap.dedent(STATUSES), encoding="utf-8")
    command = f"{shlex.quote(sys.executable)} -m gradcheck run ops.py --format json -o >(cat > got.json)"
    process = subprocess.run(["/bin/bash", "-c", command], cwd=project, capture_output=True, text=True, timeout=240)
    assert process.returncode == 1, process.stderr
    got = project / "got.json"
    for _ in range(100):  # cat may still be writing after bash has returned
        with contextlib.suppress(OSError, ValueError):
            if json.loads(got.read_text())["exit_code"] == 1:
                break
        time.sleep(0.1)
    assert json.loads(got.read_text())["exit_code"] == 1
