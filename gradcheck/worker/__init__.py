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

Every process the user's code starts ends with the check that started it
(one started by a module's import, with the run): the worker is a session
and process group of its own and the subreaper of its orphans, kills what a
check left after it, and is killed with all of it after a timeout. A copy of
the worker made by the user's ``os.fork()`` never talks to the parent.

A worker whose run ended cleanly waits for the next run of the same parent
process (a test suite, an IDE), which then pays TensorFlow's import once; its
state is put back after every run (:mod:`gradcheck.state`).

The rooms: :mod:`~gradcheck.worker.messages` (the protocol, both sides),
:mod:`~gradcheck.worker.procfs` (``/proc``: memory, descendants, kills),
:mod:`~gradcheck.worker.process` (the worker process seen from the parent, and
the idle worker kept between runs), :mod:`~gradcheck.worker.bookkeeping` (the
parent's record of one worker's part of a run), :mod:`~gradcheck.worker.server`
(the child's main loop), :mod:`~gradcheck.worker.driver` (:func:`run`).
"""

from __future__ import annotations

from gradcheck.worker.bookkeeping import WorkerError
from gradcheck.worker.driver import run
from gradcheck.worker.process import close_idle_worker
from gradcheck.worker.procfs import default_max_memory

__all__ = ["WorkerError", "close_idle_worker", "default_max_memory", "run"]
