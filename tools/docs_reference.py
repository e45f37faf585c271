"""The guide's reference pages, generated: every config key and every command-line option.

``docs/configuration.md`` and ``docs/command-line.md`` are prose written by
hand around blocks that this script writes::

    <!-- generated: NAME -->
    ...
    <!-- end generated: NAME -->

The blocks come from where gradcheck itself declares what it takes: the
settings table (``gradcheck.settings.TABLE``: key, kind, default, help, flag,
group), the keys ``gradcheck.config_files`` and ``gradcheck.config`` accept
besides the table's (``dims``, ``inputs``, an input's ``shape`` ...), and the
click commands (``gradcheck.cli``, grouped as their ``--help`` groups them). A
new row of the table is documented by itself; a new key outside the table
stops this script until :data:`STRUCTURE` describes it.

Run ``python tools/docs_reference.py`` after changing a setting, an option or
a config key; ``--check`` exits 1 when a committed page differs from what it
generates (``tests/test_docs.py`` holds the pages to it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gradcheck import config, config_files
from gradcheck.checking.verdict import RECONCILE, Reconciled
from gradcheck.cli import main
from gradcheck.cli.help import GroupedOption, option_groups
from gradcheck.dtypes import FLOATS
from gradcheck.finite_differences import default_step
from gradcheck.settings import (
    BY_NAME,
    GROUPS,
    MAX_JOBS,
    TABLE,
    Choice,
    FilePath,
    Flag,
    Globs,
    Number,
    Setting,
    Statuses,
    WorkerCount,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)", re.S)

# -- what the table cannot say -------------------------------------------------------------------

#: Where the guide explains a key at length.
GUIDE = {
    "shape_only": "verdicts.md#what-is-checked",
    "mode": "verdicts.md#fast-and-full-mode",
    "dtype": "verdicts.md#float32-and-other-dtypes",
    "seed": "verdicts.md#random-draws-and-the-seed",
    "atol": "verdicts.md#tolerances",
    "rtol": "verdicts.md#tolerances",
    "eps": "verdicts.md#finite-differences",
    "projections": "verdicts.md#fast-and-full-mode",
    "execution": "verdicts.md#eager-and-tffunction",
    "order": "verdicts.md#second-order",
    "reference": "verdicts.md#surrogate-gradients",
    "format": "ci.md#reports",
    "output": "ci.md#several-reports-in-one-run",
    "strict": "ci.md#what-fails-the-run",
    "fail_on": "ci.md#what-fails-the-run",
    "maxfail": "ci.md#what-fails-the-run",
    "timeout": "guarantees.md#timeouts",
    "max_memory": "guarantees.md#the-memory-bound",
    "jobs": "ci.md#parallel-workers--j",
    "exclude": "checking.md#leaving-files-out",
    "device": "guarantees.md#accelerators",
}

#: The defaults the table writes as None, in words.
DEFAULT_WORDS = {
    "atol": "per dtype",
    "rtol": "per dtype",
    "eps": "per dtype",
    "output": "standard output",
    "fail_on": '`["failed", "error"]`',
    "maxfail": "none: every function is checked",
    "max_memory": "half the machine's memory",
}

#: Examples where the one made from the kind would say little.
EXAMPLES: dict[str, Any] = {
    "seed": 1234,
    "atol": 1e-8,
    "rtol": 1e-5,
    "eps": 1e-4,
    "projections": 6,
    "order": 2,
    "format": "junit",
    "output": "gradcheck-junit.xml",
    "fail_on": ["failed", "error", "skipped"],
    "maxfail": 3,
    "timeout": 600,
    "max_memory": 8000,
    "jobs": "auto",
    "exclude": ["docs/*", "examples/*", "*_test.py"],
    "reference": "numeric",
}

#: More than the one-line help says, where a key needs it.
NOTES = {
    "format": "`format` and `output` apply when the command line names one report or none.",
    "output": "Written atomically (through a temporary file and a rename), never over a module or a config file.",
    "exclude": "In the config, globs are relative to the config file's folder; `*` also matches across `/`.",
    "reference": "`none` compares no values: the function is audited for its count, shapes and dtypes only.",
    "timeout": "At the top level for every function, or in one function's table for the one slow function.",
    "max_memory": "In megabytes, on each worker process's resident memory; Linux only.",
}


@dataclass(frozen=True)
class Key:
    """A config key that is no row of the settings table: what it holds, its default, an example, what it does."""

    kind: str
    default: str
    example: str
    meaning: str


#: The keys outside the settings table, by where they are declared. A key declared there and
#: missing here stops the script (and the test): describe it, and it is documented.
STRUCTURE: dict[str, dict[str, Key]] = {
    "top": {
        "dims": Key(
            "a table of name = positive integer",
            "empty",
            "[dims]\nN = 32\nin_dim = 16",
            'Named sizes, usable in any shape (`inputs = { A = ["N", "in_dim"] }`); `--dim NAME=INT` sets one '
            "from the command line. `batch` also sizes the `None` dimensions of a `tf.function`'s "
            "`input_signature` (4 where it is not set).",
        ),
        "functions": Key(
            "`[functions.NAME]` tables",
            "none: shapes are probed",
            "[functions.custom_op]\ninputs = { A = [32, 16], W = [16, 8] }",
            "One table per function, `NAME` its name in its module; a method is `Class.method` "
            '(`[functions.Class.method]` or `[functions."Class.method"]`). Its keys are below. A name that no '
            "target defines is an error naming the closest one.",
        ),
        "layers": Key(
            "`[layers.NAME]` tables",
            "none: shapes are probed",
            "[layers.CustomLayer]\ninit = { out_dim = 8 }\ninputs = { A = [32, 16] }",
            "One table per Keras layer class, `NAME` the class's name; the same keys as a function's table.",
        ),
        "classes": Key(
            "`[classes.NAME]` tables holding `init` only",
            "none",
            "[classes.Scaler]\ninit = { factor = 3.0 }",
            "Constructor arguments shared by every checked method of class `NAME`; a method's own `init` "
            "wins key by key.",
        ),
    },
    "subject": {
        "inputs": Key(
            "a table of argument name = input",
            "probed: the first small shapes the forward pass accepts",
            "[dims]\nN = 32\n\n[functions.custom_op]\n"
            'inputs = { A = ["N", 16], W = { shape = [16, 8], low = -1.0, high = 1.0 } }',
            "The arguments that are drawn at random and differentiated. An input is a list of sizes (integers or "
            "names from `[dims]`) or a table with the keys below.",
        ),
        "constants": Key(
            "a table of argument name = value",
            "empty: arguments with defaults keep them",
            "[functions.row_norms]\ninputs = { x = [3, 4] }\nconstants = { axis = 1 }",
            "Arguments passed as they are and never differentiated: their gradient must be `None`. A value may "
            "also be a variable or an imported object (below).",
        ),
        "init": Key(
            "a table of keyword argument = value",
            "empty",
            "[layers.CustomLayer]\ninit = { out_dim = 8 }\ninputs = { A = [32, 16] }",
            "The constructor's keyword arguments: a layer's, or the class's of a method (in `[classes.NAME]` "
            "for every method at once). Values as in `constants`.",
        ),
        "proxy": Key(
            '`"module:function"`, as an import value names its object',
            "none: the gradient is the forward pass's own derivative",
            '[functions.st_round]\ninputs = { x = [16] }\nproxy = "gradcheck.proxies:identity"',
            "A surrogate gradient on purpose: the function (same arguments) whose derivative the backward "
            "function returns. The references take the forward pass's value and the proxy's derivative, and a "
            "layer reaching the function uses it too; a `constants` entry the function does not take goes to the "
            "proxy. gradcheck's own are named directly: `gradcheck.proxies:identity`, `negation`, `hard_tanh`, "
            "`clip`, `scale`. More in [the guide](verdicts.md#surrogate-gradients).",
        ),
    },
    "class": {
        "init": Key("a table of keyword argument = value", "empty", "", "As `init` in a function's table."),
    },
    "input": {
        "shape": Key(
            "a list of sizes",
            "required (but with `items`)",
            "",
            "Integers, or names from `[dims]`; `[]` for a scalar.",
        ),
        "dtype": Key(
            "one of " + ", ".join(f'`"{d}"`' for d in config.INPUT_DTYPES),
            "the run's `dtype`",
            "",
            "An integer dtype draws integers (never differentiated); a complex one is drawn and checked as two "
            "real inputs, `NAME.real` and `NAME.imag`.",
        ),
        "distribution": Key(
            "one of " + ", ".join(f'`"{d}"`' for d in config.DISTRIBUTIONS),
            '`"normal"`; `"uniform"` when `low` or `high` is set; `"integer"` for an integer dtype',
            "",
            "`normal`: standard normal. `uniform`: between `low` and `high` (both needed). `positive`: uniform in "
            "[0.5, 2) unless `low`/`high` say otherwise. `spd`: symmetric positive definite matrices (a square "
            "shape `[..., n, n]`), perturbed symmetrically. `integer`: integers in [`low`, `high`), [0, 3) by "
            "default, never differentiated. An input whose table sets `distribution`, `low` or `high` is never "
            "redrawn for a domain.",
        ),
        "low": Key("a finite number", "none", "", "Lower bound of a uniform, positive or integer draw."),
        "high": Key("a finite number", "none", "", "Upper bound (excluded); above `low`."),
        "items": Key(
            "a list of inputs",
            "none",
            "",
            "For an argument that is a list of tensors: one input per item, checked as `NAME[0]`, `NAME[1]`, ...; "
            "a table with `items` holds nothing else.",
        ),
    },
    "variable": {
        "value": Key("a number or a list of numbers", "required", "", "The variable's initial value."),
        "variable": Key("`true` or `false`", "required", "", "`true`: pass a `tf.Variable` holding `value`."),
        "dtype": Key(
            "one of the input dtypes",
            "float64 for floats (float32 in a float32 run), int32 for integers",
            "",
            "The variable's dtype.",
        ),
    },
    "import": {
        "import": Key(
            '`"module:attribute"`',
            "required",
            "",
            "The object that importing `module` and reading `attribute` gives (`module:Class.attr` reads an "
            "attribute of an attribute). `module` is a dotted name importable with the config file's folder and "
            "the target's folder on the import path, or a `.py` path relative to the config file's folder.",
        ),
    },
}


def declared_keys() -> dict[str, set[str]]:
    """The keys each part of a config accepts besides the settings table's, where gradcheck declares them."""
    table_keys = {s.key for s in TABLE}
    per_function = {s.key for s in TABLE if s.per_function}
    return {
        "top": set(config_files._TOP_KEYS) - table_keys,
        "subject": set(config_files._SUBJECT_KEYS) - per_function,
        "class": set(config_files._CLASS_KEYS),
        "input": set(config._INPUT_KEYS),
        "variable": set(config._VARIABLE_KEYS),
        "import": set(config._IMPORT_KEYS),
    }


