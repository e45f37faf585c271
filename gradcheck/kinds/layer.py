"""A Keras layer whose ``call`` reaches custom-gradient functions by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any

from gradcheck import _tf
from gradcheck.kinds.protocol import Bound, Construct, Declared, SubjectParts, signature_or_empty, without_first
from gradcheck.targets import CallTarget, LayerTarget, Patch


class Layer(Declared):
    """A Keras layer: built from the config's ``init`` (or given as an instance), called through Keras.

    Each backward function owes gradients for what its custom-gradient
    function received; the layer's weights are its own variables.
    """

    name = "layer"
    reported = "layer"
    table = "layers"
    shares_class_table = False
    owes_received = True
    keywords_by_convention = False
    references_in_float64 = False
    weights_on_self = True

    def signature(self, subject: SubjectParts) -> inspect.Signature:
        """``call``'s signature without ``self``."""
        return without_first(signature_or_empty(getattr(subject.owner, "call", None)))

    def described_by(self, subject: SubjectParts) -> Callable[..., Any] | None:
        """The layer's ``call``."""
        return getattr(subject.owner, "call", None)

    def identity(self, subject: SubjectParts) -> Hashable:
        """The layer class: ``Alias = Layer`` is a name of the same layer."""
        return (id(subject.owner), None)

    def bind(self, subject: SubjectParts, construct: Construct) -> Bound:
        """A layer built from the class (its weights redrawn, seeded), or the user's own instance as it is."""
        if isinstance(subject.obj, type):
            layer, fresh = construct.layer(subject.obj), True
        else:
            layer, fresh = subject.obj, False  # weights restored after the check
        return Bound(layer, layer.call, owner=layer, layer=layer, fresh_layer=fresh)

    def target(self, subject: SubjectParts, bound: Bound) -> CallTarget:
        """The layer, each custom-gradient function its ``call`` reaches swapped in for one call."""
        patches = [
            Patch(namespace, name, namespace[name], parts.forward)
            for namespace, name in subject.patches
            if (parts := _tf.custom_gradient_parts(namespace[name])) is not None
        ]
        return LayerTarget(bound.layer, patches)
