"""A custom-gradient function, called directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradcheck.instrument import BackwardRecord, call_instrumented, forward_result


class FunctionTarget:
    """A custom-gradient function called directly."""

    def __init__(self, forward: Callable[..., Any], name: str | None = None) -> None:
        self.forward = forward
        """The undecorated forward function: it returns ``(result, grad_fn)``."""
        self.name = name or str(getattr(forward, "__name__", "function"))

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call through ``tf.custom_gradient`` with an instrumented backward function."""
        return call_instrumented(self.forward, self.name, records, eager, args, kwargs)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the undecorated function and keep its result: autodiff sees every op."""
        return forward_result(self.forward(*args, **kwargs))
