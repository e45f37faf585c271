"""gradcheck: check the gradients written by hand with ``@tf.custom_gradient``.

``import gradcheck`` stays light: TensorFlow is imported the first time a
check runs, never here.
"""

from __future__ import annotations

from gradcheck.api import assert_gradients, check
from gradcheck.errors import ConfigError, TargetError, UsageError
from gradcheck.results import VERSION, ExitCode, InputRecord, Problem, Result, RunReport

__version__ = VERSION

__all__ = [
    "ConfigError",
    "ExitCode",
    "InputRecord",
    "Problem",
    "Result",
    "RunReport",
    "TargetError",
    "UsageError",
    "__version__",
    "assert_gradients",
    "check",
]
