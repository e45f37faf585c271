"""The one module that imports TensorFlow and reads its internals.

Everything else asks this module for ``tf`` so that ``import gradcheck`` and
``gradcheck --help`` never pay TensorFlow's import time, and so that the
private attributes we rely on (``_tf_decorator``, ``tf_decorator.unwrap``)
are read in one place that a TensorFlow upgrade can break only once.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gradcheck.errors import TensorFlowMissing

_VERBOSE = False


def set_verbose(verbose: bool) -> None:
    """Let TensorFlow's own log lines through (``-v``) or keep them out."""
    global _VERBOSE
    _VERBOSE = verbose


@contextlib.contextmanager
def _stderr_fd_silenced() -> Iterator[None]:
    """Silence file descriptor 2 while TensorFlow's C++ runtime starts.

    TF 2.21 prints absl and oneDNN lines straight to fd 2 during import even
    with TF_CPP_MIN_LOG_LEVEL=3, below Python's ``sys.stderr``.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def tensorflow() -> Any:
    """Import TensorFlow once, quietly, and return the module."""
    module = sys.modules.get("tensorflow")
    if module is not None and hasattr(module, "custom_gradient"):
        return module
    if _VERBOSE:
        try:
            import tensorflow as module
        except ImportError as error:
            if error.name in ("tensorflow", None):
                raise TensorFlowMissing() from error
            raise
        return module
    previous = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    try:
        with _stderr_fd_silenced():
            import tensorflow as module
    except ImportError as error:
        if error.name in ("tensorflow", None) or "tensorflow" in str(error.name):
            raise TensorFlowMissing() from error
        raise
    finally:
        if previous is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        else:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = previous
    return module


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep TensorFlow's Python warnings (retracing and the like) out of reports, unless ``-v``.

    Each checked function gets a ``tf.function`` of its own, traced once per
    shape; TensorFlow's heuristic warns about that as "retracing" although no
    function is traced twice.
    """
    tf = tensorflow()
    # Unfiltered tracebacks keep TensorFlow's own frames, so an error can be
    # told apart from a bug in gradcheck, and the user's frame found.
    filtering = tf.debugging.is_traceback_filtering_enabled()
    tf.debugging.disable_traceback_filtering()
    logger = tf.get_logger()
    level = logger.level
    if not _VERBOSE:
        logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)
        if filtering:
            tf.debugging.enable_traceback_filtering()


def tensorflow_available() -> bool:
    """True when TensorFlow can be imported (without importing it)."""
    if "tensorflow" in sys.modules:
        return True
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken installation
        return False


# -- global state: what a user's module can change and gradcheck puts back ----------------------


def global_flags() -> dict[str, Any]:
    """The process-wide switches a user's module can flip, by name, each read through TensorFlow's own functions.

    ``eager``, ``run_functions_eagerly``, ``tensor_float_32``, ``soft_device_placement``,
    ``op_determinism``, ``jit`` and ``check_numerics``; ``keras_floatx`` and
    ``keras_dtype_policy`` where Keras is imported. :func:`set_global_flags` writes them back.
    """
    tf = tensorflow()
    from tensorflow.python.framework import config as tf_config

    flags: dict[str, Any] = {
        "eager": tf.executing_eagerly(),
        "run_functions_eagerly": tf.config.functions_run_eagerly(),
        "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "soft_device_placement": tf.config.get_soft_device_placement(),
        # Not exported under tf.config, but the switch enable_op_determinism() flips.
        "op_determinism": tf_config.is_op_determinism_enabled(),
        "jit": tf.config.optimizer.get_jit(),
        "check_numerics": _check_numerics_enabled(),
    }
    keras = _keras_config()
    if keras is not None:
        flags["keras_floatx"] = keras.floatx()
        flags["keras_dtype_policy"] = _keras_policy_setting()
    return flags


