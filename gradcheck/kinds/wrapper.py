"""A function behind one of TensorFlow's own gradient wrappers, such as ``tf.recompute_grad``."""

from __future__ import annotations

from gradcheck.kinds.function import Function
from gradcheck.kinds.protocol import Bound, SubjectParts
from gradcheck.targets import CallTarget, WrapperTarget


class Wrapper(Function):
    """A gradient wrapper: the wrapper against the function it wraps; its backward function is TensorFlow's."""

    name = "wrapper"

    def target(self, subject: SubjectParts, bound: Bound) -> CallTarget:
        """The wrapper as the user's code calls it, and the plain function for the native run."""
        return WrapperTarget(subject.obj, bound.call)

    def records_backward(self, reached: bool) -> bool:
        """False: TensorFlow's own backward function is not instrumented."""
        return False
