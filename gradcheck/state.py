"""The process-wide state a user's module can change, captured and put back.

gradcheck imports and runs other people's code, and that code may change
what every later check sees: ``sys.path``, ``sys.modules``, the current
directory, the environment, the random states of ``random``, numpy and
TensorFlow, TensorFlow's global switches (eager mode,
``run_functions_eagerly``, TF32, soft device placement, op determinism, XLA,
check-numerics, Keras's ``floatx`` and dtype policy), the gradients it
registers with ``tf.RegisterGradient``, numpy's error
state (``np.seterr``), ``tf.custom_gradient`` and the other library functions
gradcheck relies on, warnings filters, the standard streams, the Ctrl-C
handler, and the values of its own variables. A :class:`Snapshot` records
all of that; :meth:`Snapshot.restore` puts it back.

Two uses, both in the session and the checker:

* around each module import and each check, so that nothing a module does
  reaches another module, another function, or the caller
  (:func:`preserved`);
* the state a module's import left (``tf.random.set_seed`` at the top of the
  file, ``keras.config.set_floatx``, a ``chdir``) is *applied* again around
  each of that module's own checks (:meth:`Snapshot.apply`), as it would be
  if the module ran alone, and taken away afterwards.

Libraries that a module or a check imported (TensorFlow's lazily loaded
parts, scipy) stay in ``sys.modules``: unloading a C extension is unsafe and
importing it twice costly. The user's own modules, and modules made by hand,
are taken out.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, cast

import numpy as np

from gradcheck import _tf
from gradcheck.paths import installed_dirs
from gradcheck.walk import is_below

#: Switches gradcheck sets for the duration of every check, whatever the user's module set:
#: its "function" execution must really run a graph, its "eager" one eagerly, and TF32
#: matmuls (on by default on Ampere and later GPUs) would make float32 gradients inexact.
PINNED_FLAGS = {"eager": True, "run_functions_eagerly": False, "tensor_float_32": False}

#: numpy's default error state, the one gradcheck's own arithmetic runs under during a check.
NUMPY_ERRORS: dict[str, Any] = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}

_GRADCHECK_DIR = str(Path(__file__).resolve().parent)


@dataclass
class Snapshot:
    """Everything :mod:`gradcheck.state` puts back, as it was when :func:`capture` ran."""

    path: list[str]
    path_object: list[str]
    """``sys.path`` itself, in case the user's code put another list in its place."""
    modules: dict[str, Any]
    cwd: str | None
    environ: dict[str, str]
    python_random: Any
    numpy_random: Any
    numpy_errors: dict[str, Any]
    """``np.seterr``'s state: put back after a module, never applied to its checks (gradcheck's own
    arithmetic runs between the user's calls, under an error state of its own)."""
    warning_filters: list[Any]
    streams: tuple[Any, Any, Any]
    sigint: Any
    tf_flags: dict[str, Any] | None
    tf_random: Any
    tf_attributes: dict[tuple[str, str], Any] = field(default_factory=dict)
    """``tf.custom_gradient`` and the other library attributes gradcheck relies on
    (:data:`gradcheck._tf.LIBRARY_ATTRIBUTES`): put back, never applied."""
    roots: tuple[str, ...] = ()
    """Folders whose modules are the user's: taken out of ``sys.modules`` when added."""
    site_dirs: tuple[str, ...] = field(default=())
    gradients: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """The gradients registered by name (``tf.RegisterGradient``) by the user's code, with their files:
    put back, and applied (a module's own registrations are there for its checks). A name the user's code
    registers during a check is gone after it, so that a name made again (the ``py_func`` recipe's random
    ones, a layer's per-instance counter) does not raise "Registering two gradient with name"; libraries'
    registrations stay as they are."""

    def restore(self) -> None:
        """Put everything back as it was at :func:`capture`."""
        sys.path = self.path_object
        sys.path[:] = self.path
        self._restore_modules()
        self._restore_cwd()
        self._restore_environ()
        random.setstate(self.python_random)
        np.random.set_state(self.numpy_random)
        np.seterr(**self.numpy_errors)
        if warnings.filters != self.warning_filters:
            cast(list[Any], warnings.filters)[:] = self.warning_filters  # typeshed says Sequence; it is a list
            # What warnings.simplefilter calls, so the registries' caches are invalidated.
            mutated = getattr(warnings, "_filters_mutated", None) or getattr(
                warnings, "_filters_mutated_lock_held", None
            )
            if mutated is not None:
                mutated()
        sys.stdout, sys.stderr, sys.stdin = self.streams
        _set_sigint(self.sigint)
        if self.tf_flags is not None and "tensorflow" in sys.modules:
            _tf.set_global_flags(self.tf_flags)
            _tf.set_random_state(self.tf_random)
        _tf.set_library_attributes(self.tf_attributes)
        _tf.set_registered_gradients(self.gradients, self._users_gradients())

    def _users_gradients(self) -> set[str]:
        """The names the user's code registered in TensorFlow's gradient registry since :func:`capture`."""
        now = _tf.registered_gradients()
        return {name for name in now.keys() - self.gradients.keys() if self._is_users_file(now[name][0])}

    def apply(self) -> None:
        """Set what a module's import may set for its own functions: directory, environment, random states, TF switches.

        ``sys.path``, ``sys.modules``, the streams and signal handlers are
        not applied: those stay as gradcheck keeps them.
        """
        self._restore_cwd()
        self._restore_environ()
        random.setstate(self.python_random)
        np.random.set_state(self.numpy_random)
        if self.tf_flags is not None and "tensorflow" in sys.modules:
            _tf.set_global_flags(self.tf_flags)
            _tf.set_random_state(self.tf_random)
        _tf.set_registered_gradients(self.gradients, set())

    def _restore_cwd(self) -> None:
        if self.cwd is not None and _getcwd() != self.cwd:
            with contextlib.suppress(OSError):  # the folder is gone: nothing to go back to
                os.chdir(self.cwd)

    def _restore_environ(self) -> None:
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)

    def _restore_modules(self) -> None:
        for name in list(sys.modules):
            if name in self.modules:
                continue
            if self._is_users(sys.modules.get(name)):
                sys.modules.pop(name, None)
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module

    def _is_users(self, module: Any) -> bool:
        """A module from the user's folders (not a library installed there), or one made by hand."""
        file = getattr(module, "__file__", None)
        spec = getattr(module, "__spec__", None)
        if file is None and spec is None:
            # types.ModuleType("...") put into sys.modules by the user's code.
            return isinstance(module, ModuleType) or module is None
        return file is not None and self._is_users_file(file)

    def _is_users_file(self, file: str) -> bool:
        """A file in the user's folders (not a library installed there, not gradcheck's)."""
        try:
            resolved = str(Path(file).resolve())
        except (OSError, ValueError):
            return False
        if any(is_below(resolved, folder) for folder in (*self.site_dirs, _GRADCHECK_DIR)):
            return False
        return any(is_below(resolved, root) for root in self.roots)


