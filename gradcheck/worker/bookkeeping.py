"""The parent's bookkeeping of one worker's part of a run: :class:`WorkerRun`, and the results of stopped checks.

A :class:`WorkerRun` gives a worker the job, reads its manifest, checks one
function at a time within its timeout and the memory bound, and starts a
fresh worker after one was stopped. A check stopped for time or memory, or
whose worker died, becomes an ``error`` result here; bad input met in the
worker is a :class:`UsageError`, a bug in gradcheck a :class:`WorkerError`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradcheck.errors import UsageError
from gradcheck.results import Problem, Result
from gradcheck.run import Abandoned
from gradcheck.worker.messages import (
    Check,
    Crashed,
    End,
    Ended,
    Finished,
    Importing,
    Job,
    ManifestEntry,
    Refused,
    WorkerManifest,
)
from gradcheck.worker.process import Stopped, Worker, keep_worker, take_worker


class WorkerError(Exception):
    """A bug in gradcheck, raised in the worker; ``details`` holds its traceback there."""

    def __init__(self, details: str) -> None:
        super().__init__(details.strip().splitlines()[-1] if details.strip() else "the worker failed")
        self.details = details


@dataclass
class WorkerRun:
    """The parent's bookkeeping of one worker's part of a run: its job, its bounds, its worker, its manifest.

    ``-j 1`` has one; ``-j N`` one per worker (:mod:`gradcheck.pool`), each
    with the same job and the first manifest's ``functions``. Its worker is
    started with :meth:`launch` and :meth:`await_manifest` (or :meth:`ready`),
    checks with :meth:`check`, and is replaced by a fresh one after it was
    stopped; at the end it is kept (:meth:`finish_worker`) or killed
    (:meth:`discard_worker`).
    """

    job: Job
    import_timeout: float
    """Seconds each module's import may take while the worker collects; 0: no limit."""
    max_memory: int | None
    """The worker's resident memory bound in MB; None: no bound."""
    on_import: Callable[[str], None] | None
    """Hears of each module the worker is about to import."""
    sink: Callable[[str], None] | None
    """Receives what the worker prints; None: this process's own standard error (``sys.__stderr__``)."""
    worker: Worker | None = None
    """The worker now; None before the first and after one was stopped."""
    functions: list[ManifestEntry] = field(default_factory=list)
    """The first manifest's functions, in the order they are checked."""
    positions: dict[str, int] = field(default_factory=dict)
    """Where each function is in the current worker's manifest."""
    launched: bool = False
    """A worker was given the job and its manifest is still to be read (:meth:`launch`)."""

    def start_worker(self) -> WorkerManifest:
        """A worker with the job collected: its manifest, or a UsageError."""
        if not self.launched:
            self.launch()
        return self.await_manifest()

    def launch(self) -> None:
        """Give a worker the job without waiting: it imports TensorFlow and collects while others do too."""
        worker = take_worker()
        worker.sink = self.sink
        self.worker = worker
        self.launched = True
        with contextlib.suppress(Stopped):  # await_manifest finds it dead and says so
            worker.send(self.job)

    def await_manifest(self) -> WorkerManifest:
        """The manifest of the worker :meth:`launch` gave the job to, or a UsageError."""
        self.launched = False
        worker = self.worker
        if worker is None:
            raise UsageError("the checker process could not start: it was stopped")
        importing: str | None = None
        while True:
            deadline = time.monotonic() + self.import_timeout if importing and self.import_timeout else None
            try:
                message = worker.receive(deadline, self.max_memory if importing else None)
            except Stopped as stopped:
                self.discard_worker()
                raise UsageError(
                    _collection_stopped(stopped, importing, self.import_timeout, self.max_memory)
                ) from None
            if isinstance(message, Importing):
                importing = message.path
                if self.on_import is not None:
                    self.on_import(message.path)
            elif isinstance(message, WorkerManifest):
                if worker.startup is None:
                    worker.startup = time.perf_counter() - worker.created
                return message
            else:
                self.end_after_failure(message)

    def end_after_failure(self, message: Any) -> None:
        """A Refused or Crashed message: end the worker's run and raise the matching error.

        After bad input the worker has put everything back and is kept; after a
        bug in gradcheck nothing it holds can be trusted, so it is stopped.
        """
        if isinstance(message, Refused):
            self.finish_worker()
        else:
            self.discard_worker()
        if isinstance(message, Refused):
            error = UsageError(message.message)
            error.details = message.details
            raise error
        if isinstance(message, Crashed):
            raise WorkerError(message.details)
        raise WorkerError(f"unexpected message from the worker: {message!r}")

    def finish_worker(self) -> None:
        """End the worker's run cleanly and keep it for the next run."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        try:
            worker.send(End())
            reply = worker.receive(time.monotonic() + 60, None)
        except Stopped:
            worker.kill()
            return
        worker.wait_for_output()
        worker.sink = None
        if isinstance(reply, Ended):
            keep_worker(worker)
        else:
            worker.kill()

    def discard_worker(self) -> None:
        worker, self.worker = self.worker, None
        self.launched = False
        if worker is not None:
            worker.kill()
            worker.sink = None

    def check(self, index: int) -> Result:
        """Check the function at ``index`` of the first manifest in a worker, within its timeout and the memory bound.

        After a worker was stopped, a fresh one collects the targets again
        first; where it cannot, this function and every one after it are
        errors (:class:`gradcheck.run.Abandoned`).
        """
        if self.worker is None or self.launched:
            restarted = self.restart(self.functions[index:])
            if isinstance(restarted, Result):
                raise Abandoned([_copy_failure(restarted, rest) for rest in self.functions[index:]])
            self.positions = restarted
        assert self.worker is not None
        function = self.functions[index]
        start = time.monotonic()
        deadline = start + function.timeout if function.timeout else None
        try:
            self.worker.send(Check(self.positions[function.id]))
            message = self.worker.receive(deadline, self.max_memory)
        except Stopped as stopped:
            seconds = time.monotonic() - start  # before the kill, which may wait for the output pipe
            self.discard_worker()
            return _stopped_result(function, stopped, seconds, self.max_memory)
        if isinstance(message, Finished) and message.index == self.positions[function.id]:
            return message.result
        self.end_after_failure(message)
        raise AssertionError("unreachable")  # pragma: no cover

    def ready(self) -> bool:
        """Start this run's worker and collect, before any function is handed to it; False if it cannot.

        A worker that has the manifest already (the first one's) is ready as it is.
        """
        if self.worker is not None and not self.launched:
            return True
        restarted = self.restart(self.functions)
        if isinstance(restarted, Result):
            self.discard_worker()
            return False
        self.positions = restarted
        return True

    def kill(self) -> None:
        """Kill the worker's processes now, from another thread: the check in flight ends as an ``error``.

        The processes only: the thread in :meth:`check`, reading the pipes,
        finds them dead and discards the worker.
        """
        worker = self.worker
        if worker is not None:
            worker.kill_group()

    def restart(self, remaining: list[ManifestEntry]) -> dict[str, int] | Result:
        """A fresh worker after one was stopped: where each remaining function is in its manifest.

        A failure to collect again becomes the reason every remaining
        function is an error (returned as the result to copy).
        """
        try:
            manifest = self.start_worker()
        except UsageError as error:
            return Result(id="", name="", kind="function", status="error", problems=(_restart_problem(str(error)),))
        positions = {function.id: index for index, function in enumerate(manifest.functions)}
        missing = [f.id for f in remaining if f.id not in positions]
        if missing:
            return Result(
                id="",
                name="",
                kind="function",
                status="error",
                problems=(_restart_problem(f"{missing[0]} was not found when the module was imported again"),),
            )
        return positions


def _restart_problem(reason: str) -> Problem:
    return Problem(
        "exception",
        None,
        f"not checked: after an earlier function was stopped, a fresh checker could not collect the targets: {reason}",
    )


def _collection_stopped(stopped: Stopped, importing: str | None, timeout: float, max_memory: int | None) -> str:
    if importing is None:
        return f"the checker process could not start: {stopped.why or 'it stopped'}; run with -v to see why"
    if stopped.kind == "timeout":
        return (
            f"{importing}: importing the module did not finish within {timeout:g} s (--timeout); "
            "move slow work out of module level, or raise --timeout"
        )
    if stopped.kind == "memory":
        return (
            f"{importing}: importing the module used more than {max_memory} MB ({stopped.why}; --max-memory); "
            "move large allocations out of module level, or raise --max-memory"
        )
    return f"{importing}: importing the module ended the checker process: {stopped.why}"


def _stopped_result(function: ManifestEntry, stopped: Stopped, seconds: float, max_memory: int | None) -> Result:
    after = "; the functions after it were checked in a fresh process"
    if stopped.kind == "timeout":
        message = f"timeout: the check did not finish within {function.timeout:g} s (--timeout) and was stopped{after}"
        hint = "a loop that never ends, or a slow function: give it more time with timeout = SECONDS in its table"
    elif stopped.kind == "memory":
        message = (
            f"memory: the check used more than {max_memory} MB ({stopped.why}; --max-memory) and was stopped{after}"
        )
        hint = "smaller shapes in its config, or a higher --max-memory"
    else:
        message = f"the process checking this function died: {stopped.why}{after}"
        hint = None
    return Result(
        id=function.id,
        name=function.name,
        kind=function.kind,
        status="error",
        problems=(Problem("exception", None, message, hint=hint),),
        seconds=seconds,
        path=function.path,
        line=function.line,
        reproduce=function.reproduce,
    )


def _copy_failure(template: Result, function: ManifestEntry) -> Result:
    return Result(
        id=function.id,
        name=function.name,
        kind=function.kind,
        status="error",
        problems=template.problems,
        path=function.path,
        line=function.line,
        reproduce=function.reproduce,
    )
