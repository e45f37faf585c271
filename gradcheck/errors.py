"""Errors for bad user input: the command line turns each into one line and exit 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: a target, an option or a config value.

    The message is one line that names the file, key or function and says
    what to do; the command line prints it as is and exits 2.
    """

    details: str | None = None
    """The traceback behind the error as text, where it was raised in another process
    (the worker of ``gradcheck run``); ``-v`` shows it."""


class ConfigError(UsageError):
    """A config file that does not parse or holds an invalid key or value."""


class TargetError(UsageError):
    """A target that does not exist, cannot be imported, or selects nothing."""


class TensorFlowMissing(UsageError):
    """TensorFlow is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "TensorFlow is not installed: install it with "
            "`pip install 'gradcheck[cpu]'` (CPU only) or `pip install 'gradcheck[tf]'`"
        )
