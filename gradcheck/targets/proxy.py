"""A surrogate gradient checked against what it stands for: the references run with a proxy's derivative.

A ``proxy = "module:function"`` line says that a function's backward
function returns the vector-Jacobian product of the proxy (called with the
same arguments), not of the forward pass. The references then need a
forward pass whose value is the real one and whose derivative is the
proxy's, so that everything around the surrogate (a layer's kernel, an
outer function) is still differentiated through the value it really sees:

- native autodiff differentiates ``stop_gradient(f(x)) + (p(x) - stop_gradient(p(x)))``
  (:meth:`ProxiedTarget.native`), whose value is ``f(x)`` to the last bit;
- finite differences differentiate ``f(x0) + (p(x) - p(x0))`` around the
  draw's centre ``x0``: each call of the surrogate is recorded at the
  centre, in the order the forward pass makes them
  (:meth:`ProxiedTarget.record`), and replayed around it
  (:meth:`ProxiedTarget.linearized`). At the centre ``p(x) - p(x0)`` is an
  exact zero, so the loss there is the real forward pass's.

A surrogate is the checked function itself (its own table's proxy: the
whole call stands in for it), or a function the subject reaches by name (a
layer calling ``ste_sign``): that name is rebound for the duration of one
reference call (a :class:`~gradcheck.targets.patch.Patch`), and the custom
call never sees it.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gradcheck import _tf
from gradcheck.instrument import BackwardRecord
from gradcheck.targets.patch import Patch, patched
from gradcheck.targets.protocol import CallTarget


class ProxyError(Exception):
    """A proxy that cannot stand for its surrogate: it does not take the arguments, raised, or returned
    outputs of another structure, shape or dtype. Its message names the proxy and what is wrong."""


class NotTraceable(ValueError):
    """Finite differences of a proxy replay the centre's values, which a trace would freeze: eager only."""


