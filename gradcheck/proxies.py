"""Proxies for the common surrogate gradients, named directly by a function table's ``proxy`` line.

A surrogate gradient stands for the derivative of another function, its
proxy: a straight-through estimator's is the identity, a clipped one's a
hard tanh, gradient reversal's the negation, gradient scaling's a scaled
identity. Only the proxy's derivative matters; its value is never used.

```toml
[functions.ste_sign]
proxy = "gradcheck.proxies:hard_tanh"
```

A proxy is called with the checked function's arguments. These take the
surrogate's tensor as the first one; :func:`clip` and :func:`scale` take
their bound or factor as the second (the function's own clip value or
scale, given in ``constants``), or by keyword from a ``constants`` entry
the function has no parameter for (``constants = { scale = -0.1 }``, or
``{ bound = 1.0, low = 0.0 }`` for a clip to ``[0, 1]``). Any further
arguments of the function (a name, a threshold) are ignored.

TensorFlow is imported when a proxy first runs, never on import.
"""

from __future__ import annotations

from typing import Any

from gradcheck import _tf

__all__ = ["clip", "hard_tanh", "identity", "negation", "scale"]


def identity(x: Any, *_others: Any, **_named: Any) -> Any:
    """Straight-through: the gradient is the upstream gradient, passed through unchanged."""
    return _tf.tensorflow().identity(x)


def negation(x: Any, *_others: Any, **_named: Any) -> Any:
    """Gradient reversal: the gradient is the upstream gradient with its sign reversed."""
    return -x


def hard_tanh(x: Any, *_others: Any, **_named: Any) -> Any:
    """Clipped straight-through: the upstream gradient where ``|x| <= 1``, zero elsewhere."""
    return _tf.tensorflow().clip_by_value(x, -1.0, 1.0)


def clip(x: Any, bound: Any = 1.0, *_others: Any, low: Any = None, **_named: Any) -> Any:
    """Clipped straight-through with another bound: the upstream gradient where ``|x| <= bound`` (where
    ``low <= x <= bound``, given ``low``), zero elsewhere."""
    tf = _tf.tensorflow()
    high = tf.cast(bound, x.dtype)
    return tf.clip_by_value(x, -high if low is None else tf.cast(low, x.dtype), high)


def scale(x: Any, scale: Any = 1.0, *_others: Any, **_named: Any) -> Any:
    """Gradient scaling (reversal, for a negative factor): the upstream gradient times ``scale``."""
    return _tf.tensorflow().cast(scale, x.dtype) * x
