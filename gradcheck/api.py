"""The Python API: ``check`` and ``assert_gradients``, for tests and notebooks."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from gradcheck.config import (
    Config,
    InputConfig,
    SubjectConfig,
    closest,
    parse_input,
    parse_proxy,
    parse_values,
    validate_setting,
)
from gradcheck.errors import UsageError
from gradcheck.results import Result, RunReport
from gradcheck.settings import KEYWORD_SETTINGS

_LABEL = "gradcheck.check()"
#: ``check``'s settings keywords: the rows of the settings table that ``gradcheck.check`` takes.
_KEYWORDS = {setting.name for setting in KEYWORD_SETTINGS}


def _input_config(name: str, value: Any, dims: Mapping[str, int]) -> InputConfig:
    if isinstance(value, (tuple, list)):
        return parse_input(_LABEL, f"inputs.{name}", list(value), dims)
    if isinstance(value, Mapping):
        return parse_input(_LABEL, f"inputs.{name}", dict(value), dims)
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_input(_LABEL, f"inputs.{name}", [value], dims)
    raise UsageError(f"{_LABEL}: inputs.{name}: {value!r} must be a shape (a tuple of sizes) or a dict with 'shape'")


def check(
    fn: Any,
    inputs: Mapping[str, Any] | None = None,
    *,
    constants: Mapping[str, Any] | None = None,
    init: Mapping[str, Any] | None = None,
    dims: Mapping[str, int] | None = None,
    proxy: Any = None,
    **settings: Any,
) -> Result:
    """Check one custom-gradient function (or Keras layer) and return its result record.

    ``inputs`` maps argument names to shapes (``(32, 16)``) or to tables as
    in the config (``{"shape": [64], "low": -30.0, "high": 30.0}``); names
    from ``dims`` may stand for sizes. Without ``inputs``, small shapes are
    guessed. ``init`` holds the constructor arguments of a layer class (a
    layer instance is checked as it is, its weights restored afterwards).
    ``proxy`` declares a surrogate gradient: the function (or its
    ``"module:function"``) whose derivative the custom gradient stands for,
    called with the same arguments (a layer's: those of its ``call``); or,
    for a layer or an outer function that reaches surrogates by name, a
    mapping from each surrogate function's name to its proxy.
    The other keyword arguments are the config's settings, checked as the
    config's are: the rows of :data:`gradcheck.settings.TABLE` marked
    ``keyword``, listed at the end of this docstring.

    The check runs in this process, without ``gradcheck run``'s timeout and
    memory bound; the caller's global state (random states, TensorFlow's
    switches, the directory, the function's variables) is as before afterwards.
    """
    from gradcheck.check_requests import build_request
    from gradcheck.checking import check_subject
    from gradcheck.subjects import subject_of, why_not_subject

    for name in settings:
        if name not in _KEYWORDS:
            raise TypeError(f"check() got an unexpected keyword argument {name!r}{closest(name, _KEYWORDS)}")
    subject = subject_of(fn)
    if subject is None:
        raise UsageError(f"{_LABEL}: {why_not_subject(fn)}")
    dims = dict(dims or {})
    own, functions = _proxies(proxy)
    table = SubjectConfig(
        inputs={name: _input_config(name, value, dims) for name, value in (inputs or {}).items()},
        constants=parse_values(_LABEL, "constants", dict(constants or {})),
        init=parse_values(_LABEL, "init", dict(init or {})),
        proxy=own,
    )
    given = {name: validate_setting(_LABEL, name, value) for name, value in settings.items() if value is not None}
    request = build_request(
        subject,
        Config(dims=dims, functions=functions),
        given,
        given_by=_LABEL,
        table=table,
        config_label=_LABEL,
        reproduce=lambda merged: f"gradcheck.check({subject.name}, seed={merged.seed})",
    )
    return check_subject(request)


def _proxies(proxy: Any) -> tuple[Any, dict[str, SubjectConfig]]:
    """``proxy=``: the subject's own proxy, or a table per surrogate it reaches (a mapping of their names)."""
    if isinstance(proxy, Mapping):
        return None, {name: SubjectConfig(proxy=_proxy_value(f"proxy.{name}", value)) for name, value in proxy.items()}
    return _proxy_value("proxy", proxy), {}


def _proxy_value(key: str, value: Any) -> Any:
    """A ``proxy`` keyword's value: ``"module:function"`` checked for form, a callable as it is."""
    if value is None or callable(value):
        return value
    return parse_proxy(_LABEL, key, value, None)


def _signature() -> inspect.Signature:
    """``check``'s signature with each settings keyword spelt out, for ``help()`` and editors."""
    parameters = [p for p in inspect.signature(check).parameters.values() if p.kind is not p.VAR_KEYWORD]
    parameters += [
        inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, default=None) for setting in KEYWORD_SETTINGS
    ]
    return inspect.Signature(parameters, return_annotation="Result")


check.__signature__ = _signature()  # type: ignore[attr-defined]
check.__doc__ = (
    (check.__doc__ or "")
    + "\n    Settings keywords:\n\n"
    + "".join(
        f"    - ``{setting.name}`` (default {setting.default!r}): {setting.help}\n" for setting in KEYWORD_SETTINGS
    )
)


def assert_gradients(fn: Any, inputs: Mapping[str, Any] | None = None, **settings: Any) -> Result:
    """Like :func:`check`, but raise ``AssertionError`` with the text report unless it passed."""
    from gradcheck.reporting.text import render_text_string

    result = check(fn, inputs, **settings)
    if result.status != "passed":
        report = RunReport(results=(result,), seed=settings.get("seed") or 0, seconds=result.seconds)
        raise AssertionError("\n" + render_text_string(report, verbosity=0))
    return result
