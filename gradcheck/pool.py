"""``-j N``: check functions on N worker processes at once, and report them as one worker would.

Each worker is driven through a :class:`gradcheck.run.Runner` of its own
(in ``gradcheck run``, with the same job and the same bounds): it imports
the targets, lists the same functions in its manifest, and checks whichever function it is
handed within that function's timeout and the memory bound, exactly as the
single worker of ``-j 1`` does. A thread per worker waits on it (the
waiting is polling of pipes and ``/proc``, so the threads cost nothing while
the workers compute); the calling thread alone hands out functions in manifest
order, hears of every start and finish, and passes results on in manifest order.

So that the report is the one ``-j 1`` makes, only the results of an
unbroken prefix of the manifest count:

- ``--maxfail``: the run stops at the result, in manifest order, that reaches
  the limit; results of later functions that finished early are dropped,
  and the functions still being checked are stopped;
- Ctrl-C: every worker is stopped; the report has the prefix finished so far;
- a worker that cannot collect the targets again (:class:`gradcheck.run.Abandoned`)
  makes its function and every later one an error, as with ``-j 1``.

The first worker's manifest says how many functions there are; only then are
the other workers started, never more than there are functions. Each starts
its own worker and collects before it takes a function, so no function waits
on a worker still importing TensorFlow. With ``-j auto`` (:class:`Pace`) a
further worker starts only when the work still to hand out looks longer
than a worker's start-up: on a small run the start-up of a second worker
(seconds of TensorFlow's import, on cores the first worker is using) would
cost more than it saves.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gradcheck.results import Result, RunReport
from gradcheck.run import Abandoned, Manifest, Runner, collection_failures, run_report

#: How often (seconds) the calling thread wakes while it waits, so that Ctrl-C is heard at once.
_WAKE_SECONDS = 0.1


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), where the system tells it."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def worker_count(jobs: int | str) -> int:
    """How many workers ``jobs`` (``-j``) asks for: the number itself, or ``auto``: the usable cores."""
    return usable_cores() if jobs == "auto" else int(jobs)


def thread_environment(environ: dict[str, str], workers: int) -> dict[str, str]:
    """The environment of each of ``workers`` workers: TensorFlow's thread pools sized to share the cores.

    TensorFlow sizes its intra-op pool (the threads one matmul is spread
    over) and its inter-op pool to every core of the machine; N workers that
    each do so oversubscribe the cores N times over. Each worker gets its
    share instead (at least one thread). A value the user set is kept.
    """
    if workers <= 1:
        return environ
    share = str(max(1, usable_cores() // workers))
    sized = dict(environ)
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        sized.setdefault(name, share)
    return sized


@dataclass
class _Ordered:
    """The calling thread's record of a parallel run: results in manifest order, and where to stop."""

    ids: Sequence[str]
    manifest: Manifest
    maxfail: int | None
    on_result: Callable[[Result, int, int], None] | None
    results: list[Result] = field(default_factory=list)
    waiting: dict[int, Result] = field(default_factory=dict)
    """Results that finished before a function earlier in the manifest."""
    failures: int = 0
    done: bool = False
    """The run is over: every function reported, ``--maxfail`` reached, or abandoned."""

    cut: int | None = None
    """The first function that could not be checked (:class:`gradcheck.run.Abandoned`): the run ends there."""
    copies: list[Result] = field(default_factory=list)
    """The results that stand for the function at ``cut`` and every one after it."""

    def __post_init__(self) -> None:
        # Modules that failed to import count first: they may reach --maxfail before any check.
        self.done = self.maxfail is not None and self.failures >= self.maxfail

    def add(self, index: int, result: Result) -> None:
        """A finished result: pass on every result that is now next in manifest order."""
        if self.cut is None or index < self.cut:
            self.waiting[index] = result
        self._pass_on()

    def abandon(self, index: int, results: Sequence[Result]) -> None:
        """Function ``index`` and every one after it cannot be checked: they stand as ``results``."""
        if self.cut is not None and self.cut <= index:
            return
        self.cut = index
        self.copies = list(results)
        self._pass_on()

    def _pass_on(self) -> None:
        while not self.done and len(self.results) in self.waiting:
            position = len(self.results)
            result = self.waiting.pop(position)
            self.results.append(result)
            self.failures += result.status in self.manifest.fail_on
            if self.on_result is not None:
                self.on_result(result, position, len(self.ids))
            reached = self.maxfail is not None and self.failures >= self.maxfail
            self.done = reached or len(self.results) == len(self.ids)
        if not self.done and self.cut is not None and len(self.results) == self.cut:
            # As with -j 1 (gradcheck.run.check_all): the copies end the run, all of them, unannounced.
            self.results.extend(self.copies)
            self.done = True


@dataclass
class Pace:
    """When ``-j auto`` starts another worker: when the work not yet handed out looks longer than twice
    a worker's start-up (a worker pays the start-up before it helps, on cores the others use meanwhile)."""

    startup: float
    """Seconds the first worker took to start and collect the targets."""
    began: float = field(default_factory=time.monotonic)
    """When checking began."""
    first_done: float | None = None
    """When the first result came."""

    def worth_another(self, finished: int, handed_out: int, total: int, workers: int) -> bool:
        """Whether one more worker is worth starting, ``workers`` being at work already."""
        now = time.monotonic()
        if finished >= 1 and self.first_done is None:
            self.first_done = now
        waiting = total - handed_out
        if waiting < 2:
            return False
        if finished >= 2 and self.first_done is not None:
            # The first function is left out: it also pays TensorFlow's warm-up (tracing, kernels).
            per_function = (now - self.first_done) / (finished - 1)
        elif now - self.began > 4 * self.startup:
            per_function = now - self.began  # a lower bound, and too long to be warm-up alone
        else:
            return False
        return per_function * waiting / workers > 2 * self.startup


