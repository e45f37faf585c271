"""The user's frame in a traceback: the one walker over exception chains and their frames.

stdlib only. "The user's file" is the file of the subject being checked (or
imported); gradcheck's and TensorFlow's own frames around it say nothing to
the user, as pytest hides its own frames.
"""

from __future__ import annotations

import signal
import traceback
from pathlib import Path
from types import TracebackType


def _same_file(filename: str, wanted: Path) -> bool:
    try:
        return Path(filename).resolve() == wanted
    except OSError:  # pragma: no cover - unreadable frame paths
        return False


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error`` followed by its causes (explicit or implicit), each once."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def user_frame(error: BaseException, path: str | Path, follow_causes: bool = True) -> traceback.FrameSummary | None:
    """The deepest frame of ``error`` in the file ``path``, else of its causes in turn; None if none is."""
    wanted = Path(path).resolve()
    errors = exception_chain(error) if follow_causes else [error]
    for item in errors:
        for frame in reversed(traceback.extract_tb(item.__traceback__)):
            if _same_file(frame.filename, wanted):
                return frame
    return None


def from_user_frame(error: BaseException, path: str | Path | None) -> TracebackType | None:
    """The traceback of ``error`` from its outermost frame in ``path`` on (the whole one where none is)."""
    tb = error.__traceback__
    if path is None:
        return tb
    wanted = Path(path).resolve()
    current = tb
    while current is not None:
        if _same_file(current.tb_frame.f_code.co_filename, wanted):
            return current
        current = current.tb_next
    return tb


def is_ctrl_c(error: BaseException) -> bool:
    """Whether ``error`` may be a real Ctrl-C of this process, rather than something the user's code raised.

    A ``KeyboardInterrupt`` can only come from Ctrl-C where SIGINT is not
    ignored; the worker ignores it (its parent alone decides what a Ctrl-C
    stops), so there every ``KeyboardInterrupt`` is the user's own ``raise``.
    """
    if not isinstance(error, KeyboardInterrupt):
        return False
    try:
        return signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    except ValueError:  # pragma: no cover - no signals here (a sub-interpreter)
        return True


def message_of(error: BaseException) -> str:
    """``str(error)``, or ``""`` where the user's ``__str__`` (and ``__repr__``) raise: the type and
    the line then describe it."""
    for show in (str, repr):
        try:
            text = show(error)
        except Exception:
            continue
        if isinstance(text, str):
            return text
    return ""
