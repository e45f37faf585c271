"""The Python API: ``check`` and ``assert_gradients``, for tests and notebooks."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradcheck.config import (
    Config,
    InputConfig,
    SubjectConfig,
    merged_settings,
    parse_input,
    validate_setting,
)
from gradcheck.errors import UsageError
from gradcheck.results import Result, RunReport

_LABEL = "gradcheck.check()"


def _input_config(name: str, value: Any, dims: Mapping[str, int]) -> InputConfig:
    if isinstance(value, (tuple, list)):
        return parse_input(_LABEL, f"inputs.{name}", list(value), dims)
    if isinstance(value, Mapping):
        return parse_input(_LABEL, f"inputs.{name}", dict(value), dims)
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_input(_LABEL, f"inputs.{name}", [value], dims)
    raise UsageError(f"{_LABEL}: inputs.{name}: {value!r} must be a shape (a tuple of sizes) or a dict with 'shape'")


def _subject_for(fn: Any) -> Any:
    from gradcheck import _tf
    from gradcheck.discovery import Subject, _def_line, display_path, reached_custom_gradients

    layer_class = fn if isinstance(fn, type) else type(fn)
    if _tf.is_keras_layer_class(layer_class):
        patches = reached_custom_gradients(layer_class.call, layer_class)
        if not patches:
            raise UsageError(f"{_LABEL}: {layer_class.__name__}.call reaches no @tf.custom_gradient function")
        source = getattr(getattr(layer_class.call, "__code__", None), "co_filename", None)
        path = display_path(Path(source)) if source else "<unknown>"
        return Subject(
            id=f"{path}::{layer_class.__name__}",
            name=layer_class.__name__,
            kind="layer",
            path=path,
            line=0,
            obj=fn,
            forward=None,
            owner=layer_class,
            binding="layer",
            module=sys.modules.get(layer_class.__module__),
            patches=tuple(patches),
            reaches=tuple(dict.fromkeys(name for _, name in patches)),
        )
    parts = _tf.custom_gradient_parts(fn)
    wrapper = _tf.wrapper_parts(fn) if parts is None else None
    if parts is None and wrapper is None:
        raise UsageError(f"{_LABEL}: {getattr(fn, '__qualname__', fn)!r} is not a @tf.custom_gradient function")
    forward = parts.forward if parts is not None else wrapper[1]  # type: ignore[index]
    name = getattr(forward, "__qualname__", getattr(forward, "__name__", "function"))
    try:
        source = inspect.getsourcefile(inspect.unwrap(forward))
    except TypeError:
        source = None
    path = display_path(Path(source)) if source else "<unknown>"
    return Subject(
        id=f"{path}::{name}",
        name=name,
        kind="function",
        path=path,
        line=_def_line(forward),
        obj=fn,
        forward=forward,
        decorators=parts.decorators if parts is not None else (wrapper[0],),  # type: ignore[index]
        input_signature=parts.input_signature if parts is not None else None,
        binding="function" if parts is not None else "wrapper",
        module=inspect.getmodule(forward),
    )


def check(
    fn: Any,
    inputs: Mapping[str, Any] | None = None,
    *,
    constants: Mapping[str, Any] | None = None,
    init: Mapping[str, Any] | None = None,
    reference: str | None = None,
    mode: str | None = None,
    dtype: str | None = None,
    seed: int | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    eps: float | None = None,
    execution: str | None = None,
    shape_only: bool | None = None,
    order: int | None = None,
    dims: Mapping[str, int] | None = None,
    device: str | None = None,
) -> Result:
    """Check one custom-gradient function (or Keras layer) and return its result record.

    ``inputs`` maps argument names to shapes (``(32, 16)``) or to tables as
    in the config (``{"shape": [64], "low": -30.0, "high": 30.0}``); names
    from ``dims`` may stand for sizes. Without ``inputs``, small shapes are
    guessed. ``init`` holds the constructor arguments of a layer class (a
    layer instance is checked as it is, its weights restored afterwards).
    The other keyword arguments are the config's settings; ``device`` is
    ``cpu``, ``gpu`` or ``auto`` as for ``--device``.

    The check runs in this process, without ``gradcheck run``'s timeout and
    memory bound; the caller's global state (random states, TensorFlow's
    switches, the directory, the function's variables) is as before afterwards.
    """
    from gradcheck.checking import CheckRequest, check_subject

    subject = _subject_for(fn)
    dims = dict(dims or {})
    table = SubjectConfig(
        inputs={name: _input_config(name, value, dims) for name, value in (inputs or {}).items()},
        constants=dict(constants or {}),
        init=dict(init or {}),
    )
    given = {
        "reference": reference,
        "mode": mode,
        "dtype": dtype,
        "seed": seed,
        "atol": atol,
        "rtol": rtol,
        "eps": eps,
        "execution": execution,
        "shape_only": shape_only,
        "order": order,
        "device": device,
    }
    overrides = {key: validate_setting(_LABEL, key, value) for key, value in given.items() if value is not None}
    settings = merged_settings(Config(dims=dims), table, overrides)
    if settings.device == "gpu":
        from gradcheck import _tf

        if not _tf.gpu_available():
            raise UsageError(f"{_LABEL}: device='gpu': TensorFlow sees no GPU on this machine; use 'cpu' or 'auto'")
    command = f"gradcheck.check({subject.name}, seed={settings.seed})"
    request = CheckRequest(
        subject=subject,
        settings=settings,
        config=table,
        dims=dims,
        config_label=_LABEL,
        reproduce=command,
        dtype_given=dtype is not None,
    )
    return check_subject(request)


def assert_gradients(fn: Any, inputs: Mapping[str, Any] | None = None, **settings: Any) -> Result:
    """Like :func:`check`, but raise ``AssertionError`` with the text report unless it passed."""
    from gradcheck.reporting.text import render_text_string

    result = check(fn, inputs, **settings)
    if result.status != "passed":
        report = RunReport(results=(result,), seed=settings.get("seed") or 0, seconds=result.seconds)
        raise AssertionError("\n" + render_text_string(report, verbosity=0))
    return result
