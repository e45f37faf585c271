"""The worker's side: :func:`serve`, the main loop of the child process, and the processes it ends.

The worker takes jobs on its standard input and answers on its standard
output (:mod:`gradcheck.worker.messages`); what the user's code or
TensorFlow prints, even from C, goes to a third pipe. Every process the
user's code starts ends with the check that started it (one started by a
module's import, with the run): the worker is the subreaper of its orphans
and kills what a check left after it. A copy of the worker made by the
user's ``os.fork()`` never talks to the parent. Its state is put back after
every run (:mod:`gradcheck.state`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from gradcheck.errors import UsageError
from gradcheck.worker.messages import (
    LOST_PIPES,
    OUTPUT_SYNC,
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
from gradcheck.worker.procfs import descendants, kill_processes


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
            os.write(2, OUTPUT_SYNC)
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
            _collect_and_check(job, commands, replies)
        return
    _until_end(commands)


def _collect_and_check(job: Job, commands: Connection, replies: _Replies) -> None:
    from gradcheck import session, state

    manifest = None
    try:
        manifest = session.run_manifest(job.options, on_import=lambda path: replies.send(Importing(path)))
    except UsageError as error:
        cause = error.__cause__
        details = "".join(traceback.format_exception(cause)) if cause is not None else None
        replies.send(Refused(str(error), details))
    except Exception:
        replies.send(Crashed(traceback.format_exc()))
    if manifest is None:
        _until_end(commands)
        return
    replies.send(
        WorkerManifest(
            functions=tuple(
                ManifestEntry(
                    id=r.subject.id,
                    name=r.subject.name,
                    kind=r.subject.kind.reported,
                    path=r.subject.path,
                    line=r.subject.line,
                    timeout=r.settings.timeout,
                    reproduce=r.reproduce,
                )
                for r in manifest.requests
            ),
            seed=manifest.seed,
            fail_on=manifest.fail_on,
            module_results=manifest.module_results,
            collection=manifest.collection,
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
                result = session.check_one(manifest.requests[command.index])
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
