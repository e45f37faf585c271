"""The protocol between the parent and its worker: the messages, the worker's own exit code, the output marker.

The protocol is lock-step, over two pipes (the worker's standard input and
output; pickled messages, framed by :mod:`multiprocessing.connection`)::

    parent                              worker
    Job(options, cwd, sys.path, env) ->
                                     <- Importing(path)                 per module: the timeout runs
                                     <- WorkerManifest(functions, ...)  or Refused (usage error) / Crashed (bug)
    Check(index)                     ->
                                     <- Finished(index, result)         or Crashed
    ...
    End()                            ->
                                     <- Ended()                         the worker is back as it was

so the parent always knows which function is in flight, and decides alone
what is checked next (``--maxfail``, Ctrl-C). What the worker (the user's
code, TensorFlow) writes to its standard output or error arrives on a third
pipe and is passed on to the parent's standard error, never into a report;
:data:`OUTPUT_SYNC` marks on it where a run's output ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradcheck.results import Collection, Result

#: The worker's exit code when the user's code closed the descriptors of its pipes to the parent.
LOST_PIPES = 86
#: Written by the worker to its output pipe at the end of a run, so the parent knows it has
#: passed on everything the run printed before it renders the report.
OUTPUT_SYNC = b"\x1e-gradcheck-output-sync-\x1e\n"


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
    """Check the function at ``index`` of the manifest."""

    index: int


@dataclass(frozen=True)
class End:
    """The run is over: put everything back and wait for the next one."""


@dataclass(frozen=True)
class Importing:
    """The worker is about to import a user's module."""

    path: str


@dataclass(frozen=True)
class ManifestEntry:
    """One function of the manifest: what the parent needs to know of it to report on it without the worker."""

    id: str
    name: str
    kind: str
    path: str
    line: int
    timeout: float
    """Seconds its check may take; 0: no limit."""
    reproduce: str | None


@dataclass(frozen=True)
class WorkerManifest:
    """Collection is over: the run's manifest, what it will check (a :class:`gradcheck.run.Manifest`)."""

    functions: tuple[ManifestEntry, ...]
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
