"""The user documentation held to the code: README.md and the guide in docs/.

- The generated parts of the reference pages are what ``tools/docs_reference.py`` writes today,
  and every option, setting and config key is in them.
- Every ```toml block is read by gradcheck's own config reader and listed (``gradcheck list``)
  against the functions of ``tests/fixtures/docs``.
- Every ``gradcheck`` command of a ```console block that runs on ``examples/`` is run: its exit
  code is the one its shown output implies, and each line shown is printed, in order (timings
  aside).
- Links and anchors resolve; no project history outside CHANGELOG.md; the README stays short.
- ``--help`` groups options as the reference does and ends with the command's guide page.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

from gradcheck import config_files
from gradcheck.cli import main
from gradcheck.cli.help import GUIDE_PAGES
from gradcheck.config_files import parse_config
from gradcheck.settings import TABLE
from tests.helpers import FIXTURES, REPO, invoke

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: Pages whose links are checked too (they link into the guide).
LINKED = [*PAGES, REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md"]


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "tools" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


generator = _load_generator()


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    page: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(pages: list[Path], language: str) -> list[Block]:
    """The ```language blocks of ``pages``."""
    found = []
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        opened: tuple[int, str] | None = None
        body: list[str] = []
        for number, line in enumerate(lines, 1):
            fence = re.match(r"^\s*```(\w*)\s*$", line)
            if fence and opened is None:
                opened, body = (number, fence.group(1)), []
            elif fence and not fence.group(1) and opened is not None:
                if opened[1] == language:
                    found.append(Block(page, opened[0], language, "\n".join(body) + "\n"))
                opened = None
            elif opened is not None:
                body.append(line)
    return found


# -- the generated references ---------------------------------------------------------------------


def test_the_generated_pages_are_what_the_generator_writes() -> None:
    stale = generator.stale_pages()
    assert stale == [], f"{stale}: run python tools/docs_reference.py and commit the pages"


def test_every_run_option_and_every_config_key_is_in_the_references() -> None:
    reference = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    assert f"`{opt}" in reference or f", {opt}" in reference, (name, opt)
    configuration = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for setting in TABLE:
        assert f"#### `{setting.key}`" in configuration, setting.key
    for part, keys in generator.declared_keys().items():
        for key in keys:
            assert f"`{key}`" in configuration, (part, key)


def test_a_config_key_outside_the_table_cannot_go_undocumented(monkeypatch: pytest.MonkeyPatch) -> None:
    # A key no table takes (`proxy`, the example here before, is a documented key now).
    monkeypatch.setattr(config_files, "_SUBJECT_KEYS", {*config_files._SUBJECT_KEYS, "warm_start"})
    with pytest.raises(SystemExit, match=r"'warm_start'.*describe it in STRUCTURE"):
        generator.tables_block()


def test_a_new_row_of_the_settings_table_documents_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    from gradcheck.settings import Flag, Setting

    row = Setting("warn_only", Flag(), False, "Report, but exit 0.", per_function=True)
    monkeypatch.setattr(generator, "TABLE", (*TABLE, row))
    text = generator.settings_block()
    assert "#### `warn_only`\n\nReport, but exit 0." in text
    assert "warn_only = true" in text and "- command line: `--warn-only`" in text


# -- TOML examples --------------------------------------------------------------------------------

TOML_BLOCKS = blocks(PAGES, "toml")


