"""A function behind one of TensorFlow's own gradient wrappers, such as ``tf.recompute_grad``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradcheck.instrument import BackwardRecord


class WrapperTarget:
    """A function behind a TensorFlow gradient wrapper such as ``tf.recompute_grad``.

    The custom gradient is TensorFlow's own backward function, so there is
    nothing to instrument: the check compares the wrapper with autodiff of
    the function it wraps.
    """

    def __init__(self, wrapped: Callable[..., Any], target: Callable[..., Any]) -> None:
        self.wrapped = wrapped
        """The wrapper, as the user's code calls it."""
        self.target = target
        """The plain function it wraps."""

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call the wrapper as the user's code does."""
        return self.wrapped(*args, **kwargs)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the function it wraps."""
        return self.target(*args, **kwargs)
