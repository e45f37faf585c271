"""Importing TensorFlow once, quietly, and only when a check needs it."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from gradcheck.errors import TensorFlowMissing

_VERBOSE = False


def set_verbose(verbose: bool) -> None:
    """Let TensorFlow's own log lines through (``-v``) or keep them out."""
    global _VERBOSE
    _VERBOSE = verbose


@contextlib.contextmanager
def _stderr_fd_silenced() -> Iterator[None]:
    """Silence file descriptor 2 while TensorFlow's C++ runtime starts.

    TF 2.21 prints absl and oneDNN lines straight to fd 2 during import even
    with TF_CPP_MIN_LOG_LEVEL=3, below Python's ``sys.stderr``.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def tensorflow() -> Any:
    """Import TensorFlow once, quietly, and return the module."""
    module = sys.modules.get("tensorflow")
    if module is not None and hasattr(module, "custom_gradient"):
        return module
    if _VERBOSE:
        try:
            module = importlib.import_module("tensorflow")
        except ImportError as error:
            if error.name in ("tensorflow", None):
                raise TensorFlowMissing() from error
            raise
        return module
    previous = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    try:
        with _stderr_fd_silenced():
            module = importlib.import_module("tensorflow")
    except ImportError as error:
        if error.name in ("tensorflow", None) or "tensorflow" in str(error.name):
            raise TensorFlowMissing() from error
        raise
    finally:
        if previous is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        else:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = previous
    return module


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep TensorFlow's Python warnings (retracing and the like) out of reports, unless ``-v``.

    Each checked function gets a ``tf.function`` of its own, traced once per
    shape; TensorFlow's heuristic warns about that as "retracing" although no
    function is traced twice.
    """
    tf = tensorflow()
    # Unfiltered tracebacks keep TensorFlow's own frames, so an error can be
    # told apart from a bug in gradcheck, and the user's frame found.
    filtering = tf.debugging.is_traceback_filtering_enabled()
    tf.debugging.disable_traceback_filtering()
    logger = tf.get_logger()
    level = logger.level
    if not _VERBOSE:
        logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)
        if filtering:
            tf.debugging.enable_traceback_filtering()


def tensorflow_available() -> bool:
    """True when TensorFlow can be imported (without importing it)."""
    if "tensorflow" in sys.modules:
        return True
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken installation
        return False
