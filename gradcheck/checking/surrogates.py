"""The hints about surrogate gradients: the exact ``proxy = ...`` line a recognised surrogate takes.

A surrogate gradient recognised by its pattern (the upstream gradient
passed through unchanged, with its sign reversed, scaled, or where a mask
keeps it) has a proxy among :mod:`gradcheck.proxies`: the hint writes the
line for the function's table, with the scale or clip bound read from the
gradient and the drawn input, and ``reference = "none"`` only as the last
resort. A surrogate that fits none of the patterns is told that a proxy can
be declared; a function that has one and still fails is told what its
gradient does differently (an inverted mask). Numpy only: the arrays come
from the verdicts and the draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SHIPPED = "gradcheck.proxies"
#: The last resort, after the proxy line.
LAST_RESORT = 'or, for a shape audit only, reference = "none"'


@dataclass(frozen=True)
class Declaring:
    """Where a subject's proxy line goes, and what the line may rely on."""

    table: str | None
    """The table the line goes in: the function's own; for a layer, the table of the one surrogate function
    it reaches (its own where it reaches none: its custom gradient is made in its ``call``); None where it
    reaches several."""
    layer: bool = False
    """Whether the subject is a layer (its proxy line belongs to the surrogate function it reaches)."""
    second: tuple[str, Any] | None = None
    """The function's second positional argument, where it is a constant: its name and value."""
    positional: int = 1
    """How many positional arguments the function is called with."""
    reaches: tuple[str, ...] = ()
    """For a layer: the functions it reaches by name that make custom gradients."""
    declared: str | None = None
    """The proxy already declared (``gradcheck.proxies:hard_tanh``), where there is one."""
    second_input: str | None = None
    """The function's second positional argument, where it is a drawn input (a scale drawn as a tensor)."""


def drawn(values: Mapping[str, Any], name: str | None) -> np.ndarray | None:
    """An input's drawn values (a clip's bound, a scale are read from them); None for a constant or no name."""
    value = values.get(name) if name is not None else None
    return value if isinstance(value, np.ndarray) else None


def _number(value: float) -> str:
    return f"{value:.6g}"


@dataclass(frozen=True)
class ProxyChoice:
    """A shipped proxy that fits a recognised surrogate, with the constants its line needs."""

    name: str
    """Its name in :mod:`gradcheck.proxies`: ``identity``, ``negation``, ``hard_tanh``, ``clip`` or ``scale``."""
    constants: tuple[tuple[str, float], ...] = ()
    """``constants`` entries the function does not take: the proxy's own scale or bound."""

    @property
    def spec(self) -> str:
        """``gradcheck.proxies:NAME``, as the ``proxy`` line gives it."""
        return f"{SHIPPED}:{self.name}"

    def line(self, table: str) -> str:
        """The line for the function's table: ``[functions.f] proxy = "...", constants = { ... }``."""
        line = f'{table} proxy = "{self.spec}"'
        if self.constants:
            line += ", constants = { " + ", ".join(f"{k} = {_number(v)}" for k, v in self.constants) + " }"
        return line


def _with_constant(declaring: Declaring, proxy: str, name: str, value: float) -> ProxyChoice | None:
    """A proxy that takes ``value`` as its second argument: the function's own, or a constant of its own."""
    if declaring.second is not None:
        given = declaring.second[1]
        numeric = isinstance(given, (int, float)) and not isinstance(given, bool)
        if numeric and abs(float(given) - value) <= 1e-6 * max(1.0, abs(value)):
            return ProxyChoice(proxy)  # the function's own argument is the proxy's second one
        return None
    if declaring.positional != 1:
        return None
    return ProxyChoice(proxy, ((name, value),))


