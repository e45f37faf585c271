"""A Keras layer whose ``call`` reaches custom-gradient functions by name."""

from __future__ import annotations

from typing import Any

from gradcheck.instrument import BackwardRecord
from gradcheck.targets.patch import Patch, instrumented, patched, undecorated


class LayerTarget:
    """A Keras layer whose ``call`` reaches custom-gradient functions.

    For the duration of one call, each custom-gradient function the layer
    reaches is replaced in its namespace: by an instrumented copy for the
    custom run, by its undecorated form for the native one. The user's
    objects are put back before the call returns.
    """

    def __init__(self, layer: Any, patches: list[Patch]) -> None:
        self.layer = layer
        self.patches = patches

    def custom(self, args: list[Any], kwargs: dict[str, Any], records: list[BackwardRecord], eager: bool) -> Any:
        """Call the layer with every custom-gradient function it reaches instrumented."""
        with patched(self.patches, [instrumented(p, records, eager) for p in self.patches]):
            return self.layer(*args, **kwargs)

    def native(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call the layer with every custom-gradient function it reaches undecorated."""
        with patched(self.patches, [undecorated(p) for p in self.patches]):
            return self.layer(*args, **kwargs)
