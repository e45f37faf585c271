"""A check's call target with its proxies: where the subject's surrogates are, and the note saying what was used.

A function with its own ``proxy`` stands in for itself as a whole. Any
other subject (a layer, an outer function) is searched for the names its
code looks up a function with a proxy by: its ``call`` or body, the
helpers and methods they call, the modules they read attributes of, and a
layer's attributes (a sublayer, a quantizer function held by the layer).
The references then rebind each of those names to its stand-in
(:mod:`gradcheck.targets.proxy`); the custom call never sees them.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gradcheck import _tf, nesting, proxying
from gradcheck.checking import surrogates
from gradcheck.checking.build import Built, table_key
from gradcheck.inputs import CallPlan
from gradcheck.targets import LayerTarget
from gradcheck.targets.patch import Patch, undecorated
from gradcheck.targets.proxy import ProxiedTarget, Proxy, Site, Surrogates

if TYPE_CHECKING:
    from gradcheck.checking.request import CheckRequest

#: How deep calls into helper functions and sublayers are followed.
_MAX_DEPTH = 6
#: Packages whose modules hold no user's surrogate.
_NOT_FOLLOWED = {"tensorflow", "keras", "tf_keras", "numpy"}


def with_proxies(built: Built, request: CheckRequest) -> Built:
    """``built`` with a target whose references use the proxies that apply (``built`` itself where none do)."""
    surrogates = Surrogates()
    if request.proxy is not None:
        return replace(built, target=ProxiedTarget(built.target, surrogates, own=request.proxy))
    if not request.reached_proxies:
        return built
    sites = reached_sites(request, built, request.reached_proxies)
    if not sites:
        return built
    target = built.target
    reference = None
    used = tuple(site.proxy for site in sites)
    if isinstance(target, LayerTarget):
        # The layer rebinds the custom-gradient functions it calls by name itself: those that have proxies
        # get a stand-in as the forward it binds them to.
        by_place = {(id(site.namespace), site.name): site for site in sites}
        patches = [
            _stood_in(patch, by_place.pop((id(patch.namespace), patch.name), None), surrogates)
            for patch in target.patches
        ]
        reference = LayerTarget(target.layer, patches)
        sites = list(by_place.values())
    proxied = ProxiedTarget(target, surrogates, sites=tuple(sites), reference=reference, used=used)
    return replace(built, target=proxied)


def _stood_in(patch: Patch, site: Site | None, surrogates: Surrogates) -> Patch:
    if site is None:
        return patch
    stand_in = surrogates.stand_in(site.proxy, undecorated(patch))
    return replace(patch, forward=lambda *args, **kwargs: (stand_in(*args, **kwargs), None))


def proxy_note(target: Any) -> str | None:
    """What the references took from which proxy, for the report's notes."""
    if not isinstance(target, ProxiedTarget) or not target.proxies:
        return None
    described = "; ".join(f"{p.surrogate} -> {p.spec}" for p in target.proxies)
    return (
        f"surrogate gradient checked against its proxy ({described}): the references take the forward "
        "value and the proxy's derivative"
    )


def declaring(request: CheckRequest, built: Built, plan: CallPlan) -> surrogates.Declaring:
    """Where the subject's proxy line goes for the surrogate hints, and the proxies it already uses."""
    positional = plan.positional
    second = positional[1] if len(positional) > 1 and positional[1].role == "constant" else None
    second_input = positional[1].name if len(positional) > 1 and positional[1].role == "input" else None
    used = built.target.proxies if isinstance(built.target, ProxiedTarget) else ()
    table: str | None = table_key(request)
    reaches: tuple[str, ...] = ()
    if built.layer is not None:
        reaches = surrogate_functions(built.layer)
        if reaches:
            table = f"[functions.{reaches[0]}]" if len(reaches) == 1 else None
    return surrogates.Declaring(
        table=table,
        layer=built.layer is not None,
        second=(second.name, second.value) if second is not None else None,
        positional=len(positional),
        reaches=reaches,
        declared=", ".join(p.spec for p in used) or None,
        second_input=second_input,
    )