def clip_bound(values: np.ndarray, kept: np.ndarray) -> tuple[str, float, float | None] | None:
    """How a mask over ``values`` reads: ``("<=", bound, None)`` for ``|x| <= bound`` (a clip),
    ``("<=", high, low)`` for ``low <= x <= high``, ``(">=", bound, None)`` for ``|x| >= bound`` (an inverted
    clip); each bound the roundest number between the kept and the dropped values."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    kept = np.asarray(kept, dtype=bool).reshape(-1)
    if x.shape != kept.shape or kept.all() or not kept.any():
        return None
    inside, outside = np.abs(x[kept]), np.abs(x[~kept])
    if inside.max() < outside.min():
        return "<=", _roundest(inside.max(), outside.min()), None
    if outside.max() < inside.min():
        return ">=", _roundest(outside.max(), inside.min()), None
    low, high = x[kept].min(), x[kept].max()
    below, above = x[~kept & (x < low)], x[~kept & (x > high)]
    if below.size + above.size != outside.size or not below.size or not above.size:
        return None
    return "<=", _roundest(high, above.min()), 0.0 - _roundest(-low, -below.max())


def _roundest(low: float, high: float) -> float:
    """The roundest number in ``[low, high)`` (a multiple of the coarsest step that has one there, nearest 0)."""
    for exponent in range(3, -8, -1):
        for mantissa in (5, 2, 1):
            step = mantissa * 10.0**exponent
            multiples = [round(k * step, 12) for k in range(math.ceil(low / step), math.floor(high / step) + 1)]
            inside = [float(m) for m in multiples if low <= m < high]
            if inside:
                return min(inside, key=lambda m: abs(m))
    return float(low)


def proxy_choice(
    how: str, declaring: Declaring, values: np.ndarray | None, kept: np.ndarray | None
) -> ProxyChoice | None:
    """The shipped proxy for a pass-through read as ``how``; None where none fits (a scale or bound the line
    cannot give, a mask that is no clip of ``x``)."""
    if how == "unchanged":
        return ProxyChoice("identity")
    if how == "with its sign reversed":
        return ProxyChoice("negation")
    if how.startswith("scaled by "):
        return _with_constant(declaring, "scale", "scale", float(how.removeprefix("scaled by ")))
    if values is None or kept is None:
        return None
    read = clip_bound(values, kept)
    if read is None or read[0] != "<=":
        return None
    _, bound, low = read
    if low is not None:  # an interval: the proxy's own bounds
        if declaring.second is not None or declaring.positional != 1:
            return None
        return ProxyChoice("clip", (("bound", bound), ("low", low)))
    if bound == 1.0:  # hard_tanh takes no bound: whatever else the function is called with, it fits
        return ProxyChoice("hard_tanh")
    return _with_constant(declaring, "clip", "bound", bound)


def inverted_clip(values: np.ndarray | None, kept: np.ndarray | None) -> str | None:
    """A mask that keeps ``|x| >= bound``, the inverse of a clip: what to say about it."""
    read = clip_bound(values, kept) if values is not None and kept is not None else None
    if read is None or read[0] != ">=":
        return None
    bound = _number(read[1])
    return (
        f"Its mask keeps the upstream gradient where |x| >= {bound} and drops it where |x| < {bound}, the inverse "
        f"of a clipped straight-through (|x| <= {bound}): a comparison the wrong way round?"
    )


def scaled_by_argument(
    got: np.ndarray, upstream: np.ndarray, factor: np.ndarray, declaring: Declaring | None
) -> str | None:
    """The line for a gradient that is the upstream times the function's second argument, drawn as a tensor:
    :func:`gradcheck.proxies.scale` takes it as it is, once the line makes it the number the code passes."""
    got, upstream = np.asarray(got, dtype=np.float64), np.asarray(upstream, dtype=np.float64)
    try:
        product = upstream * np.asarray(factor, dtype=np.float64)
    except ValueError:  # shapes that do not broadcast: no product
        return None
    if declaring is None or declaring.table is None or product.shape != got.shape or declaring.second_input is None:
        return None
    scale = max(float(np.max(np.abs(got), initial=0.0)), 1e-300)
    if not np.all(np.abs(got - product) <= 1e-3 * scale):
        return None
    name = declaring.second_input
    return f"{ProxyChoice('scale').line(declaring.table)}, constants = {{ {name} = ... }} (the number your code passes)"


def advice(
    how: str, declaring: Declaring | None, values: np.ndarray | None, got: np.ndarray, upstream: np.ndarray
) -> str:
    """What to do about a pass-through read as ``how``: the shipped proxy's line where one fits (an inverted clip
    said so where it is one), else how to declare a proxy; ``reference = "none"`` last."""
    if declaring is None:
        return declare(None, None)
    kept = kept_mask(got, upstream)
    choice = proxy_choice(how, declaring, values, kept)
    line = choice.line(declaring.table) if choice is not None and declaring.table is not None else None
    inverted = inverted_clip(values, kept) if choice is None else None
    return f"{inverted} {declare(line, declaring)}" if inverted else declare(line, declaring)


def declare(line: str | None, declaring: Declaring | None) -> str:
    """What to do about a surrogate on purpose: the proxy line (or how to write one), then the last resort;
    without ``declaring`` (no table to name), ``reference = "none"`` alone."""
    if declaring is None:
        return 'If intended, set reference = "none"'
    shared = ", which every layer reaching it uses" if declaring.layer and declaring.reaches else ""
    if line is not None:
        return f"If intended, declare what it stands for{shared}: {line}; {LAST_RESORT}"
    where = declaring.table
    if where is None:
        tables = ", ".join(f"[functions.{name}]" for name in declaring.reaches)
        where = f"the table of the surrogate function it reaches ({tables})"
    return (
        "If intended, declare the function whose derivative it stands for: "
        f'proxy = "module:function" in {where}{shared} (see {SHIPPED}); {LAST_RESORT}'
    )


def inverted_mask_hint(got: np.ndarray, expected: np.ndarray, declared: str, rtol: float = 1e-3) -> str | None:
    """A gradient that is zero exactly where the proxy's derivative is not, and not zero where it is."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape or not np.all(np.isfinite(got)):
        return None
    scale = max(float(np.max(np.abs(got), initial=0.0)), float(np.max(np.abs(expected), initial=0.0)))
    if scale == 0:
        return None
    got_zero = np.abs(got) <= rtol * scale
    expected_zero = np.abs(expected) <= rtol * scale
    if not np.all(got_zero ^ expected_zero) or got_zero.all() or expected_zero.all():
        return None
    return (
        f"the gradient is zero exactly where the derivative of its proxy {declared} is not, and not zero where "
        "it is: an inverted mask (less_equal written greater_equal, a comparison the wrong way round)?"
    )


