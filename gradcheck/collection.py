"""Collection: every target imported once, its functions and layers found, each with its config.

Each file gets the config found from its own folder upwards (or ``-c``).
A file that a directory or package walk brought in and that fails to
import or cannot be read is a ``module`` result, and collection goes on;
``-k``, ``--changed-since`` and ``--shard`` then narrow what was found
(:mod:`gradcheck.selection`). Config tables that name nothing defined are
errors (a misspelt name).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcheck import _tf, selection, state
from gradcheck.config import Config, closest
from gradcheck.config_files import config_file_for, read_config_file
from gradcheck.discovery import Target, find_definition, resolve_target
from gradcheck.errors import ConfigError
from gradcheck.importing import ImportFailure, import_root, load_module
from gradcheck.options import RunOptions
from gradcheck.paths import display_path
from gradcheck.results import Collection, Problem, Result, split_id
from gradcheck.subjects import Subject, find_subjects, select


@dataclass(frozen=True)
class CollectedCheck:
    """One function found, with the config that applies to it."""

    subject: Subject
    config: Config
    module_state: state.Snapshot | None = None
    """What the module's import left (seeds, switches, directory), applied again for its checks."""


def _config_for(location: Path, options: RunOptions, cache: dict[Path | None, Config]) -> Config:
    """The config that applies to a file, read once per run.

    A file outside the current folder (an installed package's, named by its
    dotted name) takes the current folder's config: the project checking it.
    """
    cwd = Path.cwd().resolve()
    resolved = location.resolve()
    if resolved.exists() and resolved != cwd and cwd not in resolved.parents:
        location = cwd
    path = config_file_for(location, options.config_path)
    if path not in cache:
        cache[path] = read_config_file(path, options.dims) if path is not None else Config(dims=dict(options.dims))
    return cache[path]


def import_isolated(file: Path, base: Path | None = None) -> tuple[Any, state.Snapshot]:
    """Import a user's file; return the module and the state its import left, with the state put back.

    Module-level code may seed random generators, flip TensorFlow's switches
    or change directory; none of that may reach the next module, so it is
    undone here and kept in the snapshot, which the module's own checks apply.
    ``base`` is the root of the walk that found the file (see :func:`load_module`).
    """
    roots = [import_root(file, base)]
    with state.preserved(roots):
        module = load_module(file, base)
        return module, state.capture(roots)


@dataclass(frozen=True)
class Collected:
    """What collection found: the checks to run, the modules that could not be imported, and a summary."""

    checks: list[CollectedCheck]
    """One per function or layer, in order."""
    module_results: tuple[Result, ...] = ()
    """An ``error`` result (``kind = "module"``) for each file of a walk that failed to import or be read."""
    summary: Collection = field(default_factory=Collection)
    """Files scanned, imported, excluded and failed, for the report's header."""


def module_failure(
    path: Path, reason: str, hint: str, line: int | None = None, error: BaseException | None = None
) -> Result:
    """The result of a file a walk brought in that could not be imported or read (``-v`` shows the traceback)."""
    # Not resolved: a dangling link is reported under its own name, not its target's.
    shown = display_path(path, resolve=False)
    where = f"{shown}:{line}" if line else shown
    details = "".join(traceback.format_exception(error)) if error is not None else None
    return Result(
        id=shown,
        name=path.stem if path.name != "__init__.py" else path.parent.name,
        kind="module",
        status="error",
        problems=(Problem("import", None, f"{where}: {reason}", hint=hint, traceback=details),),
        path=shown,
        line=line,
    )


def _exclude_hint(path: Path, what: str, names_root: Path | None = None) -> str:
    shown = display_path(path, resolve=False)
    if os.path.isabs(shown) and names_root is not None:
        # An installed package's file: a glob below the folder its package sits in matches it too.
        with contextlib.suppress(ValueError):
            shown = Path(os.path.abspath(path)).relative_to(names_root).as_posix()
    return f'{what}, or leave the file out of the walk: exclude = ["{shown}"] in the config, or --exclude {shown}'


