"""A whole run: targets -> config -> discovery -> one check per function -> a report.

The command line and the pytest plugin both drive runs through here; nothing
in this module prints. Progress reaches the caller through ``on_result``.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcheck import _tf, selection, state
from gradcheck.checking import CheckRequest, check_subject
from gradcheck.config import (
    Config,
    Settings,
    closest,
    find_config_file,
    merged_settings,
    read_config_file,
)
from gradcheck.discovery import (
    Subject,
    display_path,
    find_definition,
    find_subjects,
    import_root,
    load_module,
    resolve_target,
    select,
)
from gradcheck.errors import ConfigError, TargetError, UsageError
from gradcheck.results import DEFAULT_FAIL_ON, VERSION, Result, RunReport


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
    shard: tuple[int, int] | None = None
    """``--shard K/N``: keep only the functions in shard K of N (see :mod:`gradcheck.selection`)."""
    changed: frozenset[Path] | None = None
    """``--changed-since``: the changed files; keep only functions whose module is or imports one."""
    changed_root: Path | None = None
    """The git repository those files are in; imports are followed inside it only."""


@dataclass(frozen=True)
class PlannedCheck:
    """One function found, with the config that applies to it."""

    subject: Subject
    config: Config
    module_state: state.Snapshot | None = None
    """What the module's import left (seeds, switches, directory), applied again for its checks."""


def _config_for(location: Path, options: RunOptions, cache: dict[Path | None, Config]) -> Config:
    """The config that applies to a file: ``-c``, else the nearest one above it."""
    if options.config_path is not None:
        path: Path | None = options.config_path
    else:
        path = find_config_file(location if location.exists() else Path.cwd())
    if path not in cache:
        cache[path] = read_config_file(path, options.dims) if path is not None else Config(dims=dict(options.dims))
    return cache[path]


def import_isolated(file: Path) -> tuple[Any, state.Snapshot]:
    """Import a user's file; return the module and the state its import left, with the state put back.

    Module-level code may seed random generators, flip TensorFlow's switches
    or change directory; none of that may reach the next module, so it is
    undone here and kept in the snapshot, which the module's own checks apply.
    """
    with state.preserved([import_root(file)]):
        module = load_module(file)
        return module, state.capture([import_root(file)])


def collect(
    options: RunOptions, read_configs: bool = True, on_import: Callable[[str], None] | None = None
) -> list[PlannedCheck]:
    """Import every target and find its functions; raise a UsageError for bad input.

    Each file gets the config found from its own folder upwards (or ``-c``),
    so a directory of packages with their own configs checks as a whole.
    ``read_configs=False`` gives every function the empty config (``gradcheck
    init`` writes a config from scratch, whatever is there already).
    ``on_import`` hears of each file just before it is imported (the worker
    tells its parent, which bounds the import's time).
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
    for spec in options.targets:
        target = resolve_target(spec)
        if not target.files:
            config_for(Path(spec.partition("::")[0]))
        found_here: list[PlannedCheck] = []
        for file in target.files:
            resolved = file.resolve()
            if resolved not in imported:
                config = config_for(file)
                if on_import is not None:
                    on_import(display_path(file))
                module, module_state = import_isolated(file)
                found = find_subjects(module, file)
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
    if options.keyword:
        planned = [p for p in planned if options.keyword in p.subject.id]
    if options.changed is not None and options.changed_root is not None:
        chosen = selection.affected({Path(p.subject.path) for p in planned}, options.changed, options.changed_root)
        planned = [p for p in planned if Path(p.subject.path).resolve() in chosen]
    if options.shard is not None:
        planned = [p for p in planned if selection.in_shard(p.subject.id, options.shard)]
    return planned


def _check_config_names(config: Config, subjects: list[Subject]) -> None:
    """A config table naming a function that is defined nowhere is an error (a misspelt name).

    Names are looked for among the targets, then (without importing) in the
    Python files below the config's folder, so that one config shared by
    several modules still lets a run check one of them.
    """
    for kind, table in (("function", config.functions), ("layer", config.layers)):
        defined = [s.name for s in subjects if s.kind == kind]
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


def reproduce_command(subject: Subject, settings: Settings, options: RunOptions) -> str:
    """The command line that checks this one function again with the same draws."""
    parts = ["gradcheck", "run", subject.id, "--seed", str(settings.seed)]
    defaults = Settings()
    for key in ("dtype", "mode", "execution", "atol", "rtol", "eps", "order"):
        value = getattr(settings, key)
        if key in options.overrides and value != getattr(defaults, key):
            parts += [f"--{key}", str(value)]
    if settings.shape_only:
        parts.append("--shape-only")
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
    table = config.subject(subject.kind, subject.name)
    settings = merged_settings(config, table, options.overrides)
    dtype_given = (
        "dtype" in options.overrides or "dtype" in config.settings or bool(table and "dtype" in table.settings)
    )
    if settings.device == "gpu" and not _tf.gpu_available():
        where = "--device gpu" if "device" in options.overrides else f'{config.label}: device = "gpu"'
        raise UsageError(
            f"{where}: TensorFlow sees no GPU on this machine (tf.config.list_physical_devices('GPU') is empty); "
            "use --device cpu, or --device auto to take the GPU only where there is one"
        )
    return CheckRequest(
        subject=subject,
        settings=settings,
        config=table,
        dims=config.dims,
        shape_overrides=options.shapes,
        config_label=config.label if config.path is not None else "gradcheck.toml",
        reproduce=reproduce_command(subject, settings, options),
        dtype_given=dtype_given,
        module_state=planned.module_state,
    )


def run_settings(options: RunOptions) -> dict[str, Any]:
    """The run-level keys of the first target's config, where it sets them.

    ``format``, ``output``, ``fail_on``, ``maxfail``, ``max_memory`` and the
    top-level ``timeout``: what the command line needs before any module is
    imported (without TensorFlow).
    """
    if not options.targets:
        return {}
    spec = options.targets[0]
    location = Path(spec.partition("::")[0])
    if options.config_path is not None:
        path: Path | None = options.config_path
    else:
        path = find_config_file(location if location.exists() else Path.cwd())
    if path is None:
        return {}
    config = read_config_file(path, options.dims)
    settings = dict(config.report)
    if "timeout" in config.settings:
        settings["timeout"] = config.settings["timeout"]
    return settings


def refuse_user_file(output: Path, options: RunOptions) -> None:
    """The report must never overwrite the user's module or config."""
    resolved = output.resolve()
    protected: list[Path] = []
    for spec in options.targets:
        location = Path(spec.partition("::")[0])
        if location.is_file():
            protected.append(location.resolve())
    if options.config_path is not None:
        protected.append(options.config_path.resolve())
    else:
        for spec in options.targets:
            location = Path(spec.partition("::")[0])
            found = find_config_file(location if location.exists() else Path.cwd())
            if found is not None:
                protected.append(found.resolve())
    if resolved in protected or resolved.suffix == ".py":
        raise TargetError(
            f"{output}: refusing to write the report over a module or config file; choose another -o path"
        )


