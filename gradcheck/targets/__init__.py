"""How to call each kind of subject, and how to switch its custom gradients off.

Every target follows :class:`~gradcheck.targets.protocol.CallTarget`: a
``custom`` call with the custom gradients in force (and instrumented where
gradcheck can reach them) and a ``native`` call of the same forward pass with
them switched off. One module per kind:

- :mod:`~gradcheck.targets.function`: a custom-gradient function, called directly;
- :mod:`~gradcheck.targets.wrapper`: a function behind ``tf.recompute_grad`` and the like;
- :mod:`~gradcheck.targets.layer`: a Keras layer whose ``call`` reaches custom-gradient
  functions by name, swapped for the call with :mod:`~gradcheck.targets.patch`;
- :mod:`~gradcheck.targets.nested`: a public function or layer whose custom gradients
  are made as it runs (nested, behind a helper), found and switched off at TensorFlow's
  custom-gradient choke point (:class:`gradcheck._tf.ChokePoint`);
- :mod:`~gradcheck.targets.registered`: a function or layer that applies registered gradients with
  ``gradient_override_map``, called as written with the maps it enters recorded.

A new kind is a new module here with one class that has the two methods.
"""

from __future__ import annotations

from gradcheck.targets.function import FunctionTarget
from gradcheck.targets.layer import LayerTarget
from gradcheck.targets.nested import NestedTarget
from gradcheck.targets.patch import Patch
from gradcheck.targets.protocol import CallTarget
from gradcheck.targets.registered import RegisteredTarget
from gradcheck.targets.wrapper import WrapperTarget

__all__ = [
    "CallTarget",
    "FunctionTarget",
    "LayerTarget",
    "NestedTarget",
    "Patch",
    "RegisteredTarget",
    "WrapperTarget",
]
