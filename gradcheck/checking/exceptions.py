"""The user's exceptions as one-line messages and ``exception`` problems, pointing at the user's frame."""

from __future__ import annotations

import re
import traceback

from gradcheck import tracebacks
from gradcheck.results import Problem, Reason
from gradcheck.tracebacks import message_of as message_of

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class UserCodeError(Exception):
    """The user's code raised before any gradient could be computed."""

    def __init__(self, message: str, reason: Reason | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        """Where the code raised, where a caller must tell (the constructor: ``init-raised``)."""


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (Keras colours some messages)."""
    return _ANSI.sub("", text)


def _message_lines(error: BaseException) -> list[str]:
    text = strip_ansi(message_of(error))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # Keras wraps errors raised in call() in a paragraph of its own; the cause follows.
    return [
        line
        for line in lines
        if not line.startswith(("Exception encountered when calling", "Arguments received by", "•"))
    ]


def first_line(error: BaseException) -> str:
    """The first line of what ``error`` says, without the paragraph Keras wraps around errors in ``call()``."""
    lines = _message_lines(error)
    return lines[0] if lines else type(error).__name__


def describe_exception(error: BaseException, path: str | None) -> str:
    """``file:line in func: Type: first line of the message``, pointing at the user's frame."""
    frame = tracebacks.user_frame(error, path) if path is not None else None
    where = f"{path}:{frame.lineno} in {frame.name}" if frame is not None else None
    lines = _message_lines(error)
    message = lines[0] if lines else ""
    if len(message) > 300:
        message = message[:297] + "..."
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return f"{where}: {text}" if where else text


def user_line(error: BaseException, path: str | None) -> int | None:
    """The line of the deepest frame of ``error`` (or its causes) in the user's file."""
    frame = tracebacks.user_frame(error, path) if path is not None else None
    return frame.lineno if frame is not None else None


def user_traceback(error: BaseException, path: str | None) -> str:
    """The formatted traceback of ``error``, from the first frame in the user's file on.

    gradcheck's harness and TensorFlow's dispatch frames above the user's
    code say nothing to the user, as pytest hides its own frames; where no
    frame is in the user's file the whole traceback is kept.
    """
    tb = tracebacks.from_user_frame(error, path)
    return "".join(traceback.format_exception(type(error), error, tb))


#: What TensorFlow says where code that reads a tensor's value meets a symbolic tensor (in a tf.function).
_NEEDS_VALUES = (
    "object has no attribute 'numpy'",
    "numpy() is only available when eager execution is enabled",
    "Cannot convert a symbolic",
)


def needs_eager(error: BaseException) -> bool:
    """True when ``error`` (or a cause) says the code runs eagerly only: it reads a tensor's value
    (``.numpy()``, a numpy call on it) or asserts ``tf.executing_eagerly()``."""
    for item in tracebacks.exception_chain(error):
        if any(text in message_of(item) for text in _NEEDS_VALUES):
            return True
        frames = traceback.extract_tb(item.__traceback__)
        if isinstance(item, AssertionError) and frames and "executing_eagerly" in (frames[-1].line or ""):
            return True
    return False


def exception_problem(what: str, error: BaseException, path: str | None, described: bool = True) -> Problem:
    """An ``exception`` problem: ``what: file:line in func: Type: message``, with the user's traceback and line.

    With ``described=False`` the message is ``what`` alone (it already describes the error).
    """
    message = f"{what}: {describe_exception(error, path)}" if described else what
    return Problem(
        "exception",
        None,
        message,
        traceback=user_traceback(error, path),
        line=user_line(error, path),
        reason="eager-only" if needs_eager(error) else None,
    )