def _check_numerics_enabled() -> bool:
    """Whether ``tf.debugging.enable_check_numerics()`` is in force (it has no getter of its own)."""
    from tensorflow.python.debug.lib import check_numerics_callback

    return hasattr(check_numerics_callback._state, "check_numerics_callback")


def set_global_flags(flags: dict[str, Any]) -> None:
    """Set the switches in ``flags`` (as :func:`global_flags` returns them) that differ from now."""
    tf = tensorflow()
    from tensorflow.python.framework import config as tf_config

    now = global_flags()
    changed = {name: value for name, value in flags.items() if name in now and now[name] != value}
    if "eager" in changed:
        # Both work at any time in TF 2.x, although the v1 docs say "at program startup".
        if changed["eager"]:
            tf.compat.v1.enable_eager_execution()
        else:
            tf.compat.v1.disable_eager_execution()
    if "run_functions_eagerly" in changed:
        tf.config.run_functions_eagerly(changed["run_functions_eagerly"])
    if "tensor_float_32" in changed:
        tf.config.experimental.enable_tensor_float_32_execution(changed["tensor_float_32"])
    if "soft_device_placement" in changed:
        tf.config.set_soft_device_placement(changed["soft_device_placement"])
    if "op_determinism" in changed:
        if changed["op_determinism"]:
            tf_config.enable_op_determinism()
        else:
            tf_config.disable_op_determinism()
    if "jit" in changed:
        tf.config.optimizer.set_jit(changed["jit"])
    if "check_numerics" in changed:
        if changed["check_numerics"]:
            tf.debugging.enable_check_numerics()
        else:
            tf.debugging.disable_check_numerics()
    keras = _keras_config()
    if keras is not None and "keras_floatx" in changed:
        keras.set_floatx(changed["keras_floatx"])
    if keras is not None and "keras_dtype_policy" in changed:
        _set_keras_policy_setting(changed["keras_dtype_policy"])


def _keras_policy_setting() -> Any:
    """The global dtype policy as set, None when unset.

    Not ``keras.config.dtype_policy()``: unset, that makes a fresh policy from
    ``floatx`` on every call, and setting it back would pin the policy to
    that ``floatx`` for good.
    """
    from keras.src.backend.common import global_state

    return global_state.get_global_attribute("dtype_policy", None)


def _set_keras_policy_setting(policy: Any) -> None:
    from keras.src.backend.common import global_state

    global_state.set_global_attribute("dtype_policy", policy)


def _keras_config() -> Any:
    """``keras.config`` where Keras is loaded already (TensorFlow 2.16+ loads it), else None."""
    if "keras" not in sys.modules:
        return None
    try:
        import keras
    except ImportError:  # pragma: no cover - a half-installed Keras
        return None
    config = getattr(keras, "config", None)
    return config if hasattr(config, "floatx") and hasattr(config, "set_floatx") else None


#: The library attributes gradcheck finds and switches custom gradients through, by module: a
#: module that replaces one at import (a shim that switches custom gradients off) would hide
#: every later module's custom gradients.
LIBRARY_ATTRIBUTES = {
    "tensorflow": (
        "custom_gradient",
        "recompute_grad",
        "grad_pass_through",
        "RegisterGradient",
        "GradientTape",
        "function",
    ),
    "tensorflow.compat.v2": ("custom_gradient", "recompute_grad", "GradientTape", "function"),
    "tensorflow.python.ops.custom_gradient": ("custom_gradient", "recompute_grad", "grad_pass_through", "Bind"),
    "keras.ops": ("custom_gradient",),
}


def library_attributes() -> dict[tuple[str, str], Any]:
    """The current value of each of :data:`LIBRARY_ATTRIBUTES` in the modules already loaded."""
    found: dict[tuple[str, str], Any] = {}
    for module_name, names in LIBRARY_ATTRIBUTES.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in names:
            value = vars(module).get(name, _MISSING)
            if value is not _MISSING:
                found[(module_name, name)] = value
    return found