@dataclass(frozen=True, eq=False)
class Proxy:
    """A function whose derivative a surrogate gradient stands for, as a function table declares it."""

    function: Callable[..., Any]
    """The proxy itself."""
    spec: str
    """How the config (or ``gradcheck.check``) names it, for messages: ``gradcheck.proxies:hard_tanh``."""
    surrogate: str
    """The function it stands for, as its table names it: ``ste_sign``."""
    constants: Mapping[str, Any] = field(default_factory=dict)
    """``constants`` of the table that the function has no parameter for: passed to the proxy alone, by keyword."""

    def __call__(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The proxy called with the surrogate's arguments; whatever goes wrong is a :class:`ProxyError`."""
        every = {**kwargs, **self.constants}
        try:
            signature: inspect.Signature | None = inspect.signature(self.function)
        except (TypeError, ValueError):  # no signature to check against: the call tells
            signature = None
        try:
            if signature is not None:
                signature.bind(*args, **every)
        except TypeError as error:
            raise ProxyError(
                f"proxy {self.spec} cannot take the arguments {self.surrogate} is called with "
                f"({_described(args, every)}): {error}; a proxy takes the same arguments as its function"
            ) from None
        try:
            return self.function(*args, **every)
        except Exception as error:  # the proxy is the user's code
            raise ProxyError(f"proxy {self.spec} raised {type(error).__name__}: {_first_line(error)}") from error


def _described(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    shown = [_kind(a) for a in args] + [f"{k}={_kind(v)}" for k, v in kwargs.items()]
    return ", ".join(shown) or "no arguments"


def _kind(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"a {getattr(value.dtype, 'name', value.dtype)} tensor of shape {tuple(shape)}"
    return type(value).__name__


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""


@dataclass
class Centre:
    """The surrogate calls of one forward pass at a draw's centre, in order: each one's value ``f(x0)`` and
    the proxy's ``p(x0)``."""

    calls: list[tuple[Any, Any]] = field(default_factory=list)


class _Form:
    """How the surrogates of one reference call run: ``native``, ``record`` or ``linearized``."""

    def __init__(self, kind: str, centre: Centre | None = None) -> None:
        self.kind = kind
        self.centre = centre if centre is not None else Centre()
        self.calls = 0


def _float_leaf(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and (dtype.is_floating or dtype.is_complex)


class Surrogates:
    """The stand-ins for one subject's surrogates: each runs as the form set for the current reference call."""

    def __init__(self) -> None:
        self._form: _Form | None = None

    @contextlib.contextmanager
    def form(self, form: _Form) -> Iterator[_Form]:
        """Run the stand-ins as ``form`` inside the block."""
        before, self._form = self._form, form
        try:
            yield form
        finally:
            self._form = before

    def stand_in(self, proxy: Proxy, value: Callable[..., Any]) -> Callable[..., Any]:
        """A stand-in for the surrogate ``value`` (its forward value, custom gradient switched off)."""

        def call(*args: Any, **kwargs: Any) -> Any:
            form = self._form
            if form is None:  # outside a reference call: the surrogate as it is
                return value(*args, **kwargs)
            if form.kind == "linearized":
                return _replayed(proxy, form, proxy(args, kwargs))
            result = value(*args, **kwargs)
            found = _matching(proxy, result, proxy(args, kwargs))
            if form.kind == "record":
                form.centre.calls.append((result, found))
                return result
            return _native_form(result, found)

        call.__name__ = getattr(value, "__name__", "surrogate")
        return call


def _matching(proxy: Proxy, result: Any, found: Any) -> Any:
    """The proxy's outputs as tensors of the result's structure, shapes and dtypes, else a :class:`ProxyError`."""
    tf = _tf.tensorflow()
    try:
        tf.nest.assert_same_structure(result, found)
    except (TypeError, ValueError):
        raise ProxyError(
            f"proxy {proxy.spec} returns {_structure(found)} where {proxy.surrogate} returns {_structure(result)}"
        ) from None
    values = tf.nest.flatten(result)
    converted = []
    for value, output in zip(values, tf.nest.flatten(found)):
        if not _float_leaf(value):
            converted.append(output)
            continue
        try:
            output = tf.convert_to_tensor(output)
        except (TypeError, ValueError) as error:
            raise ProxyError(f"proxy {proxy.spec} returns a {type(output).__name__}, not a tensor: {error}") from None
        if output.dtype != value.dtype or not output.shape.is_compatible_with(value.shape):
            raise ProxyError(
                f"proxy {proxy.spec} returns a {output.dtype.name} tensor of shape {_shape(output)} where "
                f"{proxy.surrogate} returns a {value.dtype.name} tensor of shape {_shape(value)}; a proxy's "
                "outputs have the function's shapes and dtypes"
            )
        converted.append(output)
    return tf.nest.pack_sequence_as(result, converted)


def _shape(tensor: Any) -> str:
    return str(tuple(tensor.shape.as_list())) if tensor.shape.rank is not None else "unknown"


def _structure(value: Any) -> str:
    leaves = _tf.tensorflow().nest.flatten(value)
    if len(leaves) == 1 and leaves[0] is value:
        return "one output"
    return f"{type(value).__name__} of {len(leaves)} outputs"


def _native_form(result: Any, found: Any) -> Any:
    """``stop_gradient(f) + (p - stop_gradient(p))``: the forward value, the proxy's derivative."""
    tf = _tf.tensorflow()

    def combined(value: Any, proxy_value: Any) -> Any:
        if not _float_leaf(value):
            return value
        return tf.stop_gradient(value) + (proxy_value - tf.stop_gradient(proxy_value))

    return tf.nest.map_structure(combined, result, found)


def _replayed(proxy: Proxy, form: _Form, found: Any) -> Any:
    """``f(x0) + (p(x) - p(x0))`` for this call of the surrogate, from the centre's record of it."""
    tf = _tf.tensorflow()
    if form.calls >= len(form.centre.calls):
        raise ProxyError(
            f"{proxy.surrogate} was called more often near the draw than at it ({len(form.centre.calls)} "
            "calls): a proxy's finite differences need the same calls at every point"
        )
    value, centre = form.centre.calls[form.calls]
    form.calls += 1

    def moved(value: Any, centre: Any, output: Any) -> Any:
        if not _float_leaf(value):
            return value
        return value + (tf.convert_to_tensor(output, dtype=value.dtype) - centre)

    return tf.nest.map_structure(moved, value, centre, found)


@dataclass(frozen=True)
class Site:
    """A name a subject's code looks a surrogate up by, with the proxy declared for it."""

    namespace: dict[str, Any]
    name: str
    proxy: Proxy


class ProxiedTarget:
    """A call target whose references run its surrogates with their proxies' derivatives.

    ``custom`` is the inner target's, untouched. The references call
    ``reference`` (the inner target, or one whose patched functions are the
    stand-ins already, using the proxies ``used``) with the subject's own
    proxy around the whole call, or with each of ``sites`` bound to its
    stand-in.
    """

    def __init__(
        self,
        inner: CallTarget,
        surrogates: Surrogates,
        own: Proxy | None = None,
        sites: tuple[Site, ...] = (),
        reference: CallTarget | None = None,
        used: tuple[Proxy, ...] = (),
    ) -> None:
        self.inner = inner
        """The target as it would be without proxies (the custom call is its own)."""
        self.surrogates = surrogates
        self.own = own
        self.sites = sites
        self.reference = reference if reference is not None else inner
        #: The proxies the references use, for the report's note.
        chosen = [own] if own is not None else [*used, *(s.proxy for s in sites)]
        self.proxies = tuple({(p.surrogate, p.spec): p for p in chosen}.values())

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """The user's custom gradients, as the inner target calls them."""
        return self.inner.custom(args, kwargs, records, eager)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The forward value with each surrogate's derivative its proxy's, for native autodiff."""
        with self.surrogates.form(_Form("native")):
            return self._reference(args, kwargs)

    def record(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, Centre]:
        """The forward pass at a draw's centre, recording each surrogate call for :meth:`linearized`."""
        with self.surrogates.form(_Form("record")) as form:
            return self._reference(args, kwargs), form.centre

    def linearized(self, args: list[Any], kwargs: dict[str, Any], centre: Centre) -> Any:
        """The forward pass near the centre recorded in ``centre``, each surrogate ``f(x0) + (p(x) - p(x0))``."""
        if not _tf.tensorflow().executing_eagerly():
            raise NotTraceable("a proxy's finite differences replay the centre's values eagerly")
        with self.surrogates.form(_Form("linearized", centre)):
            return self._reference(args, kwargs)

    def _reference(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.own is not None:
            whole = self.surrogates.stand_in(self.own, lambda *a, **k: self.reference.native(list(a), k))
            return whole(*args, **kwargs)
        patches = [Patch(s.namespace, s.name, s.namespace[s.name], s.namespace[s.name]) for s in self.sites]
        stand_ins = [self.surrogates.stand_in(s.proxy, s.namespace[s.name]) for s in self.sites]
        with patched(patches, stand_ins):
            return self.reference.native(args, kwargs)


def inner_target(target: Any) -> Any:
    """The target without its proxies (the target itself where it has none)."""
    return target.inner if isinstance(target, ProxiedTarget) else target
