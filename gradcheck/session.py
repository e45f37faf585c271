"""A whole run: targets -> config -> discovery -> one check per function -> a report.

The command line and the pytest plugin both drive runs through here; nothing
in this module prints. Progress reaches the caller through ``on_result``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gradcheck import _tf, selection, state
from gradcheck.checking import CheckRequest, check_subject, guess_shapes
from gradcheck.config import Config, ImportValue, Settings, SubjectConfig, closest, merged_settings
from gradcheck.config_files import CONFIG_FILE, PROJECT_ROOT_MARKERS, find_config_file, read_config_file
from gradcheck.discovery import find_definition, resolve_target
from gradcheck.errors import ConfigError, TargetError, UsageError
from gradcheck.importing import ImportFailure, import_object, import_root, load_module
from gradcheck.inputs import Argument, CallPlan
from gradcheck.paths import display_path
from gradcheck.results import DEFAULT_FAIL_ON, Collection, Problem, Result, RunReport
from gradcheck.run import check_all
from gradcheck.settings import BY_NAME, DEFAULT_TIMEOUT, FUNCTION, RUN_SETTINGS, TABLE, resolve
from gradcheck.subjects import Subject, find_subjects, select
from gradcheck.walk import Exclusion


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for: targets and the options that override the config."""

    targets: tuple[str, ...]
    """Files, directories or module names, each with an optional ``::NAME``."""
    config_path: Path | None = None
    """``-c``: the config file to use instead of searching for one."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Settings given on the command line; they win over the config."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """``--dim`` values; they win over ``[dims]``."""
    shapes: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    """``--shape`` values, by input name."""
    keyword: str | None = None
    """``-k``: keep only functions whose id contains this."""
    fail_on: tuple[str, ...] | None = None
    """``--fail-on``: the statuses that fail the run; None: failed and error (``--strict`` adds skipped)."""
    maxfail: int | None = None
    """``--maxfail``: stop after this many results whose status is in ``fail_on``."""
    max_memory: int | None = None
    """``--max-memory``: megabytes the worker process may hold; None: the default, 0: no limit."""
    format: str = "text"
    """The config's ``format``: the report's, unless the command line names its own."""
    output: Path | None = None
    """The config's ``output``: where the report goes, unless the command line names its own."""
    jobs: int | str = 1
    """``-j``: how many worker processes check functions at once; ``auto``: one per usable core."""
    timeout: float = DEFAULT_TIMEOUT
    """The run's top-level ``timeout`` (command line, else config): it bounds each module's import."""
    shard: tuple[int, int] | None = None
    """``--shard K/N``: keep only the functions in shard K of N (see :mod:`gradcheck.selection`)."""
    changed: frozenset[Path] | None = None
    """``--changed-since``: the changed files; keep only functions whose module is or imports one."""
    changed_root: Path | None = None
    """The git repository those files are in; imports are followed inside it only."""
    exclusions: tuple[Exclusion, ...] = ()
    """``--exclude`` (relative to the current folder) and the config's ``exclude`` (relative to its folder)."""


def run_options(
    targets: tuple[str, ...],
    *,
    config_path: Path | None = None,
    given: Mapping[str, Any] | None = None,
    dims: Mapping[str, int] | None = None,
    shapes: Mapping[str, tuple[int | str, ...]] | None = None,
    keyword: str | None = None,
    narrowing: Mapping[str, Any] | None = None,
) -> RunOptions:
    """The options of a run, resolved once: ``given`` (the command line) wins over the config, then the defaults.

    ``given`` holds settings by name, None where not given. The run-level
    ones (``fail_on``, ``maxfail``, ``max_memory``, ``format``, ``output``) and
    the top-level ``timeout`` come from the first target's config, read here
    without TensorFlow; the others stay overrides that each function's
    settings are merged with. ``narrowing`` holds the ``shard``, ``changed``
    and ``changed_root`` fields of ``--shard`` and ``--changed-since``.
    """
    given = {name: value for name, value in (given or {}).items() if value is not None}
    overrides = {name: value for name, value in given.items() if BY_NAME[name].scope == FUNCTION}
    dims = dict(dims or {})
    path = _config_path(Path(targets[0].partition("::")[0]), config_path) if targets else None
    config = read_config_file(path, dims) if path is not None else Config(dims=dims)
    run_values = resolve(given, config.report, RUN_SETTINGS)
    if run_values["output"] is not None:
        run_values["output"] = Path(run_values["output"])
    # Both apply, each relative to where it was written: the flag's to here, the config's to its folder.
    run_values.pop("exclude")
    exclusions = tuple(Exclusion(pattern, Path.cwd()) for pattern in given.get("exclude", ()))
    if path is not None:
        exclusions += tuple(
            Exclusion(pattern, path.resolve().parent, str(path)) for pattern in config.report.get("exclude", ())
        )
    return RunOptions(
        targets=targets,
        config_path=config_path,
        overrides=overrides,
        dims=dims,
        shapes=dict(shapes or {}),
        keyword=keyword,
        timeout=merged_settings(config, None, overrides).timeout,
        exclusions=exclusions,
        **run_values,
        **(narrowing or {}),
    )


