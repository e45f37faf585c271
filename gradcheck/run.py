"""The one run loop: check the functions of a run's manifest in order, stop at ``--maxfail`` or Ctrl-C, report.

In-process runs (:func:`gradcheck.session.run`) and worker runs
(:func:`gradcheck.worker.run`) both go through :func:`check_all`; they
differ only in how one function is checked, which they pass in. ``-j N``
(:mod:`gradcheck.pool`) checks through one :class:`Runner` per worker instead, and
reports through :func:`run_report` as :func:`check_all` does. Nothing here
prints; progress reaches the caller through ``on_start`` and ``on_result``.
Imports :mod:`gradcheck.results` only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from gradcheck.results import VERSION, Collection, Result, RunReport


class Manifest(Protocol):
    """What a run's manifest tells the loop: the seed for the report, the statuses that fail the run,
    and what collection found: the results of modules that failed to import, and its summary."""

    # Read-only: a frozen record (the worker's ``WorkerManifest``) is a manifest too.
    @property
    def seed(self) -> int: ...
    @property
    def fail_on(self) -> tuple[str, ...]: ...
    @property
    def module_results(self) -> tuple[Result, ...]: ...
    @property
    def collection(self) -> Collection | None: ...


class Runner(Protocol):
    """One worker of a parallel run, as :mod:`gradcheck.pool` drives it from a thread of its own.

    Every runner of a run checks the same manifest: ``check(index)`` checks the
    function at ``index`` of the first worker's manifest. In ``gradcheck run``
    it is a :class:`gradcheck.worker.bookkeeping.WorkerRun`.
    """

    def ready(self) -> bool:
        """Start a worker and collect the targets, unless one has the manifest already; False if it cannot."""

    def check(self, index: int) -> Result:
        """The result of the function at ``index``; raise :class:`Abandoned` where it and all after it cannot be."""

    def kill(self) -> None:
        """Stop the check in flight now, from another thread: it ends as an ``error`` nobody reads."""


class Abandoned(Exception):
    """Raised by a check to end the run early: ``results`` stand for this function and every one after it.

    The worker raises it when no fresh worker can collect the targets again.
    """

    def __init__(self, results: Sequence[Result]) -> None:
        super().__init__(f"{len(results)} functions not checked")
        self.results = tuple(results)


def check_all(
    ids: Sequence[str],
    check: Callable[[int], Result],
    manifest: Manifest,
    maxfail: int | None,
    started: float,
    on_start: Callable[[str, int, int], None] | None = None,
    on_result: Callable[[Result, int, int], None] | None = None,
) -> RunReport:
    """Check the function at each index of ``ids`` with ``check``, in order, and make the report.

    With ``maxfail`` the run stops once that many results have a status in
    ``manifest.fail_on`` (as pytest's ``--maxfail``); Ctrl-C stops it too, with the
    results so far and ``interrupted`` set. What was not checked is listed in
    the report's ``not_checked``. ``started`` is the run's start
    (``time.perf_counter()``), collection included.
    """
    results: list[Result] = []
    interrupted = False
    failures = collection_failures(manifest)
    try:
        for index, id_ in enumerate(ids):
            if maxfail is not None and failures >= maxfail:
                break
            if on_start is not None:
                on_start(id_, index, len(ids))
            try:
                result = check(index)
            except Abandoned as abandoned:
                results.extend(abandoned.results)
                break
            results.append(result)
            failures += result.status in manifest.fail_on
            if on_result is not None:
                on_result(result, index, len(ids))
    except KeyboardInterrupt:
        interrupted = True
    return run_report(ids, results, manifest, maxfail, started, interrupted)


def collection_failures(manifest: Manifest) -> int:
    """How many of the modules that failed to import count towards ``--maxfail``, as failing results do."""
    return sum(result.status in manifest.fail_on for result in manifest.module_results)


def run_report(
    ids: Sequence[str],
    results: Sequence[Result],
    manifest: Manifest,
    maxfail: int | None,
    started: float,
    interrupted: bool,
) -> RunReport:
    """The report of a run that checked ``results``, the first of ``ids`` in order; the rest were not checked.

    The modules that failed to import come first, as collection errors do in pytest.
    """
    return RunReport(
        results=(*manifest.module_results, *results),
        seed=manifest.seed,
        seconds=time.perf_counter() - started,
        interrupted=interrupted,
        version=VERSION,
        fail_on=manifest.fail_on,
        maxfail=maxfail,
        not_checked=tuple(ids[len(results) :]),
        collection=manifest.collection,
    )
