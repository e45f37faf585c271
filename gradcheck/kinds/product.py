"""A custom-gradient function that takes only ``*args``: what a decorator factory makes.

Special-function libraries build their custom gradients with a factory
(``def func_with_vjp(gen): ... return tf.custom_gradient(wrap)``, geomstats'
``custom_gradient(*grad_funcs)``): the factory is no target (see
:func:`gradcheck.nesting.candidates`), the objects it makes are. Their forward
function is the factory's ``wrap(*args, **kwargs)``, so no parameter says what
to feed: the config's inputs fill ``*args`` in the order given, and with no
config the function is probed with one positional input, then two; it is
never called with no arguments.
"""

from __future__ import annotations

import inspect

from gradcheck.kinds.function import Function
from gradcheck.kinds.protocol import signature_or_empty


class Product(Function):
    """A ``(*args)`` custom-gradient function: checked as a function, its positional inputs probed one, then two."""

    name = "product"
    #: The inputs probed, in turn, where the config fills ``*args`` with nothing.
    positional_guesses = (("x",), ("x", "y"))


def takes_only_args(function: object) -> bool:
    """True for a function whose only positional parameter is ``*args`` (keyword parameters aside)."""
    parameters = signature_or_empty(function).parameters.values()
    kinds = {p.kind for p in parameters}
    positional = {inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD}
    return inspect.Parameter.VAR_POSITIONAL in kinds and not kinds & positional


__all__ = ["Product", "takes_only_args"]