def set_library_attributes(saved: dict[tuple[str, str], Any]) -> None:
    """Put back each attribute :func:`library_attributes` found, where it now differs."""
    for (module_name, name), value in saved.items():
        module = sys.modules.get(module_name)
        if module is not None and vars(module).get(name, _MISSING) is not value:
            setattr(module, name, value)


@dataclass(frozen=True)
class RandomState:
    """TensorFlow's global random state: the global seed and what random ops derive from it."""

    seed: int | None
    """The global seed (``tf.random.set_seed``), None when unset."""
    op_seeds: Any
    """The state of the generator eager ops draw their op seeds from, when a global seed is set."""
    graph_seed: int | None
    """The default graph's seed (graph mode, after ``disable_eager_execution``)."""
    generator: Any
    """The global ``tf.random.Generator`` object, None until first used."""
    generator_state: Any
    """Its state variable's value."""


def random_state() -> RandomState:
    """TensorFlow's global random state, to put back with :func:`set_random_state`."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import stateful_random_ops

    ctx = context.context()
    rng = getattr(ctx, "_rng", None)
    seed = getattr(ctx, "_seed", None)
    generator = stateful_random_ops.global_generator
    return RandomState(
        seed=seed,
        op_seeds=rng.getstate() if seed is not None and rng is not None else None,
        graph_seed=ops.get_default_graph().seed,
        generator=generator,
        generator_state=generator.state.numpy() if generator is not None else None,
    )


def set_random_state(state: RandomState) -> None:
    """Put TensorFlow's global random state back as :func:`random_state` found it.

    The global seed lives in private attributes of the eager context
    (``tf.random.set_seed`` has no getter); ``_set_global_seed`` is what
    ``tf.random.set_seed`` itself calls, and it also clears the kernel cache
    that holds the counters of seeded random ops.
    """
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import stateful_random_ops

    ctx = context.context()
    seed = getattr(ctx, "_seed", None)
    if state.seed is None:
        if seed is not None:
            ctx._set_global_seed(0)  # clears the kernel cache, as tf.random.set_seed does
            ctx._seed = None
    else:
        rng = getattr(ctx, "_rng", None)
        if seed != state.seed or rng is None or rng.getstate() != state.op_seeds:
            ctx._set_global_seed(state.seed)
            if state.op_seeds is not None:
                ctx._rng.setstate(state.op_seeds)
    graph = ops.get_default_graph()
    if graph.seed != state.graph_seed:
        graph.seed = state.graph_seed
    stateful_random_ops.global_generator = state.generator
    if state.generator is not None and state.generator_state is not None:
        state.generator.state.assign(state.generator_state)


def gpu_available() -> bool:
    """True when TensorFlow sees at least one GPU."""
    return bool(tensorflow().config.list_physical_devices("GPU"))


def device_name(device: str) -> str:
    """The TensorFlow device a ``--device`` value stands for: ``auto`` is the GPU where there is one."""
    if device == "auto":
        device = "gpu" if gpu_available() else "cpu"
    return "/GPU:0" if device == "gpu" else "/CPU:0"


@dataclass(frozen=True)
class CustomGradientParts:
    """What a custom-gradient object is made of."""

    forward: Callable[..., Any]
    """The undecorated function: returns ``(result, grad_fn)``."""
    decorators: tuple[str, ...]
    """Decorator names from the outside in, e.g. ``('tf.function', 'custom_gradient')``."""
    input_signature: tuple[Any, ...] | None
    """The ``input_signature`` of an enclosing ``tf.function``, if any."""


def attribute(obj: Any, name: str, default: Any = None) -> Any:
    """``getattr(obj, name, default)`` for any object a user's module holds, without its side effects.

    A module's attributes are read from its ``__dict__`` alone: asking a
    ``LazyLoader`` (TensorFlow's, TFP's) or a module-level ``__getattr__``
    for anything else imports what it stands for, and an optional dependency
    that is not installed then raises ``ModuleNotFoundError``. Any other
    object's ``__getattr__`` or property may raise anything: that object just
    does not have the attribute.
    """
    if isinstance(obj, ModuleType):
        return vars(obj).get(name, default)
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


_MISSING = object()


def has_attribute(obj: Any, name: str) -> bool:
    """``hasattr`` with the guarantees of :func:`attribute`."""
    return attribute(obj, name, _MISSING) is not _MISSING


def _decorator_chain(obj: Any) -> tuple[list[Any], Any]:
    """``tf_decorator.unwrap`` without importing TensorFlow for plain objects."""
    if attribute(obj, "_tf_decorator") is None:
        return [], obj
    from tensorflow.python.util import tf_decorator

    return tf_decorator.unwrap(obj)


def custom_gradient_parts(obj: Any) -> CustomGradientParts | None:
    """The parts of ``obj`` if it is a ``@tf.custom_gradient`` function, else None.

    Sees through ``tf.function`` and other TF decorators stacked on top;
    ``tf_decorator.unwrap`` returns them outermost first.
    """
    try:
        decorators, target = _decorator_chain(obj)
    except Exception:  # an object whose attribute access raises is not ours to check
        return None
    names = tuple(getattr(d, "decorator_name", "") for d in decorators)
    if "custom_gradient" not in names or not callable(target):
        return None
    signature = getattr(obj, "input_signature", None)
    return CustomGradientParts(
        forward=target,
        decorators=names,
        input_signature=tuple(signature) if signature is not None else None,
    )


def flatten_with_paths(structure: Any) -> list[tuple[str, Any]]:
    """``tf.nest.flatten`` with each leaf's path (``"a/0"``); TF's public API has no such function."""
    from tensorflow.python.util import nest

    return nest.flatten_with_joined_string_paths(structure)


def differentiable_outputs(structure: Any) -> list[tuple[str, Any]]:
    """The real-valued parts of a forward pass's result, each with its path, in upstream order.

    A float tensor is itself; a complex tensor is its real and imaginary
    parts (paths ``PATH.real``, ``PATH.imag``). Checking the parts with real
    upstreams ``a`` and ``b`` is checking the complex output under
    TensorFlow's convention: the backward function receives ``dy = a + ib``
    (``dL/dRe y + i dL/dIm y``), and finite differences of the real loss
    ``<a, Re y> + <b, Im y>`` are the reference.
    """
    tf = tensorflow()
    parts: list[tuple[str, Any]] = []
    for index, (path, value) in enumerate(flatten_with_paths(structure)):
        if not isinstance(value, (tf.Tensor, tf.Variable)):
            continue
        label = path or str(index)
        if value.dtype.is_floating:
            parts.append((label, value))
        elif value.dtype.is_complex:
            parts.append((label + ".real", tf.math.real(value)))
            parts.append((label + ".imag", tf.math.imag(value)))
    return parts


def is_keras_variable(value: Any) -> bool:
    """True for a Keras 3 variable (which is not a ``tf.Variable`` but wraps one)."""
    return any(cls.__name__ == "Variable" and cls.__module__.startswith("keras") for cls in type(value).__mro__)


def underlying_variable(value: Any) -> Any:
    """The ``tf.Variable`` behind a Keras 3 variable (or the variable itself)."""
    return value.value if is_keras_variable(value) else value


def is_keras_layer_class(obj: Any) -> bool:
    """True for a subclass of Keras's ``Layer`` (Keras 3 or tf.keras), without importing Keras."""
    if not isinstance(obj, type):
        return False
    return any(cls.__name__ == "Layer" and cls.__module__.startswith(("keras", "tf_keras")) for cls in obj.__mro__[1:])


