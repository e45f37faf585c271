"""One function's check request: its settings merged, its config table, the reproduce command.

The one way a :class:`~gradcheck.checking.CheckRequest` is made, for
``gradcheck run``, ``pytest --gradcheck`` and ``gradcheck.check`` alike, with
the same messages. A config's ``{ import = "module:attribute" }`` values are
imported here, so a missing one is a usage error before any check runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradcheck import _tf, proxying, state
from gradcheck.checking import CheckRequest
from gradcheck.collection import CollectedCheck
from gradcheck.config import Config, ImportValue, Settings, SubjectConfig, merged_settings
from gradcheck.errors import UsageError
from gradcheck.importing import import_object, import_root
from gradcheck.options import RunOptions
from gradcheck.settings import BY_NAME, TABLE
from gradcheck.subjects import Subject
from gradcheck.targets.proxy import Proxy

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


def request_for(check: CollectedCheck, options: RunOptions) -> CheckRequest:
    """The check request for one function: its merged settings, config table and dims."""
    subject, config = check.subject, check.config
    return build_request(
        subject,
        config,
        options.overrides,
        given_by="command line",
        table=_subject_table(config, subject),
        shapes=options.shapes,
        config_label=config.label if config.path is not None else "gradcheck.toml",
        reproduce=lambda settings: reproduce_command(subject, settings, options),
        module_state=check.module_state,
    )


def _subject_table(config: Config, subject: Subject) -> SubjectConfig | None:
    """The subject's config table, under its name or, failing that, one of its aliases."""
    for name in (subject.name, *subject.aliases):
        table = config.subject(subject.kind.reported, name)
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
    table, own, reached = _with_proxies(_with_imports(table, subject), subject, config, config_label)
    return CheckRequest(
        subject=subject,
        settings=settings,
        config=table,
        proxy=own,
        reached_proxies=reached,
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
    target = _module_file(subject)

    def resolved(values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: import_object(v, target) if isinstance(v, ImportValue) else v for k, v in values.items()}

    # What the imported module's own code sets (seeds, switches) must not reach the checks.
    with state.preserved([import_root(target)] if target is not None else []):
        return replace(table, constants=resolved(table.constants), init=resolved(table.init))


def _module_file(subject: Subject) -> Path | None:
    """The checked module's file, whose import root a config's imports are looked up from too."""
    module_file = getattr(subject.module, "__file__", None)
    written = Path(module_file) if module_file else Path(subject.path)
    return written if written.is_file() else None


def _with_proxies(
    table: SubjectConfig | None, subject: Subject, config: Config, config_label: str
) -> tuple[SubjectConfig | None, Proxy | None, dict[str, Proxy]]:
    """The table without its proxy's own constants, the subject's own proxy, and every other table's."""
    names = (subject.name, *subject.aliases)
    if (table is None or table.proxy is None) and not any(t.proxy is not None for t in config.functions.values()):
        return table, None, {}
    target = _module_file(subject)

    def resolved(surrogate: str, value: Any) -> Proxy:
        where = f"{value.source}: {value.key}" if isinstance(value, ImportValue) else f"{config_label}: proxy"
        return proxying.resolve(value, surrogate, where, target)

    with state.preserved([import_root(target)] if target is not None else []):
        where = f"{config_label}: {subject.kind.table}.{subject.name}"
        called = subject.kind.described_by(subject)  # what the table's constants are passed to
        table, own = proxying.own_proxy(table, called, where, lambda value: resolved(subject.name, value))
        return table, own, proxying.reached_proxies(config, names, resolved)


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
