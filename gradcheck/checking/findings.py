"""The records one check's steps pass along: what it has found so far, and the call it prepared."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradcheck.checking.build import Built
from gradcheck.checking.draws import Draws
from gradcheck.harness import Harness
from gradcheck.inputs import CallPlan
from gradcheck.results import Problem


@dataclass
class Findings:
    """What one check has found so far: the one mutable record, filled in by the checklist's steps."""

    dtype: str
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skip_reason: str | None = None
    backward_line: int | None = None
    inner: tuple[dict[str, object], ...] = ()
    plan: CallPlan | None = None
    harness: Harness | None = None
    reference_harness: Harness | None = None
    domain: list[str] = field(default_factory=list)
    """Why the failure may be the draws' fault (see :attr:`~gradcheck.checking.verdict.Verdict.domain`)."""
    redrawn_because: tuple[str, ...] = ()
    """The domain problems of the earlier tries: each narrows the guessed draws one step."""
    numeric_only: bool = False
    """The subject reaches no custom gradient: TensorFlow's own gradient is checked against finite differences."""

    def note(self, *notes: str) -> None:
        """Add each note not given yet (several gradients can give the same note)."""
        self.notes.extend(n for n in notes if n not in self.notes)


@dataclass(frozen=True)
class Prepared:
    """A planned call, with the harness that runs it and its draws."""

    built: Built
    plan: CallPlan
    harness: Harness
    draws: Draws
    outputs: list[np.ndarray] | None
    """The forward outputs at draw 0, from the first forward pass; None where a layer's weights were redrawn since."""
