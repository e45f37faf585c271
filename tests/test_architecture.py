"""The package's shape, as docs/architecture.md states it: imports run one way (each one its module's row
allows, of a row above), TensorFlow and click stay behind one module each, the library never prints or
exits, every module has its line in the map, and nothing is dead code (vulture, with the entry points of
tests/vulture_whitelist.py).

These read the source with the ast (no import of TensorFlow), so they run without it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "gradcheck"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imported(name: str, path: Path) -> Iterator[tuple[str, ast.AST]]:
    """Every module name an import statement of ``path`` names (type-checking and local imports too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                # ``from gradcheck import _tf`` imports the module _tf, not the package's __init__.
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in MODULES else base), node


def _graph() -> dict[str, set[str]]:
    """Edges between gradcheck's own modules."""
    return {
        name: {target for target, _ in _imported(name, path) if target in MODULES and target != name}
        for name, path in MODULES.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycles() -> None:
    assert _cycles(_graph()) == []


def test_a_cycle_is_found_where_there_is_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: The foundations: what they may import of gradcheck (nothing above them).
FOUNDATIONS = {
    "gradcheck.results": set(),
    "gradcheck.errors": set(),
    "gradcheck.tracebacks": set(),
    "gradcheck.arrays": set(),
    "gradcheck.dtypes": set(),
    "gradcheck.finite_differences": {"gradcheck.arrays", "gradcheck.dtypes"},
    "gradcheck.compare": {"gradcheck.arrays", "gradcheck.dtypes", "gradcheck.results"},
    "gradcheck.run": {"gradcheck.results"},
}


#: The TensorFlow package: ``_tf`` and its rooms, which import only each other and errors.
_TENSORFLOW = {name for name in MODULES if name == "gradcheck._tf" or name.startswith("gradcheck._tf.")}


@pytest.mark.parametrize("name", sorted(FOUNDATIONS))
def test_foundations_import_nothing_above_them(name: str) -> None:
    assert _graph()[name] <= FOUNDATIONS[name]


def test_the_tensorflow_package_imports_only_itself_and_errors() -> None:
    for name in _TENSORFLOW:
        assert _graph()[name] <= {"gradcheck.errors"} | _TENSORFLOW, name


def test_reporters_only_know_results_and_each_other() -> None:
    for name, targets in _graph().items():
        if name.startswith("gradcheck.reporting"):
            assert {t for t in targets if not t.startswith("gradcheck.reporting")} <= {"gradcheck.results"}, name


#: The command line: the ``cli`` package, the one place that imports click, prints and exits.
_COMMAND_LINE = {name for name in MODULES if name == "gradcheck.cli" or name.startswith("gradcheck.cli.")}


def test_nothing_below_the_command_line_imports_it_or_the_run() -> None:
    top = {"gradcheck.__main__", "gradcheck.pytest_plugin", *_COMMAND_LINE}
    for name, targets in _graph().items():
        if name not in top:
            assert not targets & top, name


def _third_party(prefix: str) -> set[str]:
    return {
        name
        for name, path in MODULES.items()
        for target, _ in _imported(name, path)
        if target == prefix or target.startswith(prefix + ".")
    }


def test_tensorflow_is_imported_by_one_module() -> None:
    assert _third_party("tensorflow") | _third_party("keras") <= _TENSORFLOW


def test_click_is_imported_by_the_command_line_only() -> None:
    assert _third_party("click") <= _COMMAND_LINE


def test_the_library_never_prints_or_exits() -> None:
    offenders = []
    for name, path in MODULES.items():
        if name in {"gradcheck.__main__", *_COMMAND_LINE}:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            # The worker's child process ends itself when its parent is gone; nothing else may.
            allowed = {"os._exit"} if name == "gradcheck.worker.server" else set()
            if called in {"print", "sys.exit", "exit", "quit", "os._exit"} - allowed:
                offenders.append(f"{name}: {called}")
    assert offenders == []


def test_the_architecture_page_has_a_line_for_every_module() -> None:
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for path in MODULES.values():
        # A subpackage has its row (`checking/`), and each of its modules is named in it (`audit.py`).
        if path.name == "__init__.py" and path.parent != PACKAGE:
            shown = path.parent.relative_to(PACKAGE).as_posix() + "/"
        else:
            shown = path.name
        assert f"`{shown}`" in page, shown


def _room(module: str) -> str:
    """The row of docs/architecture.md a module answers to: its subpackage's (``checking/``), else its file's."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__.py"
    return f"{parts[0]}/" if len(parts) > 1 or PACKAGE.joinpath(parts[0]).is_dir() else f"{parts[0]}.py"


def _table() -> dict[str, str]:
    """The modules table, row by row in its order (bottom layer first): a module's row -> what it may import."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| .* \| ([^|]*) \|$", page, re.MULTILINE)}


def _table_breaches(graph: dict[str, set[str]], table: dict[str, str]) -> list[str]:
    """Imports the table does not allow: of a room its row does not name, or of a room whose row is below."""
    order = list(table)
    found = []
    for name, targets in sorted(graph.items()):
        room = _room(name)
        allowed = table[room].strip()
        named = {word.strip() for word in re.sub(r"\s*\([^)]*\)", "", allowed).split(",")}
        for target in sorted(targets):
            other = _room(target)
            if other == room:
                continue
            if order.index(other) > order.index(room):
                found.append(f"{name} imports {target}, whose row is below its own")
            elif (
                allowed not in ("everything", "everything above") and other.rstrip("/").removesuffix(".py") not in named
            ):
                found.append(f"{name} imports {target}, which its row ({allowed}) does not name")
    return found


def test_every_import_is_one_the_architecture_page_allows() -> None:
    table = _table()
    assert {_room(name) for name in MODULES} <= set(table)
    assert _table_breaches(_graph(), table) == []


def test_an_import_the_page_does_not_allow_is_found() -> None:
    table = {
        "results.py": "nothing",
        "inputs.py": "results, dtypes",
        "checking/": "everything above",
        "cli/": "everything",
    }
    graph = {
        "gradcheck.results": {"gradcheck.inputs"},
        "gradcheck.inputs": {"gradcheck.results", "gradcheck.checking.build"},
        "gradcheck.checking.build": {"gradcheck.inputs", "gradcheck.checking.draws"},
        "gradcheck.cli": {"gradcheck.checking"},
    }
    assert _table_breaches(graph, table) == [
        "gradcheck.inputs imports gradcheck.checking.build, whose row is below its own",
        "gradcheck.results imports gradcheck.inputs, whose row is below its own",
    ]
    table["inputs.py"] = "dtypes"
    graph["gradcheck.results"], graph["gradcheck.inputs"] = set(), {"gradcheck.results"}
    assert _table_breaches(graph, table) == [
        "gradcheck.inputs imports gradcheck.results, which its row (dtypes) does not name"
    ]


def test_the_version_literal_is_written_once() -> None:
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    holders = [path for path in MODULES.values() if f'"{version.group(1)}"' in path.read_text(encoding="utf-8")]
    assert holders == []


WHITELIST = REPO / "tests" / "vulture_whitelist.py"


def test_vulture_finds_no_dead_code_beyond_the_entry_points() -> None:
    command = [sys.executable, "-m", "vulture", "gradcheck", str(WHITELIST.relative_to(REPO)), "--min-confidence", "60"]
    found = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (found.returncode, found.stdout, found.stderr) == (0, "", ""), found.stdout + found.stderr


def test_every_whitelisted_entry_point_still_exists() -> None:
    # Importing the whitelist reads each entry: one renamed or removed in gradcheck raises here.
    from tests import vulture_whitelist

    assert all(entry is not None for entry in vulture_whitelist._ENTRY_POINTS)


#: The sizes a reader can hold in mind: lines of a module, a class, a function (docstring included).
LIMITS = {"module": 500, "class": 300, "function": 60}


def _oversized(name: str, text: str) -> list[str]:
    found = [f"{name}: {text.count(chr(10))} lines"] if text.count("\n") > LIMITS["module"] else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > LIMITS[kind]:
                found.append(f"{name}.{node.name}: a {kind} of {length} lines")
    return found


def test_no_module_class_or_function_is_over_its_limit() -> None:
    offenders = [line for name, path in MODULES.items() for line in _oversized(name, path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_an_oversized_function_is_found() -> None:
    long_function = "def f():\n" + "    x = 1\n" * 60
    assert _oversized("m", long_function) == ["m.f: a function of 61 lines"]
    assert _oversized("m", "def f():\n" + "    x = 1\n" * 59) == []


def _private_uses(name: str, path: Path) -> list[str]:
    """Another gradcheck module's ``_name``, imported or read as ``module._name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: set[str] = set()  # local names bound to gradcheck modules
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gradcheck"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in MODULES:
                    modules.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and node.module != name:
                    found.append(f"{name}: imports {target}")
        elif isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name for alias in node.names if alias.name.startswith("gradcheck"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner in modules:
                found.append(f"{name}: reads {owner}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    # The _tf package aside: it is where TensorFlow's own private names are read, and its rooms share them.
    offenders = [
        line for name, path in MODULES.items() if name not in _TENSORFLOW for line in _private_uses(name, path)
    ]
    assert offenders == []


def test_a_private_name_used_across_modules_is_found(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text("from gradcheck.walk import _hidden\nfrom gradcheck import walk\nwalk._other()\n", encoding="utf-8")
    assert _private_uses("gradcheck.user", user) == [
        "gradcheck.user: imports gradcheck.walk._hidden",
        "gradcheck.user: reads walk._other",
    ]


#: How many ``type: ignore`` comments gradcheck may hold: each is a place the types could not say what is true.
MAX_TYPE_IGNORES = 10


def test_mypy_passes_on_the_package() -> None:
    # pyproject.toml's [tool.mypy] says what is checked and how; the cache keeps a second run quick.
    command = [sys.executable, "-m", "mypy", "--no-error-summary", "gradcheck"]
    found = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert (found.returncode, found.stdout) == (0, ""), found.stdout + found.stderr
    ignores = sum(path.read_text(encoding="utf-8").count("type: ignore") for path in MODULES.values())
    assert ignores <= MAX_TYPE_IGNORES


#: What names a kind of subject: a test of one of these outside gradcheck.kinds is an if-chain on the kind.
_KIND_WORDS = {
    "function",
    "layer",
    "method",
    "staticmethod",
    "classmethod",
    "wrapper",
    "nested",
    "product",
    "registered",
}
#: The kinds' classes (gradcheck/kinds/): an isinstance of one is a test of the kind.
_KIND_CLASSES = {
    "Function",
    "Product",
    "StaticMethod",
    "ClassMethod",
    "Method",
    "Wrapper",
    "Layer",
    "Nested",
    "Registered",
}
#: Where a subject's kind may be decided on: the kinds themselves, and discovery, which chooses them.
_KIND_DECIDERS = {"gradcheck.kinds", "gradcheck.subjects"}


def _names_a_kind(node: ast.AST) -> bool:
    """A string (or a tuple of strings) that is a kind's name: ``"layer"``, ``("method", "nested layer")``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(" ", 1)[0] in _KIND_WORDS
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_kind(e) for e in node.elts)


def _kind_of(node: ast.AST) -> bool:
    """``X.kind`` or ``X.kind.name``: a kind, or a kind's name."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "kind"


def _of_a_subject(node: ast.AST) -> bool:
    """``subject.kind`` (``request.subject.kind.name``...): the kind of something named a subject."""
    return _kind_of(node) and ast.unparse(node).split(".kind")[0].endswith("subject")


def _kind_tests(name: str, path: Path) -> list[str]:
    """Where a module decides by a subject's kind instead of asking its kind (:mod:`gradcheck.kinds`)."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("binding", "reaching", "explicit"):
            if node.attr != "explicit" or ast.unparse(node.value).endswith("subject"):
                found.append((node.lineno, node.col_offset, f"reads {ast.unparse(node)}"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = any(_kind_of(o) for o in operands) and any(_names_a_kind(o) for o in operands)
            if named or any(_of_a_subject(o) for o in operands):
                found.append((node.lineno, node.col_offset, f"tests {ast.unparse(node)}"))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and _kind_of(node.args[0]):
            classes = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if _of_a_subject(node.args[0]) or classes & _KIND_CLASSES:
                found.append((node.lineno, node.col_offset, f"tests {ast.unparse(node)}"))
    return [f"{name}:{line}: {what}" for line, _, what in sorted(found)]


def test_only_the_kinds_decide_by_a_subjects_kind() -> None:
    offenders = [
        line
        for name, path in MODULES.items()
        if not any(name == d or name.startswith(d + ".") for d in _KIND_DECIDERS)
        for line in _kind_tests(name, path)
    ]
    assert offenders == []


def test_a_decision_by_a_subjects_kind_is_found(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(
        "if subject.kind == 'layer' or request.subject.reaching:\n"
        "    pass\n"
        "named = entry.kind.name in ('method', 'nested layer')\n"
        "mine = isinstance(s.kind, Layer) or target.explicit or request.subject.explicit\n"
        "fine = source.kind == 'variable' or subject.kind.table == 'layers'\n",
        encoding="utf-8",
    )
    assert _kind_tests("gradcheck.user", user) == [
        "gradcheck.user:1: tests subject.kind == 'layer'",
        "gradcheck.user:1: reads request.subject.reaching",
        "gradcheck.user:3: tests entry.kind.name in ('method', 'nested layer')",
        "gradcheck.user:4: tests isinstance(s.kind, Layer)",
        "gradcheck.user:4: reads request.subject.explicit",
    ]
