"""The one interface every kind of call target offers the harness."""

from __future__ import annotations

from typing import Any, Protocol

from gradcheck.instrument import BackwardRecord


class CallTarget(Protocol):
    """One checkable subject, callable two ways with the same arguments.

    :class:`gradcheck.harness.Harness` calls both under a ``GradientTape``
    (and, for ``function`` execution, inside a ``tf.function``): the custom
    call to get the user's gradients, the native call to get TensorFlow's
    autodiff of the same forward pass. A new kind of subject is a class with
    these two methods in a module of its own under ``gradcheck/targets/``.
    """

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call the subject as the user's code does, its custom gradients in force.

        Every custom-gradient function the call reaches that gradcheck can
        see appends one :class:`~gradcheck.instrument.BackwardRecord` to
        ``records`` (see :func:`~gradcheck.instrument.call_instrumented`);
        ``eager`` is false while a ``tf.function`` traces the call, when
        returned gradients have no values to read.
        """
        ...

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the same forward pass with every custom gradient switched off, so autodiff sees every op."""
        ...
