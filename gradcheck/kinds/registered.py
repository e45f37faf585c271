"""A function, method or layer that applies a gradient registered with ``tf.RegisterGradient``.

TF1-era gradient reversal layers, straight-through quantizers and
``py_func`` ops register a gradient function under a name and apply it
with ``graph.gradient_override_map({"Identity": "Flip"})``. TensorFlow 2
applies such an override only where a graph's gradient is built (see
:mod:`gradcheck._tf.overrides`), so the subject runs as written
(:class:`gradcheck.targets.RegisteredTarget`) and, once its custom run has
recorded which maps it entered, :meth:`Registered.reached` judges what
each execution mode got:

- applied in every mode (the map sits in a ``tf.function`` of the user's):
  its gradient is checked against finite differences;
- applied only inside ``tf.function``: an ``execution`` problem saying why,
  and the ``tf.function`` gradient is the one checked;
- applied in no mode: a ``count`` problem, as for a backward function that
  TensorFlow never calls (the gradient is the op's own, the registered one
  never runs);
- no map entered: as a nested subject that reaches no custom gradient
  (skipped unless named).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradcheck import _tf
from gradcheck.kinds.nested import Nested
from gradcheck.kinds.protocol import Bound, Outcomes, Reached, SubjectParts
from gradcheck.results import Problem
from gradcheck.targets import CallTarget, RegisteredTarget

#: How each way a map can miss its op is said in a message.
_MISSED = {
    _tf.Applied.EAGER: "eagerly, TensorFlow's tape records each op with the gradient registered for its own type "
    "(gradient_override_map changes only ops built in a graph)",
    _tf.Applied.ELSEWHERE: "inside tf.function, the map is entered on a graph other than the one the op is built "
    "in (a graph read once, at import or when the function was made, is never a tf.function's graph)",
    _tf.Applied.UNBUILT: "inside tf.function, the block under the map builds no op of the type it names",
}
_TF_FUNCTION_ONLY = (
    "where the tf.function's gradient is taken from its graph (by a GradientTape outside the tf.function, or "
    "tf.gradients); eagerly, and under a GradientTape inside the same tf.function (a custom training loop's "
    "train step, Keras 3's fit), TensorFlow uses the op's own gradient"
)
_KEEP = "to keep it in TensorFlow 2, write it with tf.custom_gradient (or keras.ops.custom_gradient)"


@dataclass(frozen=True)
class _Override:
    """One registered gradient the subject applies, and how each map naming it met its op."""

    gradient: _tf.RegisteredGradient
    op_types: tuple[str, ...]
    entries: tuple[_tf.OverrideEntry, ...]

    @property
    def applied(self) -> set[str]:
        """How the maps applied it: :data:`~gradcheck._tf.Applied.OWN`, ``CALLER``, or neither."""
        return {e.applied for e in self.entries} & {_tf.Applied.OWN, _tf.Applied.CALLER}

    @property
    def shown(self) -> str:
        """``NAME (file.py:12)`` for a user's gradient; TensorFlow's own named with the op it is mapped onto."""
        where = _tf.shown_location(self.entries[0].file, self.entries[0].line)
        if self.gradient.tensorflows or self.gradient.file is None:
            return f"{self.gradient.name} (mapped onto {', '.join(self.op_types)} at {where})"
        return f"{self.gradient.name} ({_tf.shown_location(self.gradient.file, self.gradient.line)})"


class Registered(Nested):
    """Another kind (a function, a method, a layer) whose gradient TensorFlow takes from registered gradients.

    Listed, configured and built as its base; called as written, its
    gradient checked against finite differences where the registered
    gradient applies.
    """

    marker = "gradient_override_map"

    def __repr__(self) -> str:
        return f"Registered({self.base!r})"

    @property
    def name(self) -> str:
        """``registered`` and its base's name."""
        return f"registered {self.base.name}"

    def target(self, subject: SubjectParts, bound: Bound) -> CallTarget:
        """The function or layer called as written, the maps it enters recorded."""
        return RegisteredTarget(bound.call)

    def records_backward(self, reached: bool) -> bool:
        """False: the registered gradient is TensorFlow's to call; nothing of the user's is instrumented."""
        return False

    def reached(
        self, subject: SubjectParts, outcomes: Outcomes, table: str, reference: str, target: CallTarget | None = None
    ) -> Reached | None:
        """Judge where each registered gradient applied, in the execution modes that ran."""
        entries = target.entries if isinstance(target, RegisteredTarget) else []
        if not entries or not any(o.ok for o in outcomes.values()):
            return super().reached(subject, outcomes, table, reference, target)
        overrides = _overrides(entries)
        # A mode that raised says nothing of where a gradient applies (the audit reports it), unless a map applied.
        modes = tuple(m for m, o in outcomes.items() if o.ok or any(_applies(v, m) for v in overrides))
        problems = [p for o in overrides if (p := _problem(o, modes)) is not None]
        judged = tuple(m for m in modes if outcomes[m].ok and any(_applies(o, m) for o in overrides))
        names = ", ".join(o.shown for o in overrides)
        if judged:
            where = " and ".join(_MODE_WORDS[m] for m in judged)
            note = f"registered gradient applied: {names}; checked against finite differences ({where})"
        else:
            note = f"values not compared: the registered gradient {names} runs in no mode that ran"
        return Reached((), numeric_only=True, note=note, problems=tuple(problems), judged=judged)


_MODE_WORDS = {"eager": "eagerly", "function": "inside tf.function"}


def _overrides(entries: list[_tf.OverrideEntry]) -> list[_Override]:
    """The registered gradients the maps name, once each (a name made per call counts once, by its ``def``)."""
    found: dict[object, tuple[_tf.RegisteredGradient, dict[str, None], list[_tf.OverrideEntry]]] = {}
    for entry in entries:
        for op_type, name in entry.mapping:
            gradient = _tf.registered_gradient(name)
            key = (gradient.file, gradient.line) if gradient.file and not gradient.tensorflows else (name, op_type)
            _, ops, seen = found.setdefault(key, (gradient, {}, []))
            ops[op_type] = None
            seen.append(entry)
    return [_Override(gradient, tuple(ops), tuple(seen)) for gradient, ops, seen in found.values()]


def _applies(override: _Override, mode: str) -> bool:
    """Whether ``override`` is the gradient TensorFlow uses in execution mode ``mode``."""
    return _tf.Applied.OWN in override.applied or (mode == "function" and _tf.Applied.CALLER in override.applied)


def _problem(override: _Override, modes: tuple[str, ...]) -> Problem | None:
    """A registered gradient that some execution mode run does not apply, as a problem saying why."""
    missing = [m for m in modes if not _applies(override, m)]
    if not missing:
        return None
    gradient = f"the gradient registered as {override.shown}"
    if len(missing) < len(modes):  # applied inside tf.function only
        return Problem(
            "execution",
            None,
            f"{gradient} applies only inside tf.function, {_TF_FUNCTION_ONLY}",
            execution="eager",
            hint=f"{_KEEP}: it then applies in every mode",
        )
    ways = dict.fromkeys(e.applied for e in override.entries if e.applied in _MISSED)
    why = "; ".join(_MISSED[w] for w in ways) or "no map naming it was entered"
    every = " or ".join({"eager": "in eager mode", "function": "inside tf.function"}[m] for m in modes)
    return Problem(
        "count",
        None,
        f"{gradient} never runs under GradientTape {every}, so the gradient is TensorFlow's own for the op: {why}",
        expected=f"the gradient registered as {override.gradient.name}",
        got="never called",
        hint=_KEEP,
    )