def wrapper_parts(obj: Any) -> tuple[str, Callable[..., Any]] | None:
    """``(decorator name, wrapped function)`` for TF gradient wrappers such as ``tf.recompute_grad``."""
    try:
        decorators, target = _decorator_chain(obj)
    except Exception:  # an object whose attribute access raises is not ours to check
        return None
    names = [getattr(d, "decorator_name", "") for d in decorators]
    for name in ("recompute_grad", "grad_pass_through"):
        if name in names and callable(target):
            return name, target
    return None


def is_tf_own(obj: Any) -> bool:
    """True for TensorFlow's own decorators imported into a user's namespace."""
    module = attribute(obj, "__module__", "") or ""
    if not isinstance(module, str):
        return False
    return module.startswith(("tensorflow", "keras", "tf_keras"))


#: TensorFlow shares the memory of a numpy array aligned to this many bytes instead of copying it.
def adopt(array: Any, dtype: str) -> Any:
    """A tensor of ``dtype`` over a numpy array the caller built for it and no longer touches.

    ``tf.constant`` copies every numpy array first, in case the caller changes
    it later, and TensorFlow copies again unless the array is 64-byte aligned
    (:func:`gradcheck.arrays.aligned_empty`); for a stack of perturbed inputs each copy is a
    pass over tens of MB per forward call. Arrays of another dtype are
    converted (and so copied) as ``tf.constant`` would.
    """
    import numpy as np

    tf = tensorflow()
    target = tf.as_dtype(dtype)
    if not isinstance(array, np.ndarray) or array.dtype != target.as_numpy_dtype or not array.flags.c_contiguous:
        return tf.constant(array, dtype=target)
    try:  # what tf.constant does after its copy; internals, so any change in them falls back to it
        from tensorflow.python.eager import context
        from tensorflow.python.framework import ops

        ctx = context.context()
        ctx.ensure_initialized()
        return ops.EagerTensor(array, ctx.device_name, target.as_datatype_enum)
    except (ImportError, AttributeError, TypeError):
        return tf.constant(array, dtype=target)