@dataclass(frozen=True)
class PlannedCheck:
    """One function found, with the config that applies to it."""

    subject: Subject
    config: Config
    module_state: state.Snapshot | None = None
    """What the module's import left (seeds, switches, directory), applied again for its checks."""


def _config_path(location: Path, config_path: Path | None) -> Path | None:
    """The config file that applies to a target: ``-c``, else the nearest one above it."""
    if config_path is not None:
        return config_path
    return find_config_file(location if location.exists() else Path.cwd())


def _config_for(location: Path, options: RunOptions, cache: dict[Path | None, Config]) -> Config:
    """The config that applies to a file, read once per run.

    A file outside the current folder (an installed package's, named by its
    dotted name) takes the current folder's config: the project checking it.
    """
    cwd = Path.cwd().resolve()
    resolved = location.resolve()
    if resolved.exists() and resolved != cwd and cwd not in resolved.parents:
        location = cwd
    path = _config_path(location, options.config_path)
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

    planned: list[PlannedCheck]
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

    planned: list[PlannedCheck] = []
    planned_ids: set[str] = set()
    found_by_config: dict[Path | None, list[Subject]] = {}
    # Each file is imported once, however many targets name it (ops.py::a ops.py::b).
    imported: dict[Path, list[PlannedCheck]] = {}
    targets = [(spec, resolve_target(spec, options.exclusions)) for spec in options.targets]
    # Every ::NAME given for a file names a subject of it, even one that reaches no custom gradient.
    selected: dict[Path, set[str]] = {}
    for _, target in targets:
        for file in target.files:
            if target.selector is not None:
                selected.setdefault(file.resolve(), set()).add(target.selector)
    failures: dict[Path, Result] = _unreadable_results(targets)
    for spec, target in targets:
        if not target.files:
            config_for(Path(spec.partition("::")[0]))
        found_here: list[PlannedCheck] = []
        # A walk's files import by their names below its root (site-packages for an installed package).
        base = target.walks[0].names_root if target.walks else None
        for file in target.files:
            resolved = file.resolve()
            if resolved in failures:
                continue
            if resolved not in imported:
                config = config_for(file)
                if on_import is not None:
                    on_import(display_path(file))
                try:
                    module, module_state = import_isolated(file, base)
                except ImportFailure as failure:
                    if target.explicit:
                        raise
                    what = f"install {failure.missing}" if failure.missing else failure.hint
                    failures[resolved] = module_failure(
                        file, failure.reason, _exclude_hint(file, what, base), failure.line, failure.__cause__
                    )
                    continue
                named = {*config.functions, *config.layers, *selected.get(resolved, set())}
                found = find_subjects(module, file, named)
                found_by_config.setdefault(config.path, []).extend(found)
                imported[resolved] = [PlannedCheck(subject, config, module_state) for subject in found]
            found_here.extend(imported[resolved])
        if target.selector is not None:
            chosen = {s.id for s in select([p.subject for p in found_here], target.selector, spec)}
            found_here = [p for p in found_here if p.subject.id in chosen]
        for item in found_here:
            if item.subject.id not in planned_ids:
                planned_ids.add(item.subject.id)
                planned.append(item)
    for path, config in cache.items():
        _check_config_names(config, found_by_config.get(path, []))
    planned, module_results = _narrowed(options, planned, list(failures.values()))
    return Collected(planned, tuple(module_results), _summary(targets, imported, failures))


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
    options: RunOptions, planned: list[PlannedCheck], module_results: list[Result]
) -> tuple[list[PlannedCheck], list[Result]]:
    """``-k``, ``--changed-since`` and ``--shard`` applied; module results by their file and id alike."""
    if options.keyword:
        planned = [p for p in planned if options.keyword in p.subject.id]
    if options.changed is not None and options.changed_root is not None:
        paths = {Path(p.subject.path) for p in planned} | {Path(str(r.path)) for r in module_results}
        chosen = selection.affected(paths, options.changed, options.changed_root)
        planned = [p for p in planned if Path(p.subject.path).resolve() in chosen]
        module_results = [r for r in module_results if Path(str(r.path)).resolve() in chosen]
    if options.shard is not None:
        planned = [p for p in planned if selection.in_shard(p.subject.id, options.shard)]
        module_results = [r for r in module_results if selection.in_shard(r.id, options.shard)]
    return planned, module_results


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
        defined = [s.name for s in subjects if s.kind == kind]
        defined += [alias for s in subjects if s.kind == kind for alias in s.aliases]
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
    owners = sorted({s.name.split(".", 1)[0] for s in subjects if s.kind == "function" and "." in s.name})
    for name in config.classes:
        if name in owners or (config.path is not None and find_definition(config.path.parent, name) is not None):
            continue
        known = f"; the targets' classes with checked methods are {', '.join(owners)}" if owners else ""
        raise ConfigError(
            f"{config.label}: classes.{name}: no class named '{name}' with checked methods in the targets"
            f"{closest(name, owners)}{known}"
        )


