"""pytest plugin: ``pytest --gradcheck PATH`` checks each custom gradient of PATH as a test item.

Registered through the ``pytest11`` entry point, so installing gradcheck is
enough. Without ``--gradcheck`` the plugin only adds its options: it imports
neither TensorFlow nor the checker.

With ``--gradcheck PATH`` (repeatable; a file, a directory or a module name,
as ``gradcheck run`` takes them) every custom-gradient function of PATH is
one item, ``PATH::NAME``, so ``-k`` and ``::`` select them as they select
ordinary tests. PATH is added to what pytest collects when its arguments do
not cover it already. Each item is checked with the config a ``gradcheck
run`` of the same targets would use (``--gradcheck-config`` as ``-c``); a
failing item's report is the problem table of the text report.

Every item carries the ``gradcheck`` marker, so ``-m gradcheck`` runs only
them and ``-m "not gradcheck"`` only the project's own tests; a skipped item
is reported at the function's ``def`` in the user's file.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gradcheck.errors import UsageError
from gradcheck.results import Result, split_id

#: The marker every item carries (on its module's node, so whatever a gradcheck module yields has it).
MARKER = "gradcheck"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--gradcheck PATH`` and ``--gradcheck-config FILE``."""
    group = parser.getgroup("gradcheck", "check hand-written TensorFlow gradients")
    group.addoption(
        "--gradcheck",
        action="append",
        default=[],
        metavar="PATH",
        dest="gradcheck_targets",
        help="check each @tf.custom_gradient function of PATH (a file, directory or module) as a test item; repeatable",
    )
    group.addoption(
        "--gradcheck-config",
        metavar="FILE",
        dest="gradcheck_config",
        default=None,
        help="gradcheck config file (default: gradcheck.toml or [tool.gradcheck] found from each module upwards)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; with ``--gradcheck``, the collector too, and make sure pytest visits the targets."""
    # Registered even without --gradcheck: a --strict-markers project whose own tests carry the
    # marker (to run them with gradcheck's items) must also run without the option.
    config.addinivalue_line("markers", f"{MARKER}: a custom gradient checked by gradcheck (pytest --gradcheck PATH)")
    targets = config.getoption("gradcheck_targets")
    if not targets:
        return
    try:
        collector = GradcheckPlugin(config, tuple(targets))
    except UsageError as error:
        # A missing target is a bad command line: pytest's usage error (exit 4), one line.
        raise pytest.UsageError(f"--gradcheck: {error}") from None
    config.pluginmanager.register(collector, "gradcheck-collector")
    collector.add_uncovered_targets()


class GradcheckFailure(Exception):
    """A custom gradient that failed its check (or raised, or was skipped under ``strict``)."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.id)
        self.result = result


class GradcheckPlugin:
    """The part of the plugin that exists only with ``--gradcheck``: targets, collection."""

    def __init__(self, config: pytest.Config, targets: tuple[str, ...]) -> None:
        from gradcheck import session
        from gradcheck.discovery import resolve_target

        self.config = config
        self.targets = targets
        self.invocation_dir = config.invocation_params.dir
        config_path = config.getoption("gradcheck_config")
        if config_path is not None and not Path(config_path).is_file():
            raise UsageError(f"{config_path}: config file not found (--gradcheck-config)")
        # The config's `exclude` applies here as on the command line.
        self.options: Any = session.run_options(
            targets, config_path=Path(config_path) if config_path is not None else None
        )
        self.files: dict[Path, str] = {}
        for spec in targets:
            for file in resolve_target(spec, self.options.exclusions).files:
                self.files.setdefault(file.resolve(), spec)
        self._checks_by_file: dict[Path, list[Any]] | None = None
        self._module_results: dict[Path, Result] = {}
        self._collection_error: UsageError | None = None

    def add_uncovered_targets(self) -> None:
        """Add each target file that pytest's own arguments do not reach to what it collects."""
        covered = [self._arg_path(arg) for arg in self.config.args]
        for file, spec in self.files.items():
            if any(file == path or path in file.parents for path in covered if path is not None):
                continue
            selector = split_id(spec)[1]
            self.config.args.append(str(file) + (f"::{selector}" if selector else ""))

    def _arg_path(self, arg: str) -> Path | None:
        path = Path(split_id(arg)[0])
        if not path.is_absolute():
            path = self.invocation_dir / path
        return path.resolve() if path.exists() else None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """Each target file becomes a :class:`GradcheckModule`."""
        if file_path.suffix == ".py" and file_path.resolve() in self.files:
            return GradcheckModule.from_parent(parent, path=file_path, plugin=self)
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, Any]:
        """A skipped item's report points at the function's ``def``, not at the plugin's ``pytest.skip``.

        pytest puts a skip at the frame that raised it; its ``-rs`` summary
        line is then this file's for every item. The item's own place is
        what the user can act on.
        """
        report = yield
        if isinstance(item, GradcheckItem) and report.skipped and isinstance(report.longrepr, tuple):
            path, line, _ = item.reportinfo()
            if line is not None:
                report.longrepr = (os.fspath(path), line + 1, report.longrepr[2])
        return report

    def checks_by_file(self) -> dict[Path, list[Any]]:
        """Every target's functions with their configs, found once for the whole session.

        All targets are collected together, as ``gradcheck run`` collects
        them, so a config naming functions of several modules is checked
        against all of them.
        """
        if self._collection_error is not None:
            raise self._collection_error
        if self._checks_by_file is None:
            from gradcheck.collection import collect

            try:
                collected = collect(self.options)
            except UsageError as error:
                self._collection_error = error
                raise
            by_file: dict[Path, list[Any]] = {}
            for check in collected.checks:
                by_file.setdefault(self._file_of(check.subject.path), []).append(check)
            # A module of a walk that failed to import is one failing item, not a collection error.
            self._module_results = {self._file_of(str(r.path)): r for r in collected.module_results}
            self._checks_by_file = by_file
        return self._checks_by_file

    def module_result(self, path: Path) -> Result | None:
        """The ``error`` result of ``path`` where a walk brought it in and it failed to import."""
        self.checks_by_file()
        return self._module_results.get(path.resolve())

    def _file_of(self, shown: str) -> Path:
        path = Path(shown)
        if not path.is_absolute():
            path = Path.cwd() / path
        return path.resolve()