def _getcwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the current directory was deleted
        return None


def _set_sigint(handler: Any) -> None:
    if signal.getsignal(signal.SIGINT) is handler or handler is None:
        return
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)


def capture(roots: Iterable[Path | str] = ()) -> Snapshot:
    """Record the state now. ``roots``: the folders of the user's modules (their import roots)."""
    cwd = _getcwd()
    folders = [str(Path(root).resolve()) for root in roots]
    tf_loaded = "tensorflow" in sys.modules and hasattr(sys.modules["tensorflow"], "custom_gradient")
    return Snapshot(
        path=list(sys.path),
        path_object=sys.path,
        modules=dict(sys.modules),
        cwd=cwd,
        environ=dict(os.environ),
        python_random=random.getstate(),
        numpy_random=np.random.get_state(),
        numpy_errors=dict(np.geterr()),
        warning_filters=list(warnings.filters),
        streams=(sys.stdout, sys.stderr, sys.stdin),
        sigint=signal.getsignal(signal.SIGINT),
        tf_flags=_tf.global_flags() if tf_loaded else None,
        tf_random=_tf.random_state() if tf_loaded else None,
        tf_attributes=_tf.library_attributes(),
        roots=tuple(folders),
        site_dirs=installed_dirs(),
        gradients=_tf.registered_gradients(),
    )


