"""The process-wide state a user's module can change, read and set through TensorFlow's own functions.

:mod:`gradcheck.state` captures it before a user's code runs and puts it back after.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from gradcheck._tf.loading import tensorflow
from gradcheck._tf.objects import MISSING


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
            value = vars(module).get(name, MISSING)
            if value is not MISSING:
                found[(module_name, name)] = value
    return found


def set_library_attributes(saved: dict[tuple[str, str], Any]) -> None:
    """Put back each attribute :func:`library_attributes` found, where it now differs."""
    for (module_name, name), value in saved.items():
        module = sys.modules.get(module_name)
        if module is not None and vars(module).get(name, MISSING) is not value:
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


def registered_gradients() -> dict[str, tuple[str, Any]]:
    """TensorFlow's registry of gradients by name (``tf.RegisterGradient``): each gradient function's file, and
    the entry.

    Empty while TensorFlow is not loaded. The file tells the user's gradients
    from the libraries' (the frame the registry keeps is its own ``register``).
    """
    if "tensorflow" not in sys.modules:
        return {}
    from tensorflow.python.framework import ops

    return {name: (_defined_in(entry.get("type")), entry) for name, entry in _registry(ops).items()}


def _defined_in(function: Any) -> str:
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    return str(code.co_filename) if code is not None else ""


def set_registered_gradients(saved: dict[str, tuple[str, Any]], users: set[str]) -> None:
    """Put back the registrations ``saved`` holds; of the others, drop the names in ``users`` (the user's)."""
    if "tensorflow" not in sys.modules:
        return
    from tensorflow.python.framework import ops

    registry = _registry(ops)
    for name in users - saved.keys():
        registry.pop(name, None)
    for name, (_, entry) in saved.items():
        registry[name] = entry


def _registry(ops: Any) -> dict[str, Any]:
    # Registry keeps its entries in _registry ({"type": function, "location": frame}); there is no public way
    # to remove one, and a name registered twice raises.
    registry: dict[str, Any] = ops.gradient_registry._registry
    return registry