def collect(
    options: RunOptions, read_configs: bool = True, on_import: Callable[[str], None] | None = None
) -> Collected:
    """Import every target and find its functions; raise a UsageError for bad input.

    Each file gets the config found from its own folder upwards (or ``-c``),
    so a directory of packages with their own configs checks as a whole.
    ``read_configs=False`` gives every function the empty config (``gradcheck
    init`` writes a config from scratch, whatever is there already).
    ``on_import`` hears of each file just before it is imported (the worker
    tells its parent, which bounds the import's time). A file that a
    directory or package walk brought in and that fails to import is a
    ``module`` result, and collection goes on; a file named on the command
    line that fails to import is a usage error.
    """
    _tf.tensorflow()
    cache: dict[Path | None, Config] = {}

    def config_for(location: Path) -> Config:
        if not read_configs:
            return cache.setdefault(None, Config(dims=dict(options.dims)))
        return _config_for(location, options, cache)

    targets = [(spec, resolve_target(spec, options.exclusions)) for spec in options.targets]
    modules = _Modules(config_for, on_import, _selectors(targets), _unreadable_results(targets))
    checks: list[CollectedCheck] = []
    collected_ids: set[str] = set()
    for spec, target in targets:
        if not target.files:
            config_for(Path(split_id(spec)[0]))
        found_here = modules.checks_of_target(target)
        if target.selector is not None:
            chosen = {s.id for s in select([p.subject for p in found_here], target.selector, spec)}
            found_here = [p for p in found_here if p.subject.id in chosen]
        for item in found_here:
            if item.subject.id not in collected_ids:
                collected_ids.add(item.subject.id)
                checks.append(item)
    for path, config in cache.items():
        _check_config_names(config, modules.found_by_config.get(path, []))
    checks, module_results = _narrowed(options, checks, list(modules.failures.values()))
    return Collected(checks, tuple(module_results), _summary(targets, modules.imported, modules.failures))


def _selectors(targets: list[tuple[str, Any]]) -> dict[Path, set[str]]:
    """Every ``::NAME`` given for a file, by resolved path: each names a subject of it, even one that
    reaches no custom gradient."""
    selected: dict[Path, set[str]] = {}
    for _, target in targets:
        for file in target.files:
            if target.selector is not None:
                selected.setdefault(file.resolve(), set()).add(target.selector)
    return selected


class _Modules:
    """The files imported so far, each once however many targets name it (``ops.py::a ops.py::b``)."""

    def __init__(
        self,
        config_for: Callable[[Path], Config],
        on_import: Callable[[str], None] | None,
        selected: dict[Path, set[str]],
        failures: dict[Path, Result],
    ) -> None:
        self.config_for = config_for
        self.on_import = on_import
        self.selected = selected
        self.failures = failures
        """The module results of the files that could not be read or imported, by resolved path."""
        self.imported: dict[Path, list[CollectedCheck]] = {}
        """The checks of each file imported, by resolved path."""
        self.found_by_config: dict[Path | None, list[Subject]] = {}
        """The subjects found, by the path of the config that applies to them."""

    def checks_of_target(self, target: Target) -> list[CollectedCheck]:
        """The checks of a target's files, each file imported the first time a target names it."""
        found: list[CollectedCheck] = []
        # A walk's files import by their names below its root (site-packages for an installed package).
        base = target.walks[0].names_root if target.walks else None
        for file in target.files:
            resolved = file.resolve()
            if resolved in self.failures:
                continue
            if resolved not in self.imported:
                checks = self._checks_of(file, resolved, target.explicit, base)
                if checks is None:
                    continue
                self.imported[resolved] = checks
            found.extend(self.imported[resolved])
        return found

    def _checks_of(self, file: Path, resolved: Path, explicit: bool, base: Path | None) -> list[CollectedCheck] | None:
        """Import one file and find its subjects; None where a walk's file failed to import (its module result)."""
        config = self.config_for(file)
        if self.on_import is not None:
            self.on_import(display_path(file))
        try:
            module, module_state = import_isolated(file, base)
        except ImportFailure as failure:
            if explicit:
                raise
            what = f"install {failure.missing}" if failure.missing else failure.hint
            self.failures[resolved] = module_failure(
                file, failure.reason, _exclude_hint(file, what, base), failure.line, failure.__cause__
            )
            return None
        named = {*config.functions, *config.layers, *self.selected.get(resolved, set())}
        found = find_subjects(module, file, named)
        self.found_by_config.setdefault(config.path, []).extend(found)
        return [CollectedCheck(subject, config, module_state) for subject in found]


