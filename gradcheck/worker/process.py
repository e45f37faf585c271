"""The worker process seen from the parent: its start, its pipes, its output, its memory, its end.

:class:`Worker` starts a fresh Python interpreter (like ``multiprocessing``'s
``spawn``, never forked from a process that has imported TensorFlow) in a
session and process group of its own, running :func:`gradcheck.worker.server.serve`.
A thread passes on what it prints; :meth:`Worker.receive` waits for the next
message while it polls the worker's memory and the deadline, and raises
:class:`Stopped` past either or when the worker dies.

A worker whose run ended cleanly is kept (:func:`keep_worker`) for the next
run of the same parent process (a test suite, an IDE), which then pays
TensorFlow's import once (:func:`take_worker`).
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from gradcheck.worker.messages import LOST_PIPES, OUTPUT_SYNC
from gradcheck.worker.procfs import descendants, kill_processes, resident_megabytes

#: How often (seconds) the parent looks at the worker's memory while it waits. The bound is kept
#: by polling, not by a resource limit: RLIMIT_AS and RLIMIT_DATA count address space that
#: TensorFlow reserves and never touches (gigabytes), and a failed allocation inside TensorFlow's
#: C++ aborts the process instead of raising. Between two looks a worker filling fresh pages at a
#: few GB/s gains tens of MB.
POLL_SECONDS = 0.01


class Stopped(Exception):
    """The worker was stopped (timeout, memory) or died; ``why`` says how, for a message."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind
        self.why = why


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
        package_parent = str(Path(__file__).resolve().parents[2])
        # `python -c` puts the current directory first on sys.path, where a user's file could
        # shadow the standard library; the worker takes the parent's sys.path with each job.
        boot = (
            "import sys; sys.path[:1] = [] if sys.path and sys.path[0] == '' else sys.path[:1]; "
            f"sys.path.insert(0, {package_parent!r}); from gradcheck.worker.server import serve; serve()"
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
        self.created = time.perf_counter()
        self.startup: float | None = None
        """Seconds from its start to its first manifest (TensorFlow's import, collection): what a fresh worker
        costs, which ``-j auto`` weighs; a worker kept idle from an earlier run costs a new one no less."""
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
            raise Stopped("died", _describe_exit(self._exit_code())) from error

    def receive(self, deadline: float | None, max_memory: int | None) -> Any:
        """The next message; raise :class:`Stopped` past ``deadline`` or ``max_memory`` MB, or if the worker dies."""
        while True:
            wait = POLL_SECONDS if (deadline is not None or max_memory is not None) else None
            if deadline is not None:
                wait = max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))
            if self.replies.poll(wait):
                try:
                    return self.replies.recv()
                except (EOFError, OSError):
                    raise Stopped("died", _describe_exit(self._exit_code())) from None
            if not self.alive:
                raise Stopped("died", _describe_exit(self._exit_code()))
            if deadline is not None and time.monotonic() >= deadline:
                raise Stopped("timeout", "")
            if max_memory is not None:
                used = resident_megabytes(self.process.pid)
                if used is not None and used > max_memory:
                    # Stopped at once (it may allocate on until the kill), then its peak read.
                    with contextlib.suppress(OSError):
                        os.killpg(self.process.pid, signal.SIGSTOP)
                    peak = max(resident_megabytes(self.process.pid, "VmHWM") or used, used)
                    # Rounded up: a peak of 1500.3 MB over a 1500 MB bound must not read "peak 1500 MB".
                    raise Stopped("memory", f"peak {math.ceil(peak)} MB")

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
            while OUTPUT_SYNC in pending:
                before, pending = pending.split(OUTPUT_SYNC, 1)
                self._emit(decoder.decode(before))
                self._synced.set()
            # Keep back what may be the start of a marker cut in two by the pipe.
            keep = next((n for n in range(len(OUTPUT_SYNC) - 1, 0, -1) if pending.endswith(OUTPUT_SYNC[:n])), 0)
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


def take_worker() -> Worker:
    global _idle
    with _idle_lock:
        worker, _idle = _idle, None
    if worker is not None and worker.alive and worker.owner == os.getpid():
        return worker
    return Worker()


def keep_worker(worker: Worker) -> None:
    global _idle
    with _idle_lock:
        previous, _idle = _idle, worker
    if previous is not None:
        previous.close()


@atexit.register
def close_idle_worker() -> None:
    global _idle
    with _idle_lock:
        worker, _idle = _idle, None
    if worker is not None:
        worker.close()
