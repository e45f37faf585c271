"""``gradcheck run``'s entry to the workers: :func:`run`, on one worker or on ``-j N`` of them.

The first worker's manifest says how many functions there are; the helpers of
``-j N`` (:mod:`gradcheck.pool`) are made only then. One idle worker is kept
for a next run: the first one.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gradcheck.errors import UsageError
from gradcheck.results import Result, RunReport
from gradcheck.run import check_all
from gradcheck.worker.bookkeeping import WorkerRun
from gradcheck.worker.messages import Job, WorkerManifest

if TYPE_CHECKING:
    from gradcheck.pool import Pace


def run(
    options: Any,
    *,
    verbose: bool = False,
    import_timeout: float = 60.0,
    max_memory: int | None = None,
    on_import: Callable[[str], None] | None = None,
    on_start: Callable[[str, int, int], None] | None = None,
    on_result: Callable[[Result, int, int], None] | None = None,
    on_output: Callable[[str], None] | None = None,
) -> RunReport:
    """``session.run`` in worker processes: each check within its timeout and ``max_memory`` MB.

    A check stopped for time or memory, or whose worker died, is an
    ``error`` result, and a fresh worker goes on with the next function.
    Bad input (config, targets, imports) raises :class:`UsageError`, as in
    process; a bug in gradcheck raises :class:`WorkerError`. Ctrl-C stops
    the run with the results so far (``interrupted``); before any function
    is known it propagates. ``on_output`` receives what the worker prints
    (default: this process's standard error).
    """
    from gradcheck import pool

    start = time.perf_counter()
    jobs = getattr(options, "jobs", 1)
    workers = pool.worker_count(jobs)
    first = WorkerRun(
        _job(options, verbose, 1 if jobs == "auto" else workers),
        import_timeout,
        max_memory,
        on_import,
        on_output or _write_to_stderr,
    )
    manifest = _first_manifest(first)
    # A helper is always a fresh worker: weigh its start-up, not the idle worker's quicker reuse.
    fresh = first.worker.startup if first.worker is not None else None
    startup = max(time.perf_counter() - start, fresh or 0.0)
    first.functions = list(manifest.functions)
    first.positions = {function.id: index for index, function in enumerate(first.functions)}
    # Helpers are made only now that the manifest says how many functions there are: never more
    # workers than functions. Each starts its own worker (TensorFlow's import, collection) when
    # its slot begins, quietly (on_import is the first one's).
    count = min(workers, len(first.functions))
    helper_job = _job(options, verbose, count)
    helpers = [WorkerRun(helper_job, import_timeout, max_memory, None, first.sink) for _ in range(count - 1)]
    for helper in helpers:
        helper.functions = first.functions
    pace = pool.Pace(startup) if jobs == "auto" else None
    try:
        report = _check([first, *helpers], manifest, options.maxfail, start, on_start, on_result, pace)
    except BaseException:
        for each in (first, *helpers):
            each.discard_worker()
        raise
    for helper in helpers:
        helper.discard_worker()  # one idle worker is kept for a next run: the first one
    return _finish(first, report)


def _first_manifest(first: WorkerRun) -> WorkerManifest:
    """The first worker's manifest; its worker is discarded if there is none (bad input, a bug, Ctrl-C)."""
    try:
        first.launch()
        return first.await_manifest()
    except BaseException:
        first.discard_worker()
        raise


def _check(
    runs: list[WorkerRun],
    manifest: WorkerManifest,
    maxfail: int | None,
    start: float,
    on_start: Callable[[str, int, int], None] | None,
    on_result: Callable[[Result, int, int], None] | None,
    pace: Pace | None,
) -> RunReport:
    """Check every function of the manifest: on the first worker alone, or on all of ``runs`` at once."""
    from gradcheck import pool

    ids = [function.id for function in runs[0].functions]
    if len(runs) > 1:
        return pool.check_parallel(ids, runs, manifest, maxfail, start, on_start, on_result, pace=pace)
    return check_all(ids, runs[0].check, manifest, maxfail, start, on_start, on_result)


def _finish(first: WorkerRun, report: RunReport) -> RunReport:
    """Keep the first worker for a next run where the run ended cleanly, else stop it."""
    if report.interrupted:
        first.discard_worker()
        return report
    try:
        first.finish_worker()
    except KeyboardInterrupt:  # while the worker was put back after the last check
        first.discard_worker()
        return replace(report, interrupted=True)
    return report


def _job(options: Any, verbose: bool, workers: int) -> Job:
    """The job every worker of a run gets: the options and this process's surroundings."""
    from gradcheck import pool

    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise UsageError("the current directory does not exist (any more): cd into the project to check") from None
    return Job(
        options=options,
        cwd=cwd,
        sys_path=tuple(sys.path),
        environ=pool.thread_environment(dict(os.environ), workers),
        verbose=verbose,
    )


def _write_to_stderr(text: str) -> None:
    # Looked up at each write: the command line's stream may be swapped (a progress bar, CliRunner).
    sys.stderr.write(text)
    sys.stderr.flush()
