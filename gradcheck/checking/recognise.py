"""``gradcheck init``'s reading of a surrogate gradient: the proxy a function's table should declare.

One custom and one native vector-Jacobian product at the guessed shapes, read
as the hints read a failing gradient (:func:`gradcheck.checking.diagnose.surrogate_reading`):
a gradient that passes the upstream gradient through (unchanged, reversed,
scaled, or where a clip of ``|x|`` keeps it) while the forward pass's
derivative differs is a surrogate on purpose, and gets the shipped proxy it
stands for (:mod:`gradcheck.checking.surrogates`).
"""

from __future__ import annotations

import functools

import numpy as np

from gradcheck.checking import diagnose, surrogates
from gradcheck.checking.build import build, table_key
from gradcheck.checking.conditions import check_conditions
from gradcheck.checking.draws import draw_values, freeze, seeded_upstreams
from gradcheck.checking.request import CheckRequest
from gradcheck.first_pass import first_pass
from gradcheck.harness import Harness
from gradcheck.inputs import CallPlan
from gradcheck.instrument import Outcome, raised_by_gradcheck
from gradcheck.loss import Draw
from gradcheck.sampling import subject_rng


def recognised_proxy(request: CheckRequest, plan: CallPlan) -> surrogates.ProxyChoice | None:
    """The shipped proxy a function's surrogate gradient stands for, at the shapes of ``plan``; None where
    its gradient is the forward pass's derivative, or fits no shipped proxy, or the passes raise."""
    if request.subject.kind.table != "functions" or not plan.differentiable:  # a layer's proxy is its surrogate's
        return None
    dtype = next(a.spec.dtype for a in plan.differentiable if a.spec is not None)
    with check_conditions(request):
        harness = None
        try:
            built = build(request, dtype)
            values = draw_values(plan, subject_rng(request.settings.seed, request.subject.name, 0))
            freeze(values.values())
            upstreams = functools.partial(seeded_upstreams, request.settings.seed, request.subject.name, 0)
            first = first_pass(built.target, plan, values, built.name_variable, upstreams, native=True)
            harness = Harness(built.target, plan, first)
            assert first.upstreams is not None  # asked for
            draw = Draw(values, first.upstreams)
            custom, native = harness.custom(draw, "eager"), harness.native(draw)
        except Exception as error:  # the user's code raised: there is nothing to read
            if raised_by_gradcheck(error):
                raise
            return None
        finally:
            if harness is not None:
                harness.restore()
    return _read(request, plan, draw, custom, native)


def _read(
    request: CheckRequest, plan: CallPlan, draw: Draw, custom: Outcome, native: Outcome
) -> surrogates.ProxyChoice | None:
    if not custom.ok or not native.ok or custom.grads is None or native.grads is None:
        return None
    positional = plan.positional
    second = positional[1] if len(positional) > 1 and positional[1].role == "constant" else None
    declaring = surrogates.Declaring(
        table=table_key(request),
        second=(second.name, second.value) if second is not None else None,
        positional=len(positional),
    )
    choices = []
    for name, got in custom.grads.items():
        expected = native.grads.get(name)
        if got is None:
            continue
        if expected is None:  # no path from the input to the output (tf.round, tf.where): a zero derivative
            expected = np.zeros_like(got)
        if not np.all(np.isfinite(expected)):
            return None
        if diagnose.close(got, expected):
            continue
        matching = [u for u in draw.upstreams if u.shape == got.shape]
        upstream = matching[0] if len(matching) == 1 else None
        how = diagnose.surrogate_reading(got, expected, upstream)
        if how is None or upstream is None:
            return None  # a gradient that differs and is no surrogate: a bug, not a proxy
        value = draw.values.get(name)
        kept = surrogates.kept_mask(got, upstream)
        choices.append(surrogates.proxy_choice(how, declaring, value if isinstance(value, np.ndarray) else None, kept))
    found = {(c.name, c.constants) for c in choices if c is not None}
    if len(found) != 1 or None in choices:
        return None
    return next(c for c in choices if c is not None)
