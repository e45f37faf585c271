"""``gradcheck run``'s checks in a worker process, each under a time and a memory bound.

A user's function may never return (a ``tf.while_loop`` that never ends, a
``time.sleep``), allocate without bound, or end the process it runs in
(``os._exit``, a crash inside TensorFlow). None of that can be stopped from
inside the process, so the command line runs collection and checks in a
worker: a fresh Python interpreter (started like ``multiprocessing``'s
``spawn``, never forked from a process that has imported TensorFlow). The
parent, which never imports TensorFlow, watches it: a check that runs past
its timeout or past the memory bound, or a worker that dies, makes that
function an ``error`` result, and a fresh worker checks the functions after
it.

The protocol is lock-step, over two pipes (the worker's standard input and
output; pickled messages, framed by :mod:`multiprocessing.connection`)::

    parent                              worker
    Job(options, cwd, sys.path, env) ->
                                     <- Importing(path)          per module: the timeout runs
                                     <- Planned(functions, ...)  or Refused (usage error) / Crashed (bug)
    Check(index)                     ->
                                     <- Finished(index, result)  or Crashed
    ...
    End()                            ->
                                     <- Ended()                  the worker is back as it was

so the parent always knows which function is in flight, and decides alone
what is checked next (``--maxfail``, Ctrl-C). What the worker (the user's
code, TensorFlow) writes to its standard output or error arrives on a third
pipe and is passed on to the parent's standard error, never into a report.

Every process the user's code starts ends with the check that started it
(one started by a module's import, with the run): the worker is a session
and process group of its own and the subreaper of its orphans, kills what a
check left after it, and is killed with all of it after a timeout. A copy of
the worker made by the user's ``os.fork()`` never talks to the parent.

A worker whose run ended cleanly waits for the next run of the same parent
process (a test suite, an IDE), which then pays TensorFlow's import once; its
state is put back after every run (:mod:`gradcheck.state`).
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from gradcheck.errors import UsageError
from gradcheck.results import Collection, Problem, Result, RunReport
from gradcheck.run import Abandoned, check_all

#: The worker's exit code when the user's code closed the descriptors of its pipes to the parent.
LOST_PIPES = 86
#: How often (seconds) the parent looks at the worker's memory while it waits. The bound is kept
#: by polling, not by a resource limit: RLIMIT_AS and RLIMIT_DATA count address space that
#: TensorFlow reserves and never touches (gigabytes), and a failed allocation inside TensorFlow's
#: C++ aborts the process instead of raising. Between two looks a worker filling fresh pages at a
#: few GB/s gains tens of MB.
POLL_SECONDS = 0.01
#: Written by the worker to its output pipe at the end of a run, so the parent knows it has
#: passed on everything the run printed before it renders the report.
_SYNC = b"\x1e-gradcheck-output-sync-\x1e\n"


# -- messages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A run for the worker: the options and the parent's surroundings."""

    options: Any
    """The :class:`gradcheck.session.RunOptions`."""
    cwd: str
    sys_path: tuple[str, ...]
    environ: dict[str, str]
    verbose: bool


@dataclass(frozen=True)
class Check:
    """Check the function at ``index`` of the plan."""

    index: int


@dataclass(frozen=True)
class End:
    """The run is over: put everything back and wait for the next one."""


@dataclass(frozen=True)
class Importing:
    """The worker is about to import a user's module."""

    path: str


@dataclass(frozen=True)
class PlannedFunction:
    """What the parent needs to know of a function to report on it without the worker."""

    id: str
    name: str
    kind: str
    path: str
    line: int
    timeout: float
    """Seconds its check may take; 0: no limit."""
    reproduce: str | None


@dataclass(frozen=True)
class Planned:
    """Collection is over: what the run will check."""

    functions: tuple[PlannedFunction, ...]
    seed: int
    fail_on: tuple[str, ...]
    module_results: tuple[Result, ...] = ()
    """The modules of a walk that failed to import: reported before the checks."""
    collection: Collection | None = None
    """What collection scanned, imported, excluded and failed to import."""


@dataclass(frozen=True)
class Finished:
    """The check of the function at ``index`` is done."""

    index: int
    result: Result


@dataclass(frozen=True)
class Refused:
    """Bad input (a usage error): one line, and the traceback behind it for ``-v``."""

    message: str
    details: str | None


@dataclass(frozen=True)
class Crashed:
    """A bug in gradcheck: its traceback."""

    details: str


@dataclass(frozen=True)
class Ended:
    """The worker has put everything back after a run."""


