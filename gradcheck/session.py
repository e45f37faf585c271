"""A whole run: its options resolved once, the manifest (collection, one request per function), the report.

The command line and the pytest plugin both drive runs through here; nothing
in this module prints. Progress reaches the caller through ``on_result``.
Collection is :mod:`gradcheck.collection`'s, each function's request
:mod:`gradcheck.check_requests`'; ``gradcheck list`` is here, with the
shapes probing finds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradcheck.check_requests import request_for
from gradcheck.checking import CheckRequest, check_subject, guess_shapes
from gradcheck.checking.build import declared_plan
from gradcheck.collection import collect
from gradcheck.config import Config, merged_settings
from gradcheck.config_files import CONFIG_FILE, PROJECT_ROOT_MARKERS, config_file_for, read_config_file
from gradcheck.errors import TargetError
from gradcheck.inputs import Argument, CallPlan
from gradcheck.options import RunOptions
from gradcheck.results import DEFAULT_FAIL_ON, Collection, Result, RunReport, split_id
from gradcheck.run import check_all
from gradcheck.settings import BY_NAME, FUNCTION, RUN_SETTINGS, resolve
from gradcheck.walk import Exclusion


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
    path = config_file_for(Path(split_id(targets[0])[0]), config_path) if targets else None
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
        location = _target_location(split_id(spec)[0])
        if location.is_file():
            protected.append(location.resolve())
        elif location.is_dir():
            folders.append(location.resolve())
        found = config_file_for(location, options.config_path)
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
    """What would be checked: each function with its signature (as its kind gives it) and resolved shapes."""
    entries = []
    collected = collect(options)
    for check in collected.checks:
        request = request_for(check, options)
        subject = request.subject
        signature = subject.kind.signature(subject)
        plan = declared_plan(request, signature, request.settings.dtype)
        lines = _listed_inputs(request, plan)
        if subject.reaches:
            lines.append(f"reaches: {', '.join(subject.reaches)}")
        if subject.aliases:
            lines.append(f"also named: {', '.join(subject.aliases)} (checked once)")
        entries.append(ListedFunction(subject.id, subject.kind.reported, str(signature), tuple(lines)))
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
class RunManifest:
    """The run's manifest: one request per function, in the order they are checked, the seed, the failing statuses."""

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


def run_manifest(options: RunOptions, on_import: Callable[[str], None] | None = None) -> RunManifest:
    """Collect the targets and build every check request; raise a UsageError for bad input."""
    collected = collect(options, on_import=on_import)
    requests = tuple(request_for(check, options) for check in collected.checks)
    seed = requests[0].settings.seed if requests else int(options.overrides.get("seed", 0))
    strict = any(r.settings.strict for r in requests) or bool(options.overrides.get("strict"))
    return RunManifest(
        requests=requests,
        seed=seed,
        fail_on=fail_on_statuses(options.fail_on, strict),
        module_results=collected.module_results,
        collection=collected.summary,
    )


def check_one(request: CheckRequest) -> Result:
    """Check one function of the manifest; what the user's code prints goes to standard error, never into a report."""
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
    manifest = run_manifest(options)
    ids = [request.subject.id for request in manifest.requests]
    return check_all(
        ids, lambda index: check_one(manifest.requests[index]), manifest, options.maxfail, started, on_start, on_result
    )


def fail_on_statuses(fail_on: tuple[str, ...] | None, strict: bool) -> tuple[str, ...]:
    """The statuses that fail the run: ``--fail-on`` (default failed and error), plus skipped with ``--strict``."""
    statuses = tuple(fail_on) if fail_on else DEFAULT_FAIL_ON
    if strict and "skipped" not in statuses:
        statuses += ("skipped",)
    return statuses
