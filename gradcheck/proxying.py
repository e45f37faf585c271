"""The proxies a check uses, read from the config: the subject's own, and those of the functions it may reach.

A function table's ``proxy = "module:function"`` (or ``gradcheck.check``'s
``proxy=``) is imported here, as the request is made, so that a proxy that
cannot be imported, or is no function, is a usage error (exit 2) naming the
config file and the key before any check runs. A ``constants`` entry that
the function has no parameter for is the proxy's own (a scale, a clip
bound): it goes to the proxy alone, by keyword, and must be one of the
proxy's named parameters. Where a subject reaches the functions is found
when it is checked (:mod:`gradcheck.checking.proxied`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradcheck.config import Config, ImportValue, SubjectConfig, closest
from gradcheck.errors import ConfigError
from gradcheck.importing import import_object
from gradcheck.targets.proxy import Proxy

#: The module of gradcheck's own proxies: imported as a library, never as the user's code.
SHIPPED = "gradcheck.proxies"


def resolve(value: Any, surrogate: str, where: str, target: Path | None) -> Proxy:
    """The proxy a table's (or ``gradcheck.check``'s) ``proxy`` value names, imported and checked callable.

    ``where`` names the value in messages (``gradcheck.toml: functions.ste_sign.proxy``).
    """
    if isinstance(value, ImportValue):
        function = _shipped(value, where) if value.module == SHIPPED else import_object(value, target)
        spec = value.spec
    else:
        function, spec = value, _name_of(value)
    if not callable(function) or isinstance(function, type):
        raise ConfigError(
            f"{where}: {spec} is {_article(function)}, not a function; name a function that takes the "
            f"arguments of {surrogate} and whose derivative its gradient stands for"
        )
    return Proxy(function, spec, surrogate)


def _shipped(value: ImportValue, where: str) -> Any:
    """One of gradcheck's own proxies, by name."""
    import gradcheck.proxies as shipped

    name = value.attribute
    if name not in shipped.__all__:
        known = shipped.__all__
        raise ConfigError(
            f"{where}: {value.spec}: {SHIPPED} has no proxy '{name}'{closest(name, known)}; it has {', '.join(known)}"
        )
    return getattr(shipped, name)


def _name_of(function: Any) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or repr(function)
    return f"{module}:{name}" if module else str(name)


def _article(value: Any) -> str:
    kind = "class" if isinstance(value, type) else type(value).__name__
    return f"an {kind}" if kind[:1].lower() in "aeiou" else f"a {kind}"


def parameters(function: Any) -> tuple[set[str], bool] | None:
    """A function's named parameters, and whether ``*args`` or ``**kwargs`` takes any other; None: unknown."""
    try:
        found = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    named = {p.name for p in found if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return named, any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in found)


def proxy_constants(function: Any, constants: Mapping[str, Any]) -> dict[str, Any]:
    """The ``constants`` entries ``function`` has no parameter for: the proxy's own."""
    known = parameters(function)
    if known is None or known[1]:
        return {}
    return {name: value for name, value in constants.items() if name not in known[0]}


def own_proxy(
    table: SubjectConfig | None, function: Any, where: str, resolved: Callable[[Any], Proxy]
) -> tuple[SubjectConfig | None, Proxy | None]:
    """The table without the proxy's own constants, and the proxy of the checked ``function``; ``where`` is the
    table's key in messages (``gradcheck.toml: functions.ste``), ``resolved`` imports a ``proxy`` value."""
    if table is None or table.proxy is None:
        return table, None
    proxy = resolved(table.proxy)
    own = proxy_constants(function, table.constants) if function is not None else {}
    named = parameters(proxy.function)
    for name in own:
        if named is not None and name not in named[0]:
            raise ConfigError(
                f"{where}.constants.{name}: {proxy.surrogate} has no argument '{name}', and its proxy {proxy.spec} "
                f"has no parameter of that name{closest(name, named[0])} (a constant the function does not take "
                f"goes to the proxy); the proxy's parameters are {', '.join(sorted(named[0])) or 'none'}"
            )
    kept = {name: value for name, value in table.constants.items() if name not in own}
    return replace(table, constants=kept), replace(proxy, constants=own)


def reached_proxies(
    config: Config, own_names: tuple[str, ...], resolved: Callable[[str, Any], Proxy]
) -> dict[str, Proxy]:
    """The proxy of every other function table that declares one, by name, with all that table's constants
    (:func:`for_function` keeps those the function it is found for has no parameter for)."""
    found = {}
    for name, table in config.functions.items():
        if table.proxy is not None and name not in own_names:
            found[name] = replace(resolved(name, table.proxy), constants=dict(table.constants))
    return found


def for_function(proxy: Proxy, function: Any) -> Proxy:
    """A reached function's proxy with only the constants of its table that the function does not take."""
    return replace(proxy, constants=proxy_constants(function, proxy.constants))
