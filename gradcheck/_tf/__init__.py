"""The one package that imports TensorFlow and reads its internals.

Everything else asks it for ``tf`` so that ``import gradcheck`` and
``gradcheck --help`` never pay TensorFlow's import time, and so that the
private attributes we rely on (``_tf_decorator``, ``tf_decorator.unwrap``,
the custom-gradient module's globals) are read in one place that a
TensorFlow upgrade can break only once. Its rooms: :mod:`.loading` (the
import), :mod:`.process_state` (what a user's module can change),
:mod:`.objects` (reading custom gradients, structures, variables, devices),
:mod:`.choke_point` (the custom-gradient choke point), :mod:`.overrides` (where a
``gradient_override_map`` applies). Callers use the names
below, as ``_tf.NAME``.
"""

from gradcheck._tf.choke_point import ChokePoint, Instrumenter, functions_run_eagerly, is_custom_gradient_decorator
from gradcheck._tf.loading import quiet_logs, set_verbose, tensorflow, tensorflow_available
from gradcheck._tf.objects import (
    CustomGradientParts,
    adopt,
    attribute,
    closure_function,
    custom_gradient_parts,
    device_name,
    differentiable_outputs,
    flatten_with_paths,
    forward_name,
    gpu_available,
    has_attribute,
    is_keras_layer_class,
    is_keras_variable,
    is_tf_own,
    underlying_variable,
    wrapper_parts,
)
from gradcheck._tf.overrides import (
    Applied,
    OverrideEntry,
    Overrides,
    RegisteredGradient,
    registered_gradient,
    shown_location,
)
from gradcheck._tf.process_state import (
    LIBRARY_ATTRIBUTES,
    RandomState,
    global_flags,
    library_attributes,
    random_state,
    registered_gradients,
    set_global_flags,
    set_library_attributes,
    set_random_state,
    set_registered_gradients,
)
from gradcheck.errors import TensorFlowMissing

__all__ = [
    "LIBRARY_ATTRIBUTES",
    "Applied",
    "ChokePoint",
    "CustomGradientParts",
    "Instrumenter",
    "OverrideEntry",
    "Overrides",
    "RandomState",
    "RegisteredGradient",
    "TensorFlowMissing",
    "adopt",
    "attribute",
    "closure_function",
    "custom_gradient_parts",
    "device_name",
    "differentiable_outputs",
    "flatten_with_paths",
    "forward_name",
    "functions_run_eagerly",
    "global_flags",
    "gpu_available",
    "has_attribute",
    "is_custom_gradient_decorator",
    "is_keras_layer_class",
    "is_keras_variable",
    "is_tf_own",
    "library_attributes",
    "quiet_logs",
    "random_state",
    "registered_gradient",
    "registered_gradients",
    "set_global_flags",
    "set_library_attributes",
    "set_random_state",
    "set_registered_gradients",
    "set_verbose",
    "shown_location",
    "tensorflow",
    "tensorflow_available",
    "underlying_variable",
    "wrapper_parts",
]
