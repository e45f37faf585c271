"""What a check adds for a subject whose custom gradients are found while it runs.

A public function (or layer) that makes its custom gradients as it runs is
checked through itself (:mod:`gradcheck.targets.reaching`). Once the custom
run has recorded which custom gradients it reached, this module says what
that means for the check: none reached and the subject was only a candidate
-> skipped (it is no target); none reached and the user named it -> its
TensorFlow gradient is checked against finite differences alone; some
reached -> a note naming each inner function and its backward function's
line, and the reference used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from gradcheck.instrument import BackwardRecord, Outcome
from gradcheck.subjects import Subject


@dataclass(frozen=True)
class Reached:
    """The custom gradients one run reached, and what the check does about it."""

    records: tuple[BackwardRecord, ...]
    """One record per outermost custom-gradient call (the first execution mode that ran)."""
    skip_reason: str | None = None
    """Set when the subject is no target after all."""
    numeric_only: bool = False
    """Named by the user but reaching none: finite differences are the only reference."""
    note: str | None = None


def _shown(record: BackwardRecord) -> str:
    where = f" (backward at {os.path.basename(record.file)}:{record.line})" if record.line and record.file else ""
    return f"{record.function}{where}"


def reached(subject: Subject, outcomes: Mapping[str, Outcome], table: str, reference: str) -> Reached:
    """Judge what the custom run of a reaching subject recorded (``reference``: the setting)."""
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
        note = f"{subject.name} reaches no tf.custom_gradient: its TensorFlow gradient was audited, not compared"
        return Reached((), note=note)
    if subject.explicit:
        note = (
            f"{subject.name} reaches no tf.custom_gradient: TensorFlow's gradient (autodiff, or a gradient "
            "registered for an op) was checked against finite differences only"
        )
        return Reached((), numeric_only=True, note=note)
    reason = (
        f"{subject.name} reached no tf.custom_gradient when called, so it is not checked; to check its "
        f"TensorFlow gradient against finite differences, name it: {table} or ::{subject.name}"
    )
    return Reached((), skip_reason=reason)


def inner_functions(records: tuple[BackwardRecord, ...]) -> tuple[dict[str, object], ...]:
    """The inner custom-gradient functions reached, for the JSON report."""
    seen: dict[tuple[str, int | None], dict[str, object]] = {}
    for record in records:
        key = (record.function, record.line)
        seen.setdefault(key, {"function": record.function, "backward_line": record.line, "backward_file": record.file})
    return tuple(seen.values())