#: The order in which the reproduce command names settings (the seed first, as ever).
_REPRODUCE_ORDER = ("always", "given", "set")


def reproduce_command(subject: Subject, settings: Settings, options: RunOptions) -> str:
    """The command line that checks this one function again with the same draws.

    Which settings it names is the settings table's ``reproduce`` column.
    """
    parts = ["gradcheck", "run", subject.id]
    rows = sorted(
        (s for s in TABLE if s.reproduce in _REPRODUCE_ORDER), key=lambda s: _REPRODUCE_ORDER.index(s.reproduce)
    )
    for setting in rows:
        value = getattr(settings, setting.name)
        if setting.reproduce == "set" and value:
            parts.append(str(setting.long_flag))
        elif setting.reproduce == "always" or (
            setting.reproduce == "given" and setting.name in options.overrides and value != setting.default
        ):
            parts += [str(setting.long_flag), str(value)]
    if options.config_path is not None:
        parts += ["-c", str(options.config_path)]
    for name, size in options.dims.items():
        parts += ["--dim", f"{name}={size}"]
    for name, shape in options.shapes.items():
        parts += ["--shape", f"{name}={','.join(map(str, shape))}"]
    # Paths and names come from the user: quote each word so the line reproduces as shown.
    return shlex.join(parts)


def request_for(planned: PlannedCheck, options: RunOptions) -> CheckRequest:
    """The check request for one function: its merged settings, config table and dims."""
    subject, config = planned.subject, planned.config
    return build_request(
        subject,
        config,
        options.overrides,
        given_by="command line",
        table=_subject_table(config, subject),
        shapes=options.shapes,
        config_label=config.label if config.path is not None else "gradcheck.toml",
        reproduce=lambda settings: reproduce_command(subject, settings, options),
        module_state=planned.module_state,
    )


def _subject_table(config: Config, subject: Subject) -> SubjectConfig | None:
    """The subject's config table, under its name or, failing that, one of its aliases."""
    for name in (subject.name, *subject.aliases):
        table = config.subject(subject.kind, name)
        if table is not None:
            return table
    return None


def build_request(
    subject: Subject,
    config: Config,
    given: Mapping[str, Any],
    *,
    given_by: str,
    table: SubjectConfig | None,
    config_label: str,
    reproduce: Callable[[Settings], str],
    shapes: Mapping[str, tuple[int | str, ...]] | None = None,
    module_state: state.Snapshot | None = None,
) -> CheckRequest:
    """The one way a check request is made, for ``gradcheck run`` and ``gradcheck.check`` alike.

    ``given`` holds the settings given by name (validated already) and wins
    over ``table`` (the function's own config table), which wins over the
    config's top level. ``given_by`` is ``command line`` or
    ``gradcheck.check()``: messages name a given setting as it was written
    there. ``reproduce`` makes the reproduce command from the merged settings.
    """
    settings = merged_settings(config, table, given)
    if settings.device == "gpu" and not _tf.gpu_available():
        raise UsageError(_no_gpu_message(given, given_by, config.label))
    return CheckRequest(
        subject=subject,
        settings=settings,
        config=_with_imports(table, subject),
        dims=config.dims,
        shape_overrides=shapes or {},
        config_label=config_label,
        reproduce=reproduce(settings),
        dtype_given="dtype" in given or "dtype" in config.settings or bool(table and "dtype" in table.settings),
        module_state=module_state,
    )