# -- errors the parent raises -----------------------------------------------------------------


class WorkerError(Exception):
    """A bug in gradcheck, raised in the worker; ``details`` holds its traceback there."""

    def __init__(self, details: str) -> None:
        super().__init__(details.strip().splitlines()[-1] if details.strip() else "the worker failed")
        self.details = details


class _Stopped(Exception):
    """The worker was stopped (timeout, memory) or died; ``why`` says how, for a message."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind
        self.why = why


# -- the parent's side ------------------------------------------------------------------------


def resident_megabytes(pid: int, field: str = "VmRSS") -> float | None:
    """The resident memory of process ``pid`` in MB, where ``/proc`` tells it (Linux).

    ``field``: ``VmRSS`` (now) or ``VmHWM`` (the peak so far).
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), read from ``/proc`` (Linux; elsewhere none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                parent = int(stat.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        child = queue.pop()
        if child not in found:
            found.append(child)
            queue.extend(children.get(child, []))
    return found


def kill_processes(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that is still there."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def default_max_memory() -> int | None:
    """Half the machine's memory in MB (where ``/proc/meminfo`` tells it), else no bound."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024 // 2
    except (OSError, ValueError, IndexError):
        return None
    return None


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code == LOST_PIPES:
        return "it lost its pipes to gradcheck: the function closed file descriptors it had not opened"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return f"it was killed ({name}; the system may have run out of memory)"
        return f"it was killed by {name}"
    return f"it exited with code {code} (os._exit or a crash in native code)"


class Worker:
    """A worker process and the pipes to it."""

    def __init__(self) -> None:
        command_read, command_write = os.pipe()
        reply_read, reply_write = os.pipe()
        package_parent = str(Path(__file__).resolve().parent.parent)
        # `python -c` puts the current directory first on sys.path, where a user's file could
        # shadow the standard library; the worker takes the parent's sys.path with each job.
        boot = (
            "import sys; sys.path[:1] = [] if sys.path and sys.path[0] == '' else sys.path[:1]; "
            f"sys.path.insert(0, {package_parent!r}); from gradcheck.worker import serve; serve()"
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", boot],
                stdin=command_read,
                stdout=reply_write,
                stderr=subprocess.PIPE,
                close_fds=True,
                # A session of its own: the worker and whatever the user's code starts are one
                # process group, stopped as a whole (kill_group), and the terminal's Ctrl-C or a
                # CI runner's group SIGTERM reaches the parent alone, which decides what stops.
                start_new_session=True,
            )
        finally:
            os.close(command_read)
            os.close(reply_write)
        self.commands = Connection(command_write, readable=False)
        self.replies = Connection(reply_read, writable=False)
        self.owner = os.getpid()
        """The process that started the worker: a forked child must not talk to it too."""
        self.sink: Callable[[str], None] | None = None
        self._synced = threading.Event()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._pass_on_output, name="gradcheck-worker-output", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: Any) -> None:
        try:
            self.commands.send(message)
        except OSError as error:  # a broken pipe: the worker is gone
            raise _Stopped("died", _describe_exit(self._exit_code())) from error

    def receive(self, deadline: float | None, max_memory: int | None) -> Any:
        """The next message; raise :class:`_Stopped` past ``deadline`` or ``max_memory`` MB, or if the worker dies."""
        while True:
            wait = POLL_SECONDS if (deadline is not None or max_memory is not None) else None
            if deadline is not None:
                wait = max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))
            if self.replies.poll(wait):
                try:
                    return self.replies.recv()
                except (EOFError, OSError):
                    raise _Stopped("died", _describe_exit(self._exit_code())) from None
            if not self.alive:
                raise _Stopped("died", _describe_exit(self._exit_code()))
            if deadline is not None and time.monotonic() >= deadline:
                raise _Stopped("timeout", "")
            if max_memory is not None:
                used = resident_megabytes(self.process.pid)
                if used is not None and used > max_memory:
                    # Stopped at once (it may allocate on until the kill), then its peak read.
                    with contextlib.suppress(OSError):
                        os.killpg(self.process.pid, signal.SIGSTOP)
                    peak = resident_megabytes(self.process.pid, "VmHWM") or used
                    raise _Stopped("memory", f"peak {peak:.0f} MB")

    def _exit_code(self) -> int | None:
        try:
            return self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def wait_for_output(self) -> None:
        """Wait until the output the worker wrote before its last :class:`Ended` has been passed on."""
        self._synced.wait(timeout=5)
        self._synced.clear()

    def kill_group(self) -> None:
        """SIGKILL the worker and every process below it, its process group and any that left it."""
        below = descendants(self.process.pid)
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.process.kill()
        kill_processes(below)

    def kill(self) -> None:
        """Stop the worker now, whatever it is doing, with every process the user's code started."""
        self.kill_group()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        for connection in (self.commands, self.replies):
            with contextlib.suppress(OSError):
                connection.close()
        self._reader.join(timeout=5)
        if not self._reader.is_alive() and self.process.stderr is not None:
            self.process.stderr.close()

    def close(self) -> None:
        """Let an idle worker end on its own (it stops when its input closes), else kill it."""
        with contextlib.suppress(OSError):
            self.commands.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill_group()
        with contextlib.suppress(OSError):
            self.replies.close()

    def _pass_on_output(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = b""
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self._emit(decoder.decode(pending, final=True))
                self._synced.set()
                return
            pending += chunk
            while _SYNC in pending:
                before, pending = pending.split(_SYNC, 1)
                self._emit(decoder.decode(before))
                self._synced.set()
            # Keep back what may be the start of a marker cut in two by the pipe.
            keep = next((n for n in range(len(_SYNC) - 1, 0, -1) if pending.endswith(_SYNC[:n])), 0)
            self._emit(decoder.decode(pending[: len(pending) - keep]))
            pending = pending[len(pending) - keep :]

    def _emit(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            sink = self.sink
            try:
                if sink is not None:
                    sink(text)
                elif sys.__stderr__ is not None:
                    sys.__stderr__.write(text)
                    sys.__stderr__.flush()
            except (OSError, ValueError):  # the stream went away with its run
                pass


#: A worker whose last run ended cleanly, kept for the next run of this process.
_idle: Worker | None = None
_idle_lock = threading.Lock()


def _take_worker() -> Worker:
    global _idle
    with _idle_lock:
        worker, _idle = _idle, None
    if worker is not None and worker.alive and worker.owner == os.getpid():
        return worker
    return Worker()


def _keep_worker(worker: Worker) -> None:
    global _idle
    with _idle_lock:
        previous, _idle = _idle, worker
    if previous is not None:
        previous.close()


@atexit.register
def _close_idle_worker() -> None:
    global _idle
    with _idle_lock:
        worker, _idle = _idle, None
    if worker is not None:
        worker.close()


@dataclass
class _Run:
    """The parent's bookkeeping of one run."""

    job: Job
    import_timeout: float
    max_memory: int | None
    on_import: Callable[[str], None] | None
    sink: Callable[[str], None] | None
    worker: Worker | None = None
    functions: list[PlannedFunction] = field(default_factory=list)
    """The first plan's functions, in the order they are checked."""
    positions: dict[str, int] = field(default_factory=dict)
    """Where each function is in the current worker's plan."""
    launched: bool = False
    """A worker was given the job and its plan is still to be read (:meth:`launch`)."""

    def start_worker(self) -> Planned:
        """A worker with the job collected: its plan, or a UsageError."""
        if not self.launched:
            self.launch()
        return self.await_plan()

    def launch(self) -> None:
        """Give a worker the job without waiting: it imports TensorFlow and collects while others do too."""
        worker = _take_worker()
        worker.sink = self.sink
        self.worker = worker
        self.launched = True
        with contextlib.suppress(_Stopped):  # await_plan finds it dead and says so
            worker.send(self.job)

    def await_plan(self) -> Planned:
        """The plan of the worker :meth:`launch` gave the job to, or a UsageError."""
        self.launched = False
        worker = self.worker
        if worker is None:
            raise UsageError("the checker process could not start: it was stopped")
        importing: str | None = None
        while True:
            deadline = time.monotonic() + self.import_timeout if importing and self.import_timeout else None
            try:
                message = worker.receive(deadline, self.max_memory if importing else None)
            except _Stopped as stopped:
                self.discard_worker()
                raise UsageError(
                    _collection_stopped(stopped, importing, self.import_timeout, self.max_memory)
                ) from None
            if isinstance(message, Importing):
                importing = message.path
                if self.on_import is not None:
                    self.on_import(message.path)
            elif isinstance(message, Planned):
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
        except _Stopped:
            worker.kill()
            return
        worker.wait_for_output()
        worker.sink = None
        if isinstance(reply, Ended):
            _keep_worker(worker)
        else:
            worker.kill()

    def discard_worker(self) -> None:
        worker, self.worker = self.worker, None
        self.launched = False
        if worker is not None:
            worker.kill()
            worker.sink = None

    def check(self, index: int) -> Result:
        """Check the function at ``index`` of the first plan in a worker, within its timeout and the memory bound.

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
        except _Stopped as stopped:
            seconds = time.monotonic() - start  # before the kill, which may wait for the output pipe
            self.discard_worker()
            return _stopped_result(function, stopped, seconds, self.max_memory)
        if isinstance(message, Finished) and message.index == self.positions[function.id]:
            return message.result
        self.end_after_failure(message)
        raise AssertionError("unreachable")  # pragma: no cover

    def ready(self) -> bool:
        """Start this run's worker and collect, before any function is handed to it; False if it cannot."""
        restarted = self.restart(self.functions)
        if isinstance(restarted, Result):
            self.discard_worker()
            return False
        self.positions = restarted
        return True

    def restart(self, remaining: list[PlannedFunction]) -> dict[str, int] | Result:
        """A fresh worker after one was stopped: where each remaining function is in its plan.

        A failure to collect again becomes the reason every remaining
        function is an error (returned as the result to copy).
        """
        try:
            planned = self.start_worker()
        except UsageError as error:
            return Result(id="", name="", kind="function", status="error", problems=(_restart_problem(str(error)),))
        positions = {function.id: index for index, function in enumerate(planned.functions)}
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


def _collection_stopped(stopped: _Stopped, importing: str | None, timeout: float, max_memory: int | None) -> str:
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


def _stopped_result(function: PlannedFunction, stopped: _Stopped, seconds: float, max_memory: int | None) -> Result:
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
    runner = _Run(
        _job(options, verbose, 1 if jobs == "auto" else workers),
        import_timeout,
        max_memory,
        on_import,
        on_output or _write_to_stderr,
    )
    try:
        runner.launch()
        planned = runner.await_plan()
    except BaseException:
        runner.discard_worker()
        raise
    startup = time.perf_counter() - start
    runner.functions = list(planned.functions)
    runner.positions = {function.id: index for index, function in enumerate(runner.functions)}
    # Helpers are made only now that the plan says how many functions there are: never more
    # workers than functions. Each starts its own worker (TensorFlow's import, collection) when
    # its slot begins, quietly (on_import is the first one's).
    count = min(workers, len(runner.functions))
    helper_job = _job(options, verbose, count)
    helpers = [_Run(helper_job, import_timeout, max_memory, None, runner.sink) for _ in range(count - 1)]
    for helper in helpers:
        helper.functions = runner.functions
    pace = pool.Pace(startup) if jobs == "auto" else None
    try:
        if helpers:
            report = pool.check_parallel(
                [runner, *helpers], planned, options.maxfail, start, on_start, on_result, pace=pace
            )
        else:
            ids = [function.id for function in runner.functions]
            report = check_all(ids, runner.check, planned, options.maxfail, start, on_start, on_result)
    except BaseException:
        for each in (runner, *helpers):
            each.discard_worker()
        raise
    for helper in helpers:
        helper.discard_worker()  # one idle worker is kept for a next run: the first one
    if report.interrupted:
        runner.discard_worker()
        return report
    try:
        runner.finish_worker()
    except KeyboardInterrupt:  # while the worker was put back after the last check
        runner.discard_worker()
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


def _copy_failure(template: Result, function: PlannedFunction) -> Result:
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


def _write_to_stderr(text: str) -> None:
    # Looked up at each write: the command line's stream may be swapped (a progress bar, CliRunner).
    sys.stderr.write(text)
    sys.stderr.flush()


# -- the worker's side ------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (a killed parent leaves no hung worker)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def _become_subreaper() -> None:
    """Ask Linux to make this process the parent of its orphaned descendants, so that none escapes
    :func:`_end_user_processes` by a double fork."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_child_subreaper = 36
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1)


#: The worker's own process id: a copy made by the user's os.fork() is not the worker.
_WORKER_PID = os.getpid()


def _end_user_processes(keep: frozenset[int] = frozenset()) -> None:
    """Kill every process the user's code started (a ``subprocess``, a daemon, a forked copy), but ``keep``.

    ``keep``: the processes there before the check began (started by a module's import, which its
    functions may use); they end with the job.
    """
    if os.getpid() != _WORKER_PID:
        os._exit(0)  # a copy of the worker forked by the user's code: it must not talk to the parent
    ended = [pid for pid in descendants(_WORKER_PID) if pid not in keep]
    kill_processes(ended)
    for pid in ended:  # the children among them (orphans come to the subreaper): no zombies left
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def _user_processes() -> frozenset[int]:
    return frozenset(descendants(_WORKER_PID))


def serve() -> None:
    """The worker's main loop: take jobs from standard input, answer on standard output, until input ends."""
    global _WORKER_PID
    # Ctrl-C reaches the whole process group; the parent alone decides what it stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER_PID = os.getpid()
    _die_with_parent()
    _become_subreaper()
    commands = Connection(os.dup(0), writable=False)
    replies = _Replies(Connection(os.dup(1), readable=False))
    # Whatever the user's code or TensorFlow prints, even from C, goes to the output pipe.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    while True:
        try:
            job = commands.recv()
        except (EOFError, OSError):
            return
        if isinstance(job, Job):
            _serve_job(job, commands, replies)


class _Replies:
    """The worker's side of the reply pipe; the worker ends quietly (:data:`LOST_PIPES`) where the
    user's code closed it, and the parent reports that function."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def send(self, message: Any) -> None:
        try:
            self.connection.send(message)
        except (OSError, ValueError):
            os._exit(LOST_PIPES)


def _serve_job(job: Job, commands: Connection, replies: _Replies) -> None:
    saved_path, saved_environ = list(sys.path), dict(os.environ)
    sys.path[:] = list(job.sys_path)
    os.environ.clear()
    os.environ.update(job.environ)
    try:
        _answer(job, commands, replies)
    finally:
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_environ)
        # What the modules' imports started ends with the job, as the modules themselves.
        _end_user_processes()
        # An idle worker needs no directory of its own, and the job's may be gone by the next job.
        os.chdir(os.sep)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):  # the user's code closed it: the parent then waits 5 s, no more
            os.write(2, _SYNC)
        replies.send(Ended())


def _answer(job: Job, commands: Connection, replies: _Replies) -> None:
    from gradcheck import _tf, state

    _tf.set_verbose(job.verbose)
    try:
        os.chdir(job.cwd)
        _tf.tensorflow()
    except UsageError as error:  # TensorFlow is not installed
        replies.send(Refused(str(error), None))
    except FileNotFoundError:
        replies.send(Refused(f"{job.cwd}: the current directory does not exist (any more)", None))
    else:
        # Whatever the job leaves that the snapshots around imports and checks do not cover
        # (a package's __init__ run while a dotted target is looked up) ends with the job,
        # so the next job of this worker starts as this one did.
        with state.preserved():
            _plan_and_check(job, commands, replies)
        return
    _until_end(commands)


def _plan_and_check(job: Job, commands: Connection, replies: _Replies) -> None:
    from gradcheck import session, state

    plan = None
    try:
        plan = session.plan_run(job.options, on_import=lambda path: replies.send(Importing(path)))
    except UsageError as error:
        cause = error.__cause__
        details = "".join(traceback.format_exception(cause)) if cause is not None else None
        replies.send(Refused(str(error), details))
    except Exception:
        replies.send(Crashed(traceback.format_exc()))
    if plan is None:
        _until_end(commands)
        return
    replies.send(
        Planned(
            functions=tuple(
                PlannedFunction(
                    id=r.subject.id,
                    name=r.subject.name,
                    kind=r.subject.kind,
                    path=r.subject.path,
                    line=r.subject.line,
                    timeout=r.settings.timeout,
                    reproduce=r.reproduce,
                )
                for r in plan.requests
            ),
            seed=plan.seed,
            fail_on=plan.fail_on,
            module_results=plan.module_results,
            collection=plan.collection,
        )
    )
    while True:
        command = _next_command(commands)
        if isinstance(command, End):
            return
        if isinstance(command, Check):
            before = _user_processes()
            descriptors = state.Descriptors()
            try:
                result = session.check_one(plan.requests[command.index])
                message: Any = Finished(command.index, result)
            except Exception:  # a bug in gradcheck (results are plain records, and pickle)
                message = Crashed(traceback.format_exc())
            finally:
                descriptors.restore()
                descriptors.close()
                _end_user_processes(before)
            replies.send(message)


def _next_command(commands: Connection) -> Any:
    try:
        return commands.recv()
    except EOFError:
        os._exit(0)  # the parent is gone: nobody wants the rest
    except OSError:
        os._exit(LOST_PIPES)  # the user's code closed the pipe's descriptor


def _until_end(commands: Connection) -> None:
    """After a refusal: wait for the parent to end the run."""
    while not isinstance(_next_command(commands), End):
        pass