def _unreadable_results(targets: list[tuple[str, Any]]) -> dict[Path, Result]:
    """A module result for each file a walk could not read, by resolved path."""
    failures: dict[Path, Result] = {}
    for _, target in targets:
        for found in target.walks:
            for unreadable in found.unreadable:
                hint = _exclude_hint(unreadable.path, "make it readable")
                failures.setdefault(
                    unreadable.path.resolve(),
                    module_failure(unreadable.path, f"cannot be read: {unreadable.reason}", hint),
                )
    return failures


def _narrowed(
    options: RunOptions, checks: list[CollectedCheck], module_results: list[Result]
) -> tuple[list[CollectedCheck], list[Result]]:
    """``-k``, ``--changed-since`` and ``--shard`` applied; module results by their file and id alike."""
    if options.keyword:
        checks = [p for p in checks if options.keyword in p.subject.id]
    if options.changed is not None and options.changed_root is not None:
        paths = {Path(p.subject.path) for p in checks} | {Path(str(r.path)) for r in module_results}
        chosen = selection.affected(paths, options.changed, options.changed_root)
        checks = [p for p in checks if Path(p.subject.path).resolve() in chosen]
        module_results = [r for r in module_results if Path(str(r.path)).resolve() in chosen]
    if options.shard is not None:
        checks = [p for p in checks if selection.in_shard(p.subject.id, options.shard)]
        module_results = [r for r in module_results if selection.in_shard(r.id, options.shard)]
    return checks, module_results


def _summary(targets: list[tuple[str, Any]], imported: dict[Path, Any], failures: dict[Path, Result]) -> Collection:
    """The collection line of the report: what the walks read and left out, what was imported and failed."""
    walks = [found for _, target in targets for found in target.walks]

    def shown(paths: Any) -> tuple[str, ...]:
        return tuple(dict.fromkeys(display_path(path, resolve=False) for path in paths))

    return Collection(
        scanned=shown(path for found in walks for path in found.scanned),
        imported=shown(imported),
        excluded=shown(path for found in walks for path in found.excluded),
        failed=tuple(result.id for result in failures.values()),
        not_regular=shown(path for found in walks for path in found.not_regular),
    )


def _check_config_names(config: Config, subjects: list[Subject]) -> None:
    """A config table naming a function that is defined nowhere is an error (a misspelt name).

    Names are looked for among the targets, then (without importing) in the
    Python files below the config's folder, so that one config shared by
    several modules still lets a run check one of them.
    """
    for kind, table in (("function", config.functions), ("layer", config.layers)):
        defined = [s.name for s in subjects if s.kind.reported == kind]
        defined += [alias for s in subjects if s.kind.reported == kind for alias in s.aliases]
        for name in table:
            if name in defined:
                continue
            if config.path is not None and find_definition(config.path.parent, name) is not None:
                continue
            plural = "functions" if kind == "function" else "layers"
            known = f"; the targets define {', '.join(defined)}" if defined else ""
            raise ConfigError(
                f"{config.label}: {plural}.{name}: no {kind} named '{name}' in the targets"
                f"{closest(name, defined)}{known}"
            )
    owners = sorted({s.name.split(".", 1)[0] for s in subjects if s.kind.shares_class_table})
    for name in config.classes:
        if name in owners or (config.path is not None and find_definition(config.path.parent, name) is not None):
            continue
        known = f"; the targets' classes with checked methods are {', '.join(owners)}" if owners else ""
        raise ConfigError(
            f"{config.label}: classes.{name}: no class named '{name}' with checked methods in the targets"
            f"{closest(name, owners)}{known}"
        )