def surrogate_functions(layer: Any) -> tuple[str, ...]:
    """The module-level functions a layer's code looks up by name that make custom gradients (a function
    table can declare their proxies), by the names that define them."""
    entries: list[tuple[dict[str, Any], str, Any]] = []
    _Walk(entries).layer(layer, 0)
    found = []
    for namespace, _, value in entries:
        if "__spec__" not in namespace or not callable(value) or isinstance(value, (type, ModuleType)):
            continue  # only module globals: a layer's attributes and methods have no function table
        plain = nesting.plain_function(value)
        module = getattr(plain, "__module__", None)
        if _tf.custom_gradient_parts(value) is not None or (
            isinstance(module, str) and inspect.isfunction(plain) and nesting.NestingReader(module).reaches(plain)
        ):
            found.append(getattr(plain, "__name__", ""))
    return tuple(name for name in dict.fromkeys(found) if name)


def reached_sites(request: CheckRequest, built: Built, proxies: dict[str, Proxy] | Any) -> list[Site]:
    """Every name the subject's code looks a function with a proxy up by, each with its proxy."""
    entries: list[tuple[dict[str, Any], str, Any]] = []
    walk = _Walk(entries)
    subject = request.subject
    if built.layer is not None:
        walk.layer(built.layer, 0)
    elif subject.forward is not None:
        walk.function(subject.forward, subject.owner, 0)
    objects: dict[int, Proxy] = {}
    for _, name, value in entries:
        if name in proxies and callable(value) and not isinstance(value, type):
            objects[id(value)] = proxying.for_function(proxies[name], value)
    sites: dict[tuple[int, str], Site] = {}
    for namespace, name, value in entries:
        if id(value) in objects:
            sites.setdefault((id(namespace), name), Site(namespace, name, objects[id(value)]))
    return list(sites.values())


class _Walk:
    """Follows a subject's code, recording each ``(namespace, name, value)`` it looks up."""

    def __init__(self, entries: list[tuple[dict[str, Any], str, Any]]) -> None:
        self.entries = entries
        self._seen: set[int] = set()

    def layer(self, layer: Any, depth: int) -> None:
        """A layer's ``call`` (and its class's methods), its function attributes and its sublayers."""
        if id(layer) in self._seen or depth > _MAX_DEPTH:
            return
        self._seen.add(id(layer))
        cls = type(layer)
        self.function(getattr(cls, "call", None), cls, depth)
        attributes = _tf.attribute(layer, "__dict__", {}) or {}
        for name, value in list(attributes.items()):
            if _tf.is_keras_layer_class(type(value)):
                self.layer(value, depth + 1)
            elif inspect.isfunction(value) or _tf.custom_gradient_parts(value) is not None:
                self.entries.append((attributes, name, value))

    def function(self, func: Any, cls: type | None, depth: int) -> None:
        """The names ``func``'s code uses, resolved in its globals and the modules it reads from."""
        func = inspect.unwrap(nesting.plain_function(func)) if func is not None else None
        code = getattr(func, "__code__", None)
        if code is None or id(code) in self._seen or depth > _MAX_DEPTH:
            return
        self._seen.add(id(code))
        namespace = getattr(func, "__globals__", {})
        names = nesting.code_names(code)
        for name in names:
            if name in namespace:
                self._resolved(namespace, name, names, depth)
            member = nesting.class_member(cls, name) if cls is not None else None
            if member is not None:
                self.function(member, cls, depth + 1)

    def _resolved(self, namespace: dict[str, Any], name: str, names: list[str], depth: int) -> None:
        value = namespace[name]
        self.entries.append((namespace, name, value))
        if isinstance(value, ModuleType):
            if value.__name__.partition(".")[0] in _NOT_FOLLOWED or value.__name__ in sys.stdlib_module_names:
                return
            members = vars(value)
            for attr in names:
                if attr in members:
                    self.entries.append((members, attr, members[attr]))
                    if inspect.isfunction(members[attr]):
                        self.function(members[attr], None, depth + 1)
        elif inspect.isfunction(value) and not _tf.is_tf_own(value):
            self.function(value, None, depth + 1)