# -- the custom-gradient choke point ----------------------------------------------------
#
# ``tf.custom_gradient(f)`` returns a ``Bind``; calling it runs
# ``custom_gradient.<locals>.decorated``, which looks up ``_eager_mode_decorator`` /
# ``_graph_mode_decorator`` as globals of ``tensorflow.python.ops.custom_gradient`` at call
# time. Replacing those two globals for the duration of a call sees every custom gradient the
# call reaches, however the decorator was looked up (``tf.custom_gradient``, an alias, ``from
# ... import custom_gradient``, ``keras.ops.custom_gradient``, TFP's internal helper, a user's
# factory) and whenever it was applied (per call, or at import time). Patching the public
# decorator where it is looked up would miss everything decorated before the patch.
#
# Only the *outermost* calls are instrumented or switched off: a custom gradient reached
# inside another one's forward or backward function is part of that function (TFP's ``stdtr``
# forward calls ``betainc``, whose custom gradient supplies derivatives the raw op lacks).

#: Builds the instrumented forward for one outermost call: ``(forward, eager) -> forward'``.
Instrumenter = Callable[[Callable[..., Any], bool], Callable[..., Any]]


def _custom_gradient_module() -> Any:
    tensorflow()
    from tensorflow.python.ops import custom_gradient as module

    return module


def is_custom_gradient_decorator(obj: Any) -> bool:
    """True for ``tf.custom_gradient`` itself, Keras's, TFP's helper, or any function named so.

    A user's own factory called ``custom_gradient`` counts too: it makes custom gradients.
    """
    if isinstance(obj, type) or not callable(obj):
        return False
    if getattr(obj, "__name__", None) == "custom_gradient":
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and obj is getattr(tf, "custom_gradient", None)