def check_structure() -> None:
    """Every declared key has its description in :data:`STRUCTURE`, and no description outlives its key."""
    for part, keys in declared_keys().items():
        described = set(STRUCTURE[part])
        for key in sorted(keys - described):
            raise SystemExit(
                f"config key {key!r} ({part} keys, gradcheck/config_files.py or gradcheck/config.py) is not "
                f"documented: describe it in STRUCTURE[{part!r}] of tools/docs_reference.py"
            )
        for key in sorted(described - keys):
            raise SystemExit(
                f"STRUCTURE[{part!r}][{key!r}] in tools/docs_reference.py describes a key gradcheck no longer takes"
            )


# -- values written as TOML and as words ---------------------------------------------------------


def toml_value(value: Any) -> str:
    """``value`` as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return re.sub(r"e([+-])0+(?=\d)", r"e\1", format(value, "g"))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return str(value)


def kind_words(setting: Setting) -> str:
    """What a value of ``setting`` may be."""
    kind = setting.kind
    if isinstance(kind, Choice):
        return "one of " + ", ".join(f"`{toml_value(choice)}`" for choice in kind.choices)
    if isinstance(kind, Flag):
        return "`true` or `false`"
    if isinstance(kind, Number):
        return kind.must.removeprefix("must be ")
    if isinstance(kind, Statuses):
        return "a list of statuses: " + ", ".join(f"`{toml_value(s)}`" for s in ("failed", "error", "skipped"))
    if isinstance(kind, FilePath):
        return "a file path"
    if isinstance(kind, WorkerCount):
        return f'a whole number from 1 to {MAX_JOBS}, or `"auto"`'
    if isinstance(kind, Globs):
        return "a list of glob patterns"
    return (type(kind).__doc__ or type(kind).__name__).strip().splitlines()[0]


def default_words(setting: Setting) -> str:
    """The default of ``setting``, as the reference shows it."""
    if setting.default is None:
        return DEFAULT_WORDS.get(setting.key, "not set")
    return f"`{toml_value(setting.default)}`"


def example(setting: Setting) -> str:
    """A config line that sets ``setting`` (to something other than its default where the kind allows)."""
    if setting.key in EXAMPLES:
        value = EXAMPLES[setting.key]
    elif isinstance(setting.kind, Choice):
        value = next(choice for choice in setting.kind.choices if choice != setting.default)
    elif isinstance(setting.kind, Flag):
        value = not setting.default
    else:
        value = setting.default
    return f"{setting.key} = {toml_value(value)}"


# -- configuration.md ----------------------------------------------------------------------------


def settings_block() -> str:
    """Every row of the settings table with a config key, group by group: kind, default, flag, scope, example."""
    lines: list[str] = []
    for group in GROUPS:
        rows = [s for s in TABLE if s.group == group]
        if not rows:
            continue
        lines += [f"### {group}", ""]
        for setting in rows:
            lines += _setting_section(setting)
    return "\n".join(lines)


def _setting_section(setting: Setting) -> list[str]:
    facts = [f"- value: {kind_words(setting)}", f"- default: {default_words(setting)}"]
    flag = setting.long_flag
    facts.append(f"- command line: `{flag}`" if flag is not None else "- command line: none (config only)")
    if setting.per_function:
        facts.append("- also in a `[functions.NAME]` or `[layers.NAME]` table, for that function or layer alone")
    if setting.keyword:
        facts.append(f"- `gradcheck.check(..., {setting.name}=...)`")
    text = setting.help
    if setting.key in NOTES:
        text += " " + NOTES[setting.key]
    if setting.key in GUIDE:
        text += f" More in [the guide]({GUIDE[setting.key]})."
    return [f"#### `{setting.key}`", "", text, "", *facts, "", "```toml", example(setting), "```", ""]


def tables_block() -> str:
    """The keys outside the settings table: the top-level tables, a function's table, an input, a value."""
    check_structure()
    per_function = ", ".join(f"[`{s.key}`](#{s.key})" for s in TABLE if s.per_function)
    lines = ["### Top-level tables", ""]
    for key, entry in STRUCTURE["top"].items():
        lines += _key_section(key, entry)
    lines += ["A `[classes.NAME]` table takes only:", "", *_key_table(STRUCTURE["class"])]
    lines += [
        "### A function's or layer's table",
        "",
        "`[functions.NAME]` and `[layers.NAME]` take these keys, and the settings that one function may set for "
        f"itself: {per_function}.",
        "",
    ]
    for key, entry in STRUCTURE["subject"].items():
        lines += _key_section(key, entry)
    lines += ["### An input", "", "An input written as a table takes these keys:", ""]
    lines += _key_table(STRUCTURE["input"])
    lines += ["```toml", "[functions.take_rows]"]
    lines += [
        "inputs = { params = { shape = [5, 2], low = -1.0, high = 1.0 }, "
        'indices = { shape = [4], distribution = "integer", high = 5 } }',
        "```",
        "",
    ]
    lines += [
        "### A value of `init` or `constants`",
        "",
        "A value is passed as it is (a number, a string, a list, a table as a dict), except two forms. "
        "`{ value = ..., variable = true }` is a `tf.Variable`, for code that insists on one:",
        "",
    ]
    lines += _key_table(STRUCTURE["variable"])
    lines += ['`{ import = "module:attribute" }` is a Python object, for an argument that is no tensor:', ""]
    lines += _key_table(STRUCTURE["import"])
    lines += [
        "```toml",
        "[functions.for_loop]",
        "inputs = { x = [8] }",
        'constants = { body_fn = { import = "my_project.bodies:step" }, scale = { value = 0.5, variable = true } }',
        "```",
        "",
    ]
    return "\n".join(lines)


