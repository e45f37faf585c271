"""A function, method or layer checked through the custom gradients it makes as it runs.

Its custom gradients are nested in it, made by a helper or a factory, or
reached only at run time: they are found, instrumented and switched off at
TensorFlow's custom-gradient choke point while it runs
(:mod:`gradcheck.targets.nested`). Once the custom run has recorded which
it reached, :meth:`Nested.reached` says what that means for the check: none
reached and the subject was only a candidate -> skipped (it is no target);
none reached and the user named it -> its TensorFlow gradient is checked
against finite differences alone; some reached -> a note naming each inner
function and its backward function's line, and the reference used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gradcheck.instrument import BackwardRecord
from gradcheck.kinds.protocol import Bound, Outcomes, Reached, SubjectKind, SubjectParts
from gradcheck.targets import CallTarget, NestedTarget


def _as_base(answer: str) -> Any:
    """A nested kind's answer that is its base's."""
    return property(lambda nested: getattr(nested.base, answer), doc=f"As its base: {answer}.")


class Nested:
    """Another kind (``base``: a function, a method, a layer) whose custom gradients are found as it runs.

    It is built, listed and configured as its base is; each backward
    function it reaches owes gradients for what its own forward function
    received.
    """

    owes_received = True

    def __init__(self, base: SubjectKind) -> None:
        self.base = base

    def __repr__(self) -> str:
        return f"Nested({self.base!r})"

    @property
    def name(self) -> str:
        """``nested`` and its base's name."""
        return f"nested {self.base.name}"

    # Listed, configured and built as its base is.
    reported = _as_base("reported")
    table = _as_base("table")
    shares_class_table = _as_base("shares_class_table")
    keywords_by_convention = _as_base("keywords_by_convention")
    references_in_float64 = _as_base("references_in_float64")
    weights_on_self = _as_base("weights_on_self")
    positional_guesses = _as_base("positional_guesses")
    signature = _as_base("signature")
    described_by = _as_base("described_by")
    identity = _as_base("identity")
    bind = _as_base("bind")

    def target(self, subject: SubjectParts, bound: Bound) -> CallTarget:
        """The function or layer called with the custom gradients it reaches instrumented, or switched off."""
        return NestedTarget(bound.call, subject.name)

    def python_valued(self, bound: Bound) -> Callable[..., Any] | None:
        """A function's own arguments: those its code uses as Python values cannot be drawn (a layer's can)."""
        return bound.planned if bound.layer is None else None

    def records_backward(self, reached: bool) -> bool:
        """Only where the run reached a custom gradient: none reached is TensorFlow's own gradient."""
        return reached

    #: What the subject's run must reach to be a target (for messages).
    marker = "tf.custom_gradient"

    def reached(
        self, subject: SubjectParts, outcomes: Outcomes, table: str, reference: str, target: CallTarget | None = None
    ) -> Reached | None:
        """Judge what the custom run recorded (``table``: its config table; ``reference``: the setting)."""
        records = next((tuple(o.records) for o in outcomes.values() if o.records), ())
        if records:
            names = ", ".join(dict.fromkeys(_shown(r) for r in records))
            note = (
                f"custom gradient reached: {names}; native reference: {subject.name} with it switched off "
                "(TensorFlow differentiates the inner forward function)"
            )
            return Reached(records, note=note)
        if not any(o.ok for o in outcomes.values()):
            return Reached(())  # the run raised: the audit reports it
        if subject.explicit and reference == "none":
            note = f"{subject.name} reaches no {self.marker}: its TensorFlow gradient was audited, not compared"
            return Reached((), note=note)
        if subject.explicit:
            note = (
                f"{subject.name} reaches no {self.marker}: TensorFlow's gradient (autodiff, or a gradient "
                "registered for an op) was checked against finite differences only"
            )
            return Reached((), numeric_only=True, note=note)
        reason = (
            f"{subject.name} reached no {self.marker} when called, so it is not checked; to check its "
            f"TensorFlow gradient against finite differences, name it: {table} or ::{subject.name}"
        )
        return Reached((), skip_reason=reason)


def _shown(record: BackwardRecord) -> str:
    where = f" (backward at {os.path.basename(record.file)}:{record.line})" if record.line and record.file else ""
    return f"{record.function}{where}"
