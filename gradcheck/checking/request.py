"""What one check is asked to do: :class:`CheckRequest`, shared by every stage of :mod:`gradcheck.checking`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gradcheck.config import Settings, SubjectConfig
from gradcheck.subjects import Subject
from gradcheck.targets.proxy import Proxy


@dataclass(frozen=True)
class CheckRequest:
    """Everything needed to check one function or layer."""

    subject: Subject
    """What to check."""
    settings: Settings
    """The merged settings for this subject."""
    config: SubjectConfig | None = None
    """Its ``[functions.NAME]`` or ``[layers.NAME]`` table, if any."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """Named sizes."""
    shape_overrides: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    """``--shape`` from the command line."""
    config_label: str = "gradcheck.toml"
    """How messages name the config file."""
    reproduce: str | None = None
    """The command that reproduces this check."""
    dtype_given: bool = False
    """True when the user chose the dtype (then float32 code is not rerun silently)."""
    module_state: Any = None
    """The :class:`gradcheck.state.Snapshot` the module's import left, applied for the check; None:
    the caller's state as it is (``gradcheck.check``)."""
    proxy: Proxy | None = None
    """Its own table's ``proxy``: the function whose derivative its custom gradient stands for."""
    reached_proxies: Mapping[str, Proxy] = field(default_factory=dict)
    """The proxies other function tables declare, by function name: used where the subject reaches them."""