def _key_section(key: str, entry: Key) -> list[str]:
    lines = [f"#### `{key}`", "", entry.meaning, "", f"- value: {entry.kind}", f"- default: {entry.default}", ""]
    return [*lines, "```toml", entry.example, "```", ""] if entry.example else lines


def _key_table(entries: dict[str, Key]) -> list[str]:
    rows = ["| key | value | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{key}` | {e.kind} | {e.default} | {e.meaning} |" for key, e in entries.items()]
    return [*rows, ""]


# -- command-line.md -----------------------------------------------------------------------------

#: Defaults of the options that are no row of the settings table, where click's default says nothing.
OPTION_DEFAULTS = {
    "config": "the nearest `gradcheck.toml`, or `pyproject.toml` with `[tool.gradcheck]`, from each file upwards",
    "shapes": "the config's",
    "dims": "the config's",
    "keyword": "every function",
    "shard": "every function",
    "changed_since": "every function",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table_setting(param: click.Parameter) -> Setting | None:
    """The row of the settings table an option was made from (``init``'s own ``-o`` is none)."""
    return BY_NAME.get(str(param.name)) if isinstance(param, GroupedOption) else None


def _option_default(param: click.Option, setting: Setting | None) -> str:
    if setting is not None:
        return default_words(setting)
    if param.name in OPTION_DEFAULTS:
        return OPTION_DEFAULTS[str(param.name)]
    if param.is_eager:  # --help
        return ""
    if param.is_flag and not param.count:
        return "off"
    if param.default not in (None, False, 0, ()) and not callable(param.default):
        return f"`{param.default}`"
    return ""


def command_block(name: str) -> Callable[[], str]:
    """The block of ``gradcheck NAME``: its usage, what it does, its options group by group."""

    def render() -> str:
        command = main.commands[name]
        parent = click.Context(main, info_name="gradcheck", **main.context_settings)
        ctx = click.Context(command, info_name=name, parent=parent)
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines = [f"`gradcheck {name} {usage}`", "", (command.help or "").strip(), ""]
        for group, params in option_groups(command, ctx):
            lines += [f"**{group}**", "", "| option | what it does | default | config key |", "|---|---|---|---|"]
            for param in params:
                assert isinstance(param, click.Option)
                record = param.get_help_record(ctx)
                if record is None:
                    continue
                setting = _table_setting(param)
                key = f"[`{setting.key}`](configuration.md#{setting.key})" if setting is not None else ""
                option = _cell(f"`{record[0]}`")
                lines.append(
                    f"| {option} | {_cell(param.help or '')} | {_cell(_option_default(param, setting))} | {key} |"
                )
            lines.append("")
        return "\n".join(lines)

    return render


# -- verdicts.md ---------------------------------------------------------------------------------

#: What each outcome of the decision table does, in words.
OUTCOMES = {
    Reconciled.JUDGED: "report what disagrees (possibly nothing)",
    Reconciled.REDRAW: "redraw the inputs",
    Reconciled.KINK: "report the disagreement, the hint asking whether the forward pass is differentiable",
    Reconciled.NATIVE_VOUCHES: "pass on native autodiff's word, with a note",
    Reconciled.UNRELIABLE: "report that no reference could judge",
}


def decision_block() -> str:
    """The decision table (``RECONCILE``): native and numeric evidence -> what happens, before and at the last draw."""
    rows = ["| native autodiff | finite differences | before the last draw | at the last draw |", "|---|---|---|---|"]
    for (native, numeric), (before, last) in RECONCILE.items():
        rows.append(
            f"| {native.value} | {numeric.value} | {OUTCOMES.get(before, before.value)} | "
            f"{OUTCOMES.get(last, last.value)} |"
        )
    return "\n".join(rows)


def tolerances_block() -> str:
    """The default tolerances and finite-difference step of each float dtype (``gradcheck.dtypes``)."""
    rows = [
        "| dtype | machine epsilon | step `eps` | native `rtol` | native `atol` | numeric `rtol` | numeric `atol` |",
        "|---|---|---|---|---|---|---|",
    ]
    for dtype in FLOATS:
        numbers = (dtype.epsilon, default_step(dtype.name), dtype.native_rtol, dtype.native_atol)
        numbers += (dtype.numeric_rtol, dtype.numeric_atol)
        rows.append(f"| `{dtype.name}` | " + " | ".join(f"{n:.2g}" for n in numbers) + " |")
    return "\n".join(rows)


# -- the pages -----------------------------------------------------------------------------------

PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "configuration.md": {"settings": settings_block, "tables": tables_block},
    "command-line.md": {name: command_block(name) for name in ("run", "list", "init")},
    "verdicts.md": {"decision": decision_block, "tolerances": tolerances_block},
}