@dataclass(frozen=True)
class ListedFunction:
    """What ``gradcheck list`` shows for one function."""

    id: str
    kind: str
    signature: str
    inputs: tuple[str, ...]


def listing(options: RunOptions) -> list[ListedFunction]:
    """What would be checked: each function with its signature and resolved shapes."""
    import inspect

    from gradcheck.inputs import plan_call

    entries = []
    for planned in collect(options):
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
        lines = []
        for argument in plan.leaves:
            if argument.spec is not None:
                shape = argument.spec.shape
                text = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
                detail = f"{text} {argument.spec.dtype}"
                if argument.spec.distribution != "normal":
                    detail += f" {argument.spec.distribution}"
                lines.append(f"{argument.name}: {detail}")
            elif argument.role == "constant":
                lines.append(f"{argument.name} = {argument.value!r} (constant)")
            else:
                lines.append(f"{argument.name}: not configured (small shapes are guessed at run time)")
        if subject.reaches:
            lines.append(f"reaches: {', '.join(subject.reaches)}")
        entries.append(ListedFunction(subject.id, subject.kind, str(signature), tuple(lines)))
    return entries


@dataclass(frozen=True)
class RunPlan:
    """What a run checks: one request per function, in order, with the run's seed and failing statuses."""

    requests: tuple[CheckRequest, ...]
    """One per function or layer, in the order they are checked."""
    seed: int
    """The seed of the run, for the report's header."""
    fail_on: tuple[str, ...]
    """The statuses that fail the run."""


def plan_run(options: RunOptions, on_import: Callable[[str], None] | None = None) -> RunPlan:
    """Collect the targets and build every check request; raise a UsageError for bad input."""
    planned = collect(options, on_import=on_import)
    requests = tuple(request_for(p, options) for p in planned)
    seed = requests[0].settings.seed if requests else int(options.overrides.get("seed", 0))
    strict = any(r.settings.strict for r in requests) or bool(options.overrides.get("strict"))
    return RunPlan(requests=requests, seed=seed, fail_on=fail_on_statuses(options.fail_on, strict))


def check_one(request: CheckRequest) -> Result:
    """Check one planned function; what the user's code prints goes to standard error, never into a report."""
    with contextlib.redirect_stdout(sys.stderr):
        return check_subject(request)


def run(
    options: RunOptions,
    on_result: Callable[[Result, int, int], None] | None = None,
    on_start: Callable[[str, int, int], None] | None = None,
) -> RunReport:
    """Collect and check everything in this process; Ctrl-C stops early with the results so far.

    ``gradcheck run`` checks in a worker process instead (:mod:`gradcheck.worker`),
    which bounds each check's time and memory; this is the same run without those
    bounds, for callers that want it in their own process. The caller's global
    state is as before afterwards (:mod:`gradcheck.state`).

    With ``options.maxfail`` the run stops once that many results have a
    status that fails the run (as pytest's ``--maxfail``); what was not
    checked is listed in the report's ``not_checked``.
    """
    start = time.perf_counter()
    plan = plan_run(options)
    requests = plan.requests
    results: list[Result] = []
    interrupted = False
    failures = 0
    try:
        for index, request in enumerate(requests):
            if options.maxfail is not None and failures >= options.maxfail:
                break
            if on_start is not None:
                on_start(request.subject.id, index, len(requests))
            result = check_one(request)
            results.append(result)
            failures += result.status in plan.fail_on
            if on_result is not None:
                on_result(result, index, len(requests))
    except KeyboardInterrupt:
        interrupted = True
    return RunReport(
        results=tuple(results),
        seed=plan.seed,
        seconds=time.perf_counter() - start,
        interrupted=interrupted,
        version=VERSION,
        fail_on=plan.fail_on,
        maxfail=options.maxfail,
        not_checked=tuple(r.subject.id for r in requests[len(results) :]),
    )


def fail_on_statuses(fail_on: tuple[str, ...] | None, strict: bool) -> tuple[str, ...]:
    """The statuses that fail the run: ``--fail-on`` (default failed and error), plus skipped with ``--strict``."""
    statuses = tuple(fail_on) if fail_on else DEFAULT_FAIL_ON
    if strict and "skipped" not in statuses:
        statuses += ("skipped",)
    return statuses