class Reach:
    """While active, every outermost custom-gradient call is instrumented, or switched off.

    ``instrumenter`` (custom runs) gets the undecorated forward function of
    each outermost call and returns the one TensorFlow decorates instead;
    with ``switch_off`` (native runs) the forward runs undecorated and its
    backward function is dropped, so TensorFlow differentiates it. ``calls``
    counts the outermost calls seen. Process-wide while active: gradcheck
    checks one subject at a time per process.
    """

    def __init__(self, instrumenter: Instrumenter | None = None, switch_off: bool = False) -> None:
        self.instrumenter = instrumenter
        self.switch_off = switch_off
        self.calls = 0
        self.names: list[str] = []
        self._depth = 0
        self._saved: tuple[Any, Any] | None = None

    def _intercept(self, original: Any, wrapped: Callable[..., Any], args: tuple, kwargs: dict, eager: bool) -> Any:
        if self._depth > 0:  # inside another custom gradient: part of it, left on
            return original(wrapped, args, kwargs)
        self.calls += 1
        self.names.append(forward_name(wrapped))
        if self.switch_off:
            self._depth += 1
            try:
                result, _unused_grad_fn = wrapped(*args, **kwargs)
            finally:
                self._depth -= 1
            return result
        forward = self._nested(self.instrumenter(wrapped, eager) if self.instrumenter else wrapped)
        return original(forward, args, kwargs)

    def _nested(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        """``forward`` counting as "inside a custom gradient" while it (and its backward) run."""

        def inside(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                result, grad_fn = forward(*args, **kwargs)
            finally:
                self._depth -= 1
            return result, self._nested_backward(grad_fn)

        inside.__name__ = getattr(forward, "__name__", "forward")
        return inside

    def _nested_backward(self, grad_fn: Any) -> Any:
        if not callable(grad_fn):
            return grad_fn
        from tensorflow.python.util import tf_decorator

        def backward(*upstreams: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                return grad_fn(*upstreams, **kwargs)
            finally:
                self._depth -= 1

        # TensorFlow reads the backward's signature (``variables``): keep the one it wraps.
        return tf_decorator.make_decorator(grad_fn, backward, decorator_name="gradcheck_reach")

    def __enter__(self) -> Reach:
        module = _custom_gradient_module()
        eager, graph = module._eager_mode_decorator, module._graph_mode_decorator
        self._saved = (eager, graph)
        module._eager_mode_decorator = lambda f, a, k: self._intercept(eager, f, a, k, True)
        module._graph_mode_decorator = lambda f, a, k: self._intercept(graph, f, a, k, False)
        return self

    def __exit__(self, *_exc: object) -> None:
        module = _custom_gradient_module()
        assert self._saved is not None
        module._eager_mode_decorator, module._graph_mode_decorator = self._saved


def forward_name(wrapped: Any) -> str:
    """The user's name for the forward function a custom gradient wraps (TFP: its ``vjp_fwd``)."""
    user = closure_function(wrapped, ("vjp_fwd",))
    target = user if user is not None else wrapped
    return getattr(getattr(target, "__func__", target), "__name__", "custom_gradient_function")


def closure_function(func: Any, names: tuple[str, ...]) -> Any:
    """The first function held in ``func``'s closure under one of ``names`` (TFP's helper keeps
    the user's ``vjp_fwd`` and ``vjp_bwd`` there), or None."""
    func = getattr(func, "__func__", func)
    code, cells = getattr(func, "__code__", None), getattr(func, "__closure__", None)
    if code is None or not cells:
        return None
    for name, cell in zip(code.co_freevars, cells):
        if name in names:
            with contextlib.suppress(ValueError):  # an empty cell
                value = cell.cell_contents
                if callable(value) and hasattr(value, "__code__"):
                    return value
    return None


@contextlib.contextmanager
def functions_run_eagerly() -> Iterator[None]:
    """Run every ``tf.function`` the call reaches as plain Python while active.

    A library's module-level ``tf.function`` (TFP's ``lbeta``) replays the
    trace it made earlier, custom gradient and all: the reach would see no
    call, and a "native" run would silently be the custom one. Inside
    gradcheck's own ``tf.function`` leg the Python is then traced into that
    graph, so the graph-mode leg stays graph mode.
    """
    tf = tensorflow()
    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(before)