def _targets(document: dict[str, Any]) -> list[str]:
    """``ops.py::NAME`` for each function, layer and class the config names (gradcheck's reading of it)."""
    table = document.get("tool", {}).get("gradcheck", document)
    config = parse_config(table, None)
    names = [*config.functions, *config.layers, *config.classes]
    return [f"ops.py::{name}" for name in dict.fromkeys(names)] or ["ops.py::custom_op"]


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=[block.where for block in TOML_BLOCKS])
def test_every_toml_example_is_a_valid_config(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    document = tomllib.loads(block.text)
    shutil.copytree(FIXTURES / "docs", tmp_path, dirs_exist_ok=True)
    name = "pyproject.toml" if "tool" in document else "gradcheck.toml"
    (tmp_path / name).write_text(block.text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = invoke("list", *_targets(document))
    assert result.exit_code == 0, f"{block.where}:\n{block.text}\n{result.output}"


def test_there_are_toml_examples_on_each_page_that_configures() -> None:
    pages = {block.page.name for block in TOML_BLOCKS}
    assert {"README.md", "getting-started.md", "checking.md", "configuration.md", "verdicts.md"} <= pages


# -- console examples on the bundled examples -----------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One ``$ gradcheck ...`` line of a console block and the output shown under it."""

    words: list[str]
    shown: list[str]


def commands(block: Block) -> list[Command]:
    """The commands of a console block, each with the lines shown under it."""
    found: list[Command] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            found.append(Command(shlex.split(line[2:]), []))
        elif found:
            found[-1].shown.append(line.rstrip())
    return found


def _on_the_examples(command: Command) -> bool:
    return command.words[0] == "gradcheck" and any(word.split("/")[0] == "examples" for word in command.words)


CONSOLE_BLOCKS = [block for block in blocks(PAGES, "console") if any(map(_on_the_examples, commands(block)))]
_SUMMARY = re.compile(r"^\d+ (passed|failed|errors?|skipped)\b.* in \d+(\.\d+)?s")


def expected_exit_code(shown: list[str]) -> int:
    """The exit code the shown output implies (the summary line, ``wrote``, an error, nothing to check)."""
    last = next((line for line in reversed(shown) if line), "")
    if _SUMMARY.match(last):
        return 1 if re.search(r"\d+ (failed|errors?)\b", last) else 0
    if last.startswith("gradcheck: error:"):
        return 2
    if last.startswith("nothing to check"):
        return 5
    return 0  # `wrote ...` (init), a listing


def _untimed(line: str) -> str:
    line = re.sub(r"\(\d+(\.\d+)?s\)", "(…s)", line.rstrip())
    return re.sub(r" in \d+(\.\d+)?s\b", " in …s", line)


def _first_missing_line(shown: list[str], printed: list[str]) -> str | None:
    """The first shown line that is not printed after the ones before it (blank and ``...`` lines skip)."""
    remaining = iter(_untimed(line) for line in printed)
    return next((line for line in shown if line and line != "..." and _untimed(line) not in remaining), None)


@pytest.mark.parametrize("block", CONSOLE_BLOCKS, ids=[block.where for block in CONSOLE_BLOCKS])
def test_every_console_example_on_the_examples_runs_as_shown(block: Block, project: Path) -> None:
    shutil.copytree(REPO / "examples", project / "examples")
    for command in commands(block):
        assert _on_the_examples(command), f"{block.where}: {command.words} does not run on examples/"
        result = invoke(*command.words[1:])
        assert result.exit_code == expected_exit_code(command.shown), f"{block.where}:\n{result.output}"
        missing = _first_missing_line(command.shown, result.output.splitlines())
        assert missing is None, f"{block.where}: shown but not printed (in this order):\n{missing}\n\n{result.output}"


def test_the_console_examples_cover_the_first_steps() -> None:
    run = [" ".join(c.words[:2]) for block in CONSOLE_BLOCKS for c in commands(block)]
    assert {"gradcheck run", "gradcheck list", "gradcheck init"} <= set(run)
    assert any(block.page.name == "README.md" for block in CONSOLE_BLOCKS)


def test_the_starter_config_shown_is_what_init_writes(project: Path) -> None:
    (starter,) = [b for b in TOML_BLOCKS if b.text.startswith("# Starter config written by `gradcheck init")]
    words = shlex.split(starter.text.split("`")[1])
    shutil.copytree(REPO / "examples", project / "examples")
    assert invoke(*words[1:]).exit_code == 0
    assert (project / words[words.index("-o") + 1]).read_text(encoding="utf-8") == starter.text


def test_the_json_report_shown_has_the_keys_of_a_real_one(project: Path) -> None:
    (shown,) = [json.loads(block.text) for block in blocks([REPO / "docs" / "ci.md"], "json")]
    shutil.copytree(REPO / "examples", project / "examples")
    real = json.loads(invoke("run", shown["results"][0]["id"], "--format", "json").stdout)

    def subset(doc: Any, actual: Any, where: str) -> None:
        if isinstance(doc, dict):
            assert set(doc) <= set(actual), (where, set(doc) - set(actual))
            for key, value in doc.items():
                subset(value, actual[key], f"{where}.{key}")
        elif isinstance(doc, list) and doc:
            subset(doc[0], actual[0], f"{where}[0]")

    subset(shown, real, "report")
    result, real_result = shown["results"][0], real["results"][0]
    assert set(result) == set(real_result)
    assert set(result["problems"][0]) == set(real_result["problems"][0])


@pytest.mark.parametrize(
    ("page", "sample"),
    [
        ("docs/getting-started.md", "examples/matmul/gradcheck.toml"),
        ("docs/ci.md", "docs/github-workflow.yml"),
        ("docs/ci.md", "docs/pre-commit-config.yaml"),
    ],
)
def test_files_shown_verbatim(page: str, sample: str) -> None:
    assert (REPO / sample).read_text(encoding="utf-8") in (REPO / page).read_text(encoding="utf-8")


# -- links, history, length -----------------------------------------------------------------------


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (and explicit ``<a id>``)."""
    seen: dict[str, int] = {}
    found = set(re.findall(r'<a id="([^"]+)"', page.read_text(encoding="utf-8")))
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        heading = re.match(r"^#{1,6} (.*)$", line)
        if heading and not in_code:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path, targets: list[str]) -> list[str]:
    """The relative links and anchors of ``targets`` (written on ``page``) that resolve to nothing."""
    broken = []
    for target in targets:
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", LINKED, ids=[str(page.relative_to(REPO)) for page in LINKED])
def test_links_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    assert broken_links(page, re.findall(r"\]\(([^)\s]+)\)", text)) == []


def test_no_project_history_in_the_user_documentation() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        # The issue's own grep ("issue [0-9]\|round [0-9]"), in any case, and rounds counted in words.
        history = r"\b(?:issues?|rounds?) (?:\d|one|two|three|four\b)|\b(?:\d+|two|three|four) rounds\b"
        found = re.findall(f".*(?:{history}).*", text, flags=re.I)
        assert found == [], (page.name, found)


def test_the_readme_is_a_front_door() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for page in ("getting-started", "checking", "configuration", "command-line", "verdicts", "ci", "guarantees"):
        assert f"(docs/{page}.md)" in readme, page
    assert "(docs/performance.md)" in readme and "(CHANGELOG.md)" in readme


# -- --help ---------------------------------------------------------------------------------------


def test_the_reference_groups_run_options_as_its_help_does() -> None:
    help_text = invoke("run", "--help").stdout
    sections = [line[:-1] for line in help_text.splitlines() if re.match(r"^[A-Z][A-Za-z ]*:$", line)]
    reference = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8").split("## gradcheck list")[0]
    assert [line[2:-2] for line in reference.splitlines() if line.startswith("**")] == sections


@pytest.mark.parametrize("command", sorted(GUIDE_PAGES))
def test_the_guide_pages_that_help_names_exist(command: str) -> None:
    page, reference = GUIDE_PAGES[command]
    assert broken_links(REPO / "README.md", [page, reference]) == []
