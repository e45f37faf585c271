"""Kinds of subject: one strategy per kind, answering what a check asks about a subject's kind.

Every kind follows :class:`~gradcheck.kinds.protocol.SubjectKind`; a
:class:`~gradcheck.subjects.Subject` carries its kind, chosen once by
discovery from :data:`KINDS`. One module per kind:

- :mod:`~gradcheck.kinds.function`: a module-level custom-gradient function;
- :mod:`~gradcheck.kinds.product`: a custom-gradient function taking only ``*args``, as decorator
  factories make them;
- :mod:`~gradcheck.kinds.method`: a custom-gradient method, static, of its class or of an instance;
- :mod:`~gradcheck.kinds.wrapper`: a function behind ``tf.recompute_grad`` and the like;
- :mod:`~gradcheck.kinds.layer`: a Keras layer whose ``call`` reaches custom-gradient functions;
- :mod:`~gradcheck.kinds.nested`: any of the others (a wrapper aside) whose custom gradients are made
  as it runs;
- :mod:`~gradcheck.kinds.registered`: a function, method or layer that applies gradients registered with
  ``tf.RegisterGradient`` through ``gradient_override_map``.

A new kind is a new module here with one class that answers the protocol,
and its line in :data:`KINDS`; how it is called is a call target under
:mod:`gradcheck.targets`.
"""

from __future__ import annotations

from gradcheck.kinds.function import Function
from gradcheck.kinds.layer import Layer
from gradcheck.kinds.method import ClassMethod, Method, StaticMethod
from gradcheck.kinds.nested import Nested
from gradcheck.kinds.product import Product
from gradcheck.kinds.protocol import Bound, Construct, Reached, SubjectKind, SubjectParts
from gradcheck.kinds.registered import Registered
from gradcheck.kinds.wrapper import Wrapper

_BASES: tuple[SubjectKind, ...] = (Function(), Product(), StaticMethod(), ClassMethod(), Method(), Layer())

#: Every kind of subject, by name.
KINDS: dict[str, SubjectKind] = {
    kind.name: kind
    for kind in (
        *_BASES,
        Wrapper(),
        *(Nested(base) for base in _BASES),
        *(Registered(base) for base in _BASES if base.name != "product"),
    )
}


def kind_named(name: str) -> SubjectKind:
    """The registered kind called ``name``; a name no kind has is a bug in gradcheck, raised as ``LookupError``."""
    try:
        return KINDS[name]
    except KeyError:
        raise LookupError(f"no kind of subject is named {name!r}; the kinds are {', '.join(KINDS)}") from None


__all__ = ["KINDS", "Bound", "Construct", "Reached", "SubjectKind", "SubjectParts", "kind_named"]