def render_page(page: str, text: str) -> str:
    """``text`` (the page as it stands) with each generated block written anew; every block must be there."""
    blocks = PAGES[page]
    found = [match.group("name") for match in BLOCK.finditer(text)]
    missing = [name for name in blocks if name not in found]
    if missing:
        raise SystemExit(f"docs/{page}: no '<!-- generated: {missing[0]} -->' block")

    def fill(match: re.Match[str]) -> str:
        body = blocks[match.group("name")]().rstrip("\n") + "\n"
        return match.group(1) + "\n" + body + "\n" + match.group(4)

    return BLOCK.sub(fill, text)


def stale_pages(pages: Iterable[str] = PAGES) -> list[str]:
    """The pages whose committed text differs from what this script generates."""
    return [page for page in pages if render_page(page, _read(page)) != _read(page)]


def _read(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def main_(argv: list[str]) -> int:
    """Write the pages; with ``--check``, only say which differ (exit 1)."""
    if "--check" in argv:
        stale = stale_pages()
        for page in stale:
            print(f"docs/{page} differs from what tools/docs_reference.py generates: run it", file=sys.stderr)
        return 1 if stale else 0
    for page in PAGES:
        (DOCS / page).write_text(render_page(page, _read(page)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main_(sys.argv[1:]))