def zero_proxy_hint(got: np.ndarray, expected: np.ndarray, declared: str, rtol: float = 1e-3) -> str | None:
    """The proxy's derivative is zero where the gradient is not: the gradient, or the proxy, is wrong."""
    expected = np.asarray(expected, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if np.any(np.abs(expected) > rtol * max(float(np.max(np.abs(got), initial=0.0)), 1e-300)) or not np.any(got):
        return None
    return (
        f"the derivative of its proxy {declared} is zero here but this gradient is not: is the proxy the "
        "function the gradient stands for?"
    )


def kept_mask(got: np.ndarray, upstream: np.ndarray, pattern_rtol: float = 1e-3) -> np.ndarray | None:
    """Where ``got`` keeps ``upstream`` (elsewhere it is zero), if it is a masked pass-through of it."""
    got = np.asarray(got, dtype=np.float64)
    upstream = np.asarray(upstream, dtype=np.float64)
    if got.shape != upstream.shape or not np.all(np.isfinite(got)):
        return None
    scale = float(np.max(np.abs(upstream), initial=0.0))
    kept = np.abs(got - upstream) <= pattern_rtol * scale
    dropped = np.abs(got) <= pattern_rtol * scale
    if np.all(kept | dropped) and kept.any() and dropped.any():
        return kept & ~dropped
    return None


def against_proxy(got: np.ndarray, expected: np.ndarray, declared: str) -> str | None:
    """What a gradient with a declared proxy does differently from the proxy's derivative."""
    return inverted_mask_hint(got, expected, declared) or zero_proxy_hint(got, expected, declared)


def declare_numeric_only(table: str) -> str:
    """TensorFlow's own surrogate on purpose: the proxy it stands for, else (a shape audit only) reference = "none"."""
    return (
        f'declare the function whose derivative it stands for: {table} proxy = "module:function" '
        f'(e.g. "{SHIPPED}:identity" for straight-through); or, for a shape audit only, '
        f'set reference = "none": {table} reference = "none"'
    )