def _with_imports(table: SubjectConfig | None, subject: Subject) -> SubjectConfig | None:
    """The table with each ``{ import = "module:attribute" }`` value replaced by the object it names.

    Imported here, as the request is made, so that a module or attribute that
    is not there is a usage error (exit 2) naming the config file and key
    before any check runs, never an error result of the user's function.
    """
    if table is None or not any(isinstance(v, ImportValue) for v in (*table.constants.values(), *table.init.values())):
        return table
    target = Path(subject.module.__file__) if getattr(subject.module, "__file__", None) else Path(subject.path)
    target = target if target.is_file() else None
    roots = [import_root(target)] if target is not None else []

    def resolved(values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: import_object(v, target) if isinstance(v, ImportValue) else v for k, v in values.items()}

    # What the imported module's own code sets (seeds, switches) must not reach the checks.
    with state.preserved(roots):
        return replace(table, constants=resolved(table.constants), init=resolved(table.init))


def _no_gpu_message(given: Mapping[str, Any], given_by: str, config_label: str) -> str:
    """``device = gpu`` on a machine without one, named as the user wrote it."""
    device = BY_NAME["device"]
    way = "flag" if given_by == "command line" else "keyword"
    if "device" not in given:
        given_by, way = config_label, "key"
    where = "" if way == "flag" else f"{given_by}: "
    return (
        f"{where}{device.phrase('gpu', way)}: TensorFlow sees no GPU on this machine "
        f"(tf.config.list_physical_devices('GPU') is empty); use {device.phrase('cpu', way)}, "
        f"or {device.phrase('auto', way)} to take the GPU only where there is one"
    )


def refuse_user_file(output: Path, options: RunOptions) -> None:
    """The report must never overwrite the user's module or any config the run reads.

    A folder's files each read the config nearest to them, which may sit in
    any folder below the target, so a config file anywhere in a target folder
    is protected, besides the nearest one above each target.
    """
    resolved = output.resolve()
    protected: list[Path] = []
    folders: list[Path] = []
    for spec in options.targets:
        location = _target_location(spec.partition("::")[0])
        if location.is_file():
            protected.append(location.resolve())
        elif location.is_dir():
            folders.append(location.resolve())
        found = _config_path(location, options.config_path)
        if found is not None:
            protected.append(found.resolve())
    is_config = resolved.name in (CONFIG_FILE, *PROJECT_ROOT_MARKERS)
    below = is_config and any(resolved.is_relative_to(folder) for folder in folders)
    if resolved in protected or resolved.suffix == ".py" or below:
        raise TargetError(
            f"{output}: refusing to write the report over a module or config file; choose another -o path"
        )


def _target_location(target: str) -> Path:
    """Where a target's files are, without importing: the path, else a dotted name's folder or file here."""
    location = Path(target)
    if location.exists() or not target.replace(".", "").replace("_", "").isalnum():
        return location
    as_path = Path(*target.split("."))
    return as_path.with_suffix(".py") if as_path.with_suffix(".py").is_file() else as_path


@dataclass(frozen=True)
class ListedFunction:
    """What ``gradcheck list`` shows for one function."""

    id: str
    kind: str
    signature: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class Listing:
    """What ``gradcheck list`` shows: the functions, the modules that failed to import, and the collection."""

    entries: tuple[ListedFunction, ...]
    module_results: tuple[Result, ...]
    summary: Collection


def listing(options: RunOptions) -> Listing:
    """What would be checked: each function with its signature and resolved shapes."""
    import inspect

    from gradcheck.inputs import plan_call

    entries = []
    collected = collect(options)
    for planned in collected.planned:
        request = request_for(planned, options)
        subject = request.subject
        function = subject.forward if subject.kind != "layer" else subject.obj.call
        try:
            signature = inspect.signature(function)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            signature = inspect.Signature()
        if subject.binding in ("method", "classmethod", "layer"):
            parameters = list(signature.parameters.values())[1:]
            signature = signature.replace(parameters=parameters)
        table = "layers" if subject.kind == "layer" else "functions"
        plan = plan_call(
            signature,
            request.config,
            request.dims,
            request.settings.dtype,
            request.config_label,
            f"{table}.{subject.name}",
            request.shape_overrides,
        )
        lines = _listed_inputs(request, plan)
        if subject.reaches:
            lines.append(f"reaches: {', '.join(subject.reaches)}")
        if subject.aliases:
            lines.append(f"also named: {', '.join(subject.aliases)} (checked once)")
        entries.append(ListedFunction(subject.id, subject.kind, str(signature), tuple(lines)))
    return Listing(tuple(entries), collected.module_results, collected.summary)


