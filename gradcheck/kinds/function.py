"""A module-level ``@tf.custom_gradient`` function, called directly."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any

from gradcheck.kinds.protocol import Bound, Construct, Declared, SubjectParts, signature_or_empty
from gradcheck.targets import CallTarget, FunctionTarget


class Function(Declared):
    """A custom-gradient function: called as it is, one gradient owed per argument of the call.

    The other kinds of function (:mod:`~gradcheck.kinds.method`,
    :mod:`~gradcheck.kinds.wrapper`) differ from it in one or two answers.
    """

    name = "function"
    reported = "function"
    table = "functions"
    shares_class_table = False
    owes_received = False
    keywords_by_convention = True
    references_in_float64 = True
    weights_on_self = False

    def signature(self, subject: SubjectParts) -> inspect.Signature:
        """The undecorated function's signature."""
        return signature_or_empty(subject.forward)

    def described_by(self, subject: SubjectParts) -> Callable[..., Any] | None:
        """The undecorated function."""
        return subject.forward

    def identity(self, subject: SubjectParts) -> Hashable:
        """The custom-gradient object itself: ``tf.custom_gradient(f)`` made twice is two subjects."""
        return (id(subject.obj), None)

    def bind(self, subject: SubjectParts, construct: Construct) -> Bound:
        """The undecorated function, as it is."""
        forward = subject.forward
        assert forward is not None  # discovery gives a function its forward
        return Bound(forward, forward)

    def target(self, subject: SubjectParts, bound: Bound) -> CallTarget:
        """The function called through ``tf.custom_gradient`` with its backward function instrumented."""
        return FunctionTarget(bound.call, subject.name.rsplit(".", 1)[-1])
