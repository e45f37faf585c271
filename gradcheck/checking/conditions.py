"""The conditions of one check: the module's import-time state applied, gradcheck's switches pinned,
the device chosen, and everything the check could change put back afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gradcheck import _tf, state
from gradcheck.checking.request import CheckRequest
from gradcheck.importing import import_root


@contextlib.contextmanager
def check_conditions(request: CheckRequest) -> Iterator[None]:
    """The conditions of one check, and the caller's state put back afterwards.

    The module's own import-time state is applied (its seeds, ``floatx``,
    directory), then the switches gradcheck needs are pinned (eager, no
    ``run_functions_eagerly``, no TF32), and the check is placed on the
    device asked for. Everything, the values of the module's variables
    included, is as before once the check is over, whatever it did.
    """
    tf = _tf.tensorflow()
    subject = request.subject
    source = Path(subject.path) if subject.path and not subject.path.startswith("<") else None
    roots = [import_root(source)] if source is not None and source.is_file() else []
    with state.preserved(roots):
        if request.module_state is not None:
            request.module_state.apply()
        state.pin_flags()
        variables = state.reachable_variables(subject.module, extra=(subject.obj, subject.forward))
        with (
            state.variables_preserved(variables),
            # gradcheck's arithmetic (squares of tiny differences, ratios of zeros) is written for
            # numpy's default error state; a caller's or module's np.seterr(all="raise") is not its own.
            np.errstate(**state.NUMPY_ERRORS),
            _tf.quiet_logs(),
            tf.device(_tf.device_name(request.settings.device)),
        ):
            yield