def _listed_inputs(request: CheckRequest, plan: CallPlan) -> list[str]:
    """One line per argument: configured shapes as they are, open ones as probing finds them (marked guessed)."""
    failure = None
    if plan.unknown:
        guess = guess_shapes(request)
        plan, failure = (guess.plan, None) if guess.plan is not None else (plan, guess.failure)
    lines = []
    for argument in (leaf for top in plan.arguments for leaf in _listed(top)):
        if argument.spec is not None:
            shape = argument.spec.shape
            text = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
            detail = f"{text} {argument.spec.dtype}"
            if argument.spec.distribution != "normal":
                detail += f" {argument.spec.distribution}"
            lines.append(f"{argument.name}: {detail}" + (" guessed" if argument.guessed else ""))
        elif argument.role == "constant":
            lines.append(f"{argument.name} = {_shown_constant(argument.value)} (constant)")
        else:
            lines.append(f"{argument.name}: not configured; {failure or 'no guessed shapes worked'}")
    return lines


def _shown_constant(value: Any) -> str:
    """A constant as a listing shows it: a function by its module and name (its repr holds an address)."""
    name, module = getattr(value, "__qualname__", None), getattr(value, "__module__", None)
    if callable(value) and isinstance(name, str) and isinstance(module, str) and "<" not in name:
        return f"{module}.{name}"
    return repr(value)


def _listed(argument: Argument) -> tuple[Argument, ...]:
    """The arguments a listing shows: list arguments' items, and a complex input whole (as the config writes it)."""
    if argument.role == "list":
        return tuple(leaf for item in argument.items for leaf in _listed(item))
    return (argument,)


@dataclass(frozen=True)
class RunPlan:
    """What a run checks: one request per function, in order, with the run's seed and failing statuses."""

    requests: tuple[CheckRequest, ...]
    """One per function or layer, in the order they are checked."""
    seed: int
    """The seed of the run, for the report's header."""
    fail_on: tuple[str, ...]
    """The statuses that fail the run."""
    module_results: tuple[Result, ...] = ()
    """The modules of a walk that failed to import: reported before the checks."""
    collection: Collection | None = None
    """What collection scanned, imported, excluded and failed to import."""


def plan_run(options: RunOptions, on_import: Callable[[str], None] | None = None) -> RunPlan:
    """Collect the targets and build every check request; raise a UsageError for bad input."""
    collected = collect(options, on_import=on_import)
    requests = tuple(request_for(p, options) for p in collected.planned)
    seed = requests[0].settings.seed if requests else int(options.overrides.get("seed", 0))
    strict = any(r.settings.strict for r in requests) or bool(options.overrides.get("strict"))
    return RunPlan(
        requests=requests,
        seed=seed,
        fail_on=fail_on_statuses(options.fail_on, strict),
        module_results=collected.module_results,
        collection=collected.summary,
    )


def check_one(request: CheckRequest) -> Result:
    """Check one planned function; what the user's code prints goes to standard error, never into a report."""
    with contextlib.redirect_stdout(sys.stderr):
        result = check_subject(request)
    aliases = request.subject.aliases
    if aliases:
        names = ", ".join(aliases)
        result = dataclasses.replace(result, notes=(*result.notes, f"checked once: the module also names it {names}"))
    return result


def run(
    options: RunOptions,
    on_result: Callable[[Result, int, int], None] | None = None,
    on_start: Callable[[str, int, int], None] | None = None,
) -> RunReport:
    """Collect and check everything in this process; Ctrl-C stops early with the results so far.

    ``gradcheck run`` checks in a worker process instead (:mod:`gradcheck.worker`),
    which bounds each check's time and memory; this is the same run without those
    bounds, for callers that want it in their own process. The caller's global
    state is as before afterwards (:mod:`gradcheck.state`). The loop, with
    ``--maxfail``, is :func:`gradcheck.run.check_all`.
    """
    started = time.perf_counter()
    plan = plan_run(options)
    ids = [request.subject.id for request in plan.requests]
    return check_all(
        ids, lambda index: check_one(plan.requests[index]), plan, options.maxfail, started, on_start, on_result
    )


def fail_on_statuses(fail_on: tuple[str, ...] | None, strict: bool) -> tuple[str, ...]:
    """The statuses that fail the run: ``--fail-on`` (default failed and error), plus skipped with ``--strict``."""
    statuses = tuple(fail_on) if fail_on else DEFAULT_FAIL_ON
    if strict and "skipped" not in statuses:
        statuses += ("skipped",)
    return statuses