class Descriptors:
    """File descriptors 0, 1 and 2 as they are now, put back where the user's code closed or replaced them.

    Putting back ``sys.stdout`` is not enough: after ``os.close(1)`` the
    stream object is the same and every ``print`` fails with ``EBADF``.
    The copies are kept on descriptors of their own until :meth:`close`.
    """

    def __init__(self) -> None:
        self.copies = {fd: os.dup(fd) for fd in (0, 1, 2)}
        self.identities = {fd: self._identity(fd) for fd in self.copies}

    @staticmethod
    def _identity(fd: int) -> tuple[int, int] | None:
        try:
            status = os.fstat(fd)
        except OSError:
            return None
        return status.st_dev, status.st_ino

    def restore(self) -> None:
        """``dup2`` each copy back where the descriptor is closed or is another file now."""
        for fd, copy in self.copies.items():
            if self._identity(fd) != self.identities[fd]:
                with contextlib.suppress(OSError):  # the copy was closed too: nothing to put back
                    os.dup2(copy, fd)

    def close(self) -> None:
        for copy in self.copies.values():
            with contextlib.suppress(OSError):
                os.close(copy)


@contextlib.contextmanager
def preserved(roots: Iterable[Path | str] = ()) -> Iterator[Snapshot]:
    """Capture the state, run the block, put the state back whatever the block did or raised."""
    snapshot = capture(roots)
    try:
        yield snapshot
    finally:
        snapshot.restore()


def pin_flags() -> None:
    """Set :data:`PINNED_FLAGS`; a :func:`preserved` around the caller puts the user's values back."""
    _tf.set_global_flags(dict(PINNED_FLAGS))


@dataclass(frozen=True)
class _SavedVariable:
    variable: Any
    value: Any


def reachable_variables(module: ModuleType | None, extra: Iterable[Any] = ()) -> list[Any]:
    """The ``tf.Variable`` objects a module holds: globals, layers' and ``tf.Module``\\ s' variables, closures.

    Keras 3 variables are reached through the ``tf.Variable`` they wrap.
    """
    tf = _tf.tensorflow()
    found: dict[int, Any] = {}

    def add(value: Any) -> None:
        variable = _tf.underlying_variable(value)
        if isinstance(variable, tf.Variable):
            found.setdefault(id(variable), variable)

    def visit(value: Any) -> None:
        if isinstance(value, tf.Variable) or _tf.is_keras_variable(value):
            add(value)
            return
        if isinstance(value, type):
            return
        if isinstance(value, tf.Module) or _tf.is_keras_layer_class(type(value)):
            with contextlib.suppress(Exception):  # a half-built layer may refuse
                for variable in value.variables:
                    add(variable)
            return
        # Only real functions: asking any other object for __closure__ may run its __getattr__
        # (a lazy module would import itself).
        closure = value.__closure__ if isinstance(value, FunctionType) else None
        for cell in closure or ():
            with contextlib.suppress(ValueError):  # an empty cell
                inner = cell.cell_contents
                if isinstance(inner, tf.Variable) or _tf.is_keras_variable(inner):
                    add(inner)

    namespace = vars(module) if module is not None else {}
    for value in [*namespace.values(), *extra]:
        visit(value)
    return list(found.values())


@contextlib.contextmanager
def variables_preserved(variables: Iterable[Any]) -> Iterator[None]:
    """Put each variable's value back after the block (a forward pass may assign to them)."""
    saved = []
    for variable in variables:
        with contextlib.suppress(Exception):  # a variable that cannot be read has nothing to restore
            saved.append(_SavedVariable(variable, variable.read_value().numpy()))
    try:
        yield
    finally:
        for item in saved:
            with contextlib.suppress(Exception):
                current = item.variable.read_value().numpy()
                if current.shape != item.value.shape or not np.array_equal(current, item.value, equal_nan=True):
                    item.variable.assign(item.value)
