"""A ``@tf.custom_gradient`` method of a module-level class: static, bound to its class, or to an instance."""

from __future__ import annotations

import inspect
from collections.abc import Hashable

from gradcheck.kinds.function import Function
from gradcheck.kinds.protocol import Bound, Construct, SubjectParts, without_first


class StaticMethod(Function):
    """A static method: called as a function, named ``Class.method``, its class's config table shared."""

    name = "staticmethod"
    shares_class_table = True

    def identity(self, subject: SubjectParts) -> Hashable:
        """The function in its class, as this binding: the same function in two classes is two subjects."""
        return (id(subject.obj), f"{id(subject.owner)}:{self.name}")


class ClassMethod(StaticMethod):
    """A class method: bound to its class."""

    name = "classmethod"

    def signature(self, subject: SubjectParts) -> inspect.Signature:
        """The function's signature without its first parameter (``cls``), which the binding gives."""
        return without_first(super().signature(subject))

    def bind(self, subject: SubjectParts, construct: Construct) -> Bound:
        """The function bound to its class."""
        forward = StaticMethod.bind(self, subject, construct).call.__get__(subject.owner, type(subject.owner))
        return Bound(forward, forward)


class Method(ClassMethod):
    """An instance method: bound to an instance built from the config's ``init`` (or ``[classes.NAME] init``)."""

    name = "method"

    def bind(self, subject: SubjectParts, construct: Construct) -> Bound:
        """The function bound to a new instance of its class, which also names the variables it reads."""
        assert subject.owner is not None  # discovery gives a method its class
        instance = construct.instance(subject.owner)
        forward = StaticMethod.bind(self, subject, construct).call.__get__(instance, subject.owner)
        return Bound(forward, forward, owner=instance)