class _Slot:
    """One worker and the thread that waits on it; it takes functions from :class:`_Dispatcher`."""

    def __init__(self, runner: Runner, dispatcher: _Dispatcher) -> None:
        self.runner = runner
        self.dispatcher = dispatcher
        self.thread = threading.Thread(target=self._work, name="gradcheck-pool-slot", daemon=True)

    def _work(self) -> None:
        events = self.dispatcher.events
        try:
            ready = self.runner.ready()
        except Exception:  # this worker cannot start: the others carry on without it
            ready = False
        if not ready:
            return
        while True:
            index = self.dispatcher.next_index()
            if index is None:
                return
            events.put(("start", index, None))
            try:
                result = self.runner.check(index)
            except Abandoned as abandoned:
                events.put(("abandoned", index, abandoned.results))
                return
            except BaseException as error:  # a bug, or bad input met again: the calling thread raises it
                events.put(("raised", index, error))
                return
            events.put(("finished", index, result))

    def stop(self) -> None:
        """Kill the worker now (from the calling thread): its check ends as an error nobody reads."""
        self.runner.kill()


class _Dispatcher:
    """Functions handed out in manifest order, until the run stops."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self._next = 0
        self._lock = threading.Lock()
        self.stopped = threading.Event()

    @property
    def handed_out(self) -> int:
        return self._next

    def next_index(self) -> int | None:
        with self._lock:
            if self.stopped.is_set() or self._next >= self.total:
                return None
            index, self._next = self._next, self._next + 1
            return index


def check_parallel(
    ids: Sequence[str],
    runners: Sequence[Runner],
    manifest: Manifest,
    maxfail: int | None,
    started: float,
    on_start: Callable[[str, int, int], None] | None = None,
    on_result: Callable[[Result, int, int], None] | None = None,
    pace: Pace | None = None,
) -> RunReport:
    """Check every function of ``ids`` (the manifest's, in order) on all ``runners`` at once; the report of ``-j 1``.

    The first runner is ready (its worker has the manifest), each other one gets
    ready (:meth:`gradcheck.run.Runner.ready`) before it takes a function.
    With ``pace`` the others start one at a time, when
    :meth:`Pace.worth_another` says so; without, all at once. The workers are
    stopped (:meth:`gradcheck.run.Runner.kill`) when the run stops early; the
    caller ends the ones left.
    Exceptions a check raises (a bug, bad input) are raised here once every
    worker is stopped.
    """
    dispatcher = _Dispatcher(len(ids))
    ordered = _Ordered(ids, manifest, maxfail, on_result, failures=collection_failures(manifest))
    slots = [_Slot(runner, dispatcher) for runner in runners]
    for slot in slots[:1] if pace is not None else slots:
        slot.thread.start()
    interrupted = False
    raised: BaseException | None = None
    try:
        raised = _collect(dispatcher, ordered, slots, on_start, pace)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        complete = not interrupted and raised is None and len(ordered.results) == len(ids) and ordered.cut is None
        # Only a run that checked everything leaves its workers to finish cleanly (and be kept).
        _stop_all(dispatcher, slots, stop_workers=not complete)
    if raised is not None:
        raise raised
    return run_report(ids, ordered.results, manifest, maxfail, started, interrupted)


def _collect(
    dispatcher: _Dispatcher,
    ordered: _Ordered,
    slots: list[_Slot],
    on_start: Callable[[str, int, int], None] | None,
    pace: Pace | None = None,
) -> BaseException | None:
    """Hear the slots' events until the run is over; the exception a check raised, if one did."""
    while not ordered.done:
        waiting = [slot for slot in slots if slot.thread.ident is None]
        started = len(slots) - len(waiting)
        if (
            waiting
            and pace is not None
            and pace.worth_another(len(ordered.results), dispatcher.handed_out, len(ordered.ids), started)
        ):
            waiting[0].thread.start()
        if not any(slot.thread.is_alive() for slot in slots) and dispatcher.events.empty():
            # Every slot ended without the run being over: only a stop can do that.
            return None
        try:
            kind, index, payload = dispatcher.events.get(timeout=_WAKE_SECONDS)
        except queue.Empty:
            continue
        if kind == "start":
            if on_start is not None and index >= len(ordered.results):
                on_start(ordered.ids[index], index, len(ordered.ids))
        elif kind == "finished":
            ordered.add(index, payload)
        elif kind == "abandoned":
            ordered.abandon(index, payload)
            dispatcher.stopped.set()  # every function before it was handed out already
        else:
            return payload
        if ordered.done:
            dispatcher.stopped.set()
    return None


def _stop_all(dispatcher: _Dispatcher, slots: list[_Slot], stop_workers: bool) -> None:
    """No more functions are handed out; with ``stop_workers`` the checks in flight are killed too."""
    dispatcher.stopped.set()
    while any(slot.thread.is_alive() for slot in slots):
        if stop_workers:
            # Again each time round: a slot may have just started a fresh worker after a stop.
            for slot in slots:
                slot.stop()
        for slot in slots:
            if slot.thread.ident is not None:  # a slot -j auto never started has no thread to wait for
                slot.thread.join(timeout=_WAKE_SECONDS)
