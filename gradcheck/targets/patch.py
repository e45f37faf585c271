"""Custom-gradient functions swapped in their namespace for one call, then put back.

Targets whose custom gradients are reached by name from other code (a
layer's ``call``) cannot be handed an instrumented copy; instead the name is
rebound for the duration of one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gradcheck.instrument import BackwardRecord, call_instrumented, forward_result


@dataclass(frozen=True)
class Patch:
    """A name in some namespace that holds a custom-gradient function a layer calls."""

    namespace: dict[str, Any]
    """The module (or object) ``__dict__`` the layer's code looks the name up in."""
    name: str
    """The name."""
    original: Any
    """The user's custom-gradient object."""
    forward: Callable[..., Any]
    """Its undecorated function."""


@contextlib.contextmanager
def patched(patches: list[Patch], replacements: list[Callable[..., Any]]) -> Iterator[None]:
    """Each patch's name bound to its replacement inside the block; the user's objects back after it."""
    try:
        for patch, replacement in zip(patches, replacements):
            patch.namespace[patch.name] = replacement
        yield
    finally:
        for patch in patches:
            patch.namespace[patch.name] = patch.original


def instrumented(patch: Patch, records: list[BackwardRecord], eager: bool) -> Callable[..., Any]:
    """A stand-in for the patched function that calls it instrumented, recording each call into ``records``."""

    def call(*a: Any, **k: Any) -> Any:
        return call_instrumented(patch.forward, patch.name, records, eager, a, k)

    return call


def undecorated(patch: Patch) -> Callable[..., Any]:
    """A stand-in for the patched function that runs its forward with the custom gradient switched off."""

    def call(*a: Any, **k: Any) -> Any:
        return forward_result(patch.forward(*a, **k))

    return call
