"""What a call of the target is fed from a draw: its arrays as tensors, and the variables it reads.

:class:`Tensors` converts a draw's arrays to tensors, each once while it is
the same read-only array. :class:`Variables` owns the variables a forward
pass reads: their names, their assignment from each draw's values, and
putting back the values they had before the check. Identity stands for
values only where nothing can write to an array (:func:`all_frozen`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from gradcheck import _tf
from gradcheck.inputs import CallPlan
from gradcheck.instrument import to_float64


def same_objects(found: list[Any], known: list[Any]) -> bool:
    """Whether two value lists hold the very same objects, in order (frozen arrays: the same values)."""
    return len(found) == len(known) and all(a is b for a, b in zip(found, known))


def identity_key(plan: CallPlan, variables: Variables, values: dict[str, Any]) -> list[Any]:
    """What a forward pass at ``values`` runs on, by identity: each leaf's value, then each variable's."""
    return [values.get(leaf.name) for leaf in plan.leaves] + [values.get(name) for name, _ in variables]


def all_frozen(key: list[Any]) -> bool:
    """Whether every array among ``key`` is read-only, so that its identity stands for its values."""
    return all(not isinstance(v, np.ndarray) or not v.flags.writeable for v in key)


class Tensors:
    """A draw's arrays as tensors, each converted once while it is the same read-only array.

    A check converts the same draw for the forward pass, both custom
    executions, native autodiff and the center of the finite differences:
    for big inputs each conversion costs as much as an elementwise op.
    """

    def __init__(self) -> None:
        # Per name: the array last converted and its tensor.
        self._converted: dict[str, tuple[np.ndarray, Any]] = {}

    def leaves(self, plan: CallPlan, values: dict[str, Any]) -> dict[str, Any]:
        """The plan's leaves at ``values``: tensors for the tensor leaves, constants as they are."""
        tensors: dict[str, Any] = {}
        for leaf in plan.leaves:
            value = values[leaf.name]
            if leaf.spec is not None:
                value = self.tensor(leaf.name, value, leaf.spec.dtype)
            tensors[leaf.name] = value
        return tensors

    def upstreams(self, upstreams: list[np.ndarray], dtypes: list[str]) -> list[Any]:
        """The upstream arrays as tensors of their outputs' dtypes."""
        return [self.tensor(f"upstream {i}", u, dtype) for i, (u, dtype) in enumerate(zip(upstreams, dtypes))]

    def tensor(self, name: str, value: Any, dtype: str) -> Any:
        """``value`` as a ``dtype`` tensor, converted once while it is the same read-only array."""
        known = self._converted.get(name)
        if known is not None and known[0] is value:
            return known[1]
        # Only an array nothing can write to stays the same array (the draws are frozen when made), so the
        # tensor may share its memory (where it is aligned for that) and stand for it from then on.
        frozen = isinstance(value, np.ndarray) and not value.flags.writeable
        if not frozen:
            return _tf.tensorflow().constant(np.asarray(value), dtype=dtype)
        tensor = _tf.adopt(value, dtype)
        self._converted[name] = (value, tensor)
        return tensor


def default_variable_name(variable: Any) -> str:
    """A variable's own name, without TensorFlow's ``:0``; ``variable`` for one that has none."""
    name = getattr(variable, "name", "variable")
    return name[:-2] if name.endswith(":0") else name


class Variables:
    """The variables a forward pass reads, by name: assigned from each draw's values, put back after the check.

    Iterating gives ``(name, variable)`` pairs, in the order the forward pass
    read them.
    """

    def __init__(self, named: list[tuple[str, Any]]) -> None:
        self._named = named
        # The values they had when found: what :meth:`restore` puts back.
        self._originals = {name: np.asarray(v.numpy()).copy() for name, v in named}
        # Per name: the value last assigned (the array itself, not its id: ids of freed arrays are reused).
        self._assigned: dict[str, Any] = {}

    @classmethod
    def found(cls, watched: Any, name_variable: Callable[[Any], str] | None = None) -> Variables:
        """The variables a tape watched, each named by ``name_variable`` (a name taken gets a ``_``)."""
        namer = name_variable or default_variable_name
        named: list[tuple[str, Any]] = []
        used: set[str] = set()
        for variable in watched:
            name = namer(variable)
            while name in used:
                name += "_"
            used.add(name)
            named.append((name, variable))
        return cls(named)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self._named)

    def __len__(self) -> int:
        return len(self._named)

    def assign(self, values: dict[str, Any]) -> None:
        """Set each variable ``values`` holds a value for, unless it holds that very value already."""
        for name, variable in self._named:
            value = values.get(name)
            if value is not None and self._assigned.get(name) is not value:
                variable.assign(np.asarray(value, dtype=variable.dtype.as_numpy_dtype))
                self._assigned[name] = value

    def restore(self) -> None:
        """Put every variable back to the value it had when the first forward pass found it."""
        for name, variable in self._named:
            variable.assign(self._originals[name].astype(variable.dtype.as_numpy_dtype))
        self._assigned.clear()

    def values(self) -> dict[str, np.ndarray | None]:
        """The current value of every variable, as float64."""
        return {name: to_float64(variable) for name, variable in self._named}