class GradcheckModule(pytest.File):
    """One target module: its custom-gradient functions are the items."""

    def __init__(self, *, plugin: GradcheckPlugin, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plugin = plugin
        self.add_marker(MARKER)

    def collect(self) -> Iterator[GradcheckItem]:
        """One item per function, in definition order; one failing item where the module failed to import."""
        failed = self.plugin.module_result(self.path)
        if failed is not None:
            yield GradcheckItem.from_parent(self, name="import", check=None, failed_import=failed)
        for check in self.plugin.checks_by_file().get(self.path.resolve(), []):
            yield GradcheckItem.from_parent(self, name=check.subject.name, check=check)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """A bad target or config is one line, as on the command line."""
        if isinstance(excinfo.value, UsageError):
            return f"gradcheck: error: {excinfo.value}"
        return super().repr_failure(excinfo)


class GradcheckItem(pytest.Item):
    """One custom-gradient function, checked when the item runs."""

    def __init__(self, *, check: Any, failed_import: Result | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.failed_import = failed_import
        """For the item that stands for a module that failed to import: its ``error`` result."""
        self.result: Result | None = failed_import

    def runtest(self) -> None:
        """Check the function; fail with its result unless it passed (skip where it was skipped)."""
        from gradcheck.check_requests import request_for
        from gradcheck.checking import check_subject

        if self.failed_import is not None:
            self.user_properties.append(("gradcheck_status", "error"))
            raise GradcheckFailure(self.failed_import)
        module = self.parent
        assert isinstance(module, GradcheckModule)  # the only collector that makes these items
        plugin = module.plugin
        request = request_for(self.check, plugin.options)
        result = check_subject(request)
        self.result = result
        self.user_properties.append(("gradcheck_status", result.status))
        if result.status == "skipped" and not request.settings.strict:
            pytest.skip(result.skip_reason or "skipped")
        if result.status != "passed":
            raise GradcheckFailure(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """The text report's entry for the function: its problem table, hints and how to reproduce."""
        if isinstance(excinfo.value, GradcheckFailure):
            from gradcheck.reporting.text import render_result_string

            result = excinfo.value.result
            # pytest's short summary shows the first line: make it the first problem.
            return _first_problem(result) + "\n" + render_result_string(result).rstrip("\n")
        if isinstance(excinfo.value, UsageError):
            return f"gradcheck: error: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the function is defined, for pytest's headers."""
        line = self.check.subject.line if self.check is not None else (self.result and self.result.line)
        return self.path, (line - 1 if line else None), f"gradcheck: {self.name}"


def _first_problem(result: Result) -> str:
    if not result.problems:
        return f"{result.status}: {result.skip_reason or result.id}"
    problem = result.problems[0]
    more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
    return f"{result.status}: {problem.input or result.name} ({problem.check}): {problem.message}{more}"
