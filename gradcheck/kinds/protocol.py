"""The one interface every kind of subject offers: what the rest of gradcheck asks about a subject's kind.

A :class:`~gradcheck.subjects.Subject` carries its kind, chosen once when
discovery makes it. Everything that differs from one kind to the next (how
its call target is built, its signature for ``gradcheck list``, what its
backward functions owe, which config table it lives in, what its run
reaching no custom gradient means) is asked of the kind, never decided by
testing which kind it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gradcheck.instrument import BackwardRecord, Outcome
from gradcheck.results import Problem
from gradcheck.targets import CallTarget


class SubjectParts(Protocol):
    """What a kind reads of a subject (:class:`gradcheck.subjects.Subject` has each of these)."""

    @property
    def name(self) -> str:
        """Its name in its module: ``func``, ``Class.method`` or ``Layer``."""
        ...

    @property
    def obj(self) -> Any:
        """The user's object as the module holds it (a layer class, or an instance given to ``check``)."""
        ...

    @property
    def forward(self) -> Callable[..., Any] | None:
        """The undecorated function (None for a layer)."""
        ...

    @property
    def owner(self) -> type | None:
        """The class of a method, or of a layer."""
        ...

    @property
    def patches(self) -> tuple[tuple[dict[str, Any], str], ...]:
        """For a layer: the (namespace, name) of each custom-gradient function its ``call`` reaches."""
        ...

    @property
    def explicit(self) -> bool:
        """Named by ``::NAME`` or a config table."""
        ...


class Construct(Protocol):
    """How a check makes the objects a kind needs, from the config's ``init`` (see :mod:`gradcheck.checking.build`)."""

    def instance(self, cls: type) -> Any:
        """An instance of a method's class."""
        ...

    def layer(self, cls: type) -> Any:
        """A layer of class ``cls``, in the check's dtype where it takes one."""
        ...


#: One custom run's outcome per execution mode (``eager``, ``function``).
Outcomes = Mapping[str, Outcome]


@dataclass(frozen=True)
class Bound:
    """What one check calls, made for it by the subject's kind."""

    call: Callable[..., Any]
    """The function as it is called (bound to its instance or class), or the layer."""
    planned: Callable[..., Any]
    """The callable whose signature the call plan is read from (a layer's ``call``)."""
    owner: Any = None
    """The instance or layer whose attributes name the variables it reads."""
    layer: Any = None
    """The layer, for a layer."""
    fresh_layer: bool = False
    """True when gradcheck constructed the layer (its weights are then redrawn, seeded)."""


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
    problems: tuple[Problem, ...] = ()
    """What the run shows to be wrong before any value is compared (a registered gradient that never runs)."""
    judged: tuple[str, ...] | None = None
    """The execution modes whose gradients are the subject's own, to compare with the references (None: all)."""

    @property
    def inner_functions(self) -> tuple[dict[str, object], ...]:
        """The inner custom-gradient functions reached, once each, for the JSON report."""
        seen: dict[tuple[str, int | None], dict[str, object]] = {}
        for record in self.records:
            key = (record.function, record.line)
            seen.setdefault(
                key, {"function": record.function, "backward_line": record.line, "backward_file": record.file}
            )
        return tuple(seen.values())


class SubjectKind(Protocol):
    """A kind of subject (function, method, wrapper, layer, nested): its answers to what a check asks.

    One implementation per kind, each in a module of this package and
    registered in :data:`gradcheck.kinds.KINDS`; a kind that is another
    with one difference (a nested function is a function whose custom
    gradients are found as it runs) wraps that other one.
    """

    @property
    def name(self) -> str:
        """Its name in the registry: ``function``, ``method``, ``nested layer``..."""
        ...

    @property
    def reported(self) -> str:
        """What reports call it (a result's ``kind``): ``function`` or ``layer``."""
        ...

    @property
    def table(self) -> str:
        """The config table it lives in: ``functions`` or ``layers``."""
        ...

    @property
    def shares_class_table(self) -> bool:
        """Whether its class's ``[classes.NAME]`` table gives it constructor arguments (a method)."""
        ...

    @property
    def owes_received(self) -> bool:
        """Whether each backward function owes gradients for what its own forward function received, as in a
        layer, rather than one per argument of the call gradcheck makes."""
        ...

    @property
    def keywords_by_convention(self) -> bool:
        """Whether defaulted constants its backward function returns no gradient for may be passed by keyword
        (a call gradcheck makes itself; a layer's ``call`` is Keras's)."""
        ...

    @property
    def references_in_float64(self) -> bool:
        """Whether its references may run in float64 for low-precision inputs (a layer's weights keep its dtype)."""
        ...

    @property
    def weights_on_self(self) -> bool:
        """Whether the variables it reads are its own attributes, passed by its ``call`` (a layer's weights)."""
        ...

    @property
    def positional_guesses(self) -> tuple[tuple[str, ...], ...]:
        """The positional inputs probed, in turn, where the config fills its ``*args`` with nothing (a
        ``(*args)`` function: one input, then two); empty where its signature says what to feed."""
        ...

    def signature(self, subject: SubjectParts) -> inspect.Signature:
        """Its signature as ``gradcheck list`` shows it and ``gradcheck init`` asks for it (no ``self``)."""
        ...

    def described_by(self, subject: SubjectParts) -> Callable[..., Any] | None:
        """The function whose signature and docstring describe its arguments (for probing's hints)."""
        ...

    def identity(self, subject: SubjectParts) -> Hashable:
        """What two names of one subject share, so that an alias is checked once."""
        ...

    def bind(self, subject: SubjectParts, construct: Construct) -> Bound:
        """What a check calls: the function bound as it is called, or the layer built."""
        ...

    def target(self, subject: SubjectParts, bound: Bound) -> CallTarget:
        """The call target (:mod:`gradcheck.targets`) that calls ``bound`` with its custom gradients and without."""
        ...

    def python_valued(self, bound: Bound) -> Callable[..., Any] | None:
        """The function whose Python-valued required arguments the config must give, or None where none are read."""
        ...

    def records_backward(self, reached: bool) -> bool:
        """Whether gradcheck sees its backward functions called (``reached``: the run reached a custom gradient)."""
        ...

    def reached(
        self, subject: SubjectParts, outcomes: Outcomes, table: str, reference: str, target: CallTarget | None = None
    ) -> Reached | None:
        """What its custom run (``outcomes``, made through ``target``) reaching these custom gradients means for
        the check; None where nothing is to say."""
        ...


class Declared:
    """What every kind whose custom gradients are known before it runs answers alike (a nested one's are not)."""

    name: str
    positional_guesses: tuple[tuple[str, ...], ...] = ()

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def python_valued(self, bound: Bound) -> Callable[..., Any] | None:
        """None: the config's shapes and constants say what each argument is."""
        return None

    def records_backward(self, reached: bool) -> bool:
        """True: its backward functions are instrumented."""
        return True

    def reached(
        self, subject: SubjectParts, outcomes: Outcomes, table: str, reference: str, target: CallTarget | None = None
    ) -> Reached | None:
        """None: its custom gradients were found before it ran."""
        return None


def without_first(signature: inspect.Signature) -> inspect.Signature:
    """A signature without its first parameter (``self`` or ``cls``, bound when the check calls it)."""
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def signature_or_empty(function: Any) -> inspect.Signature:
    """``function``'s signature, or an empty one where Python cannot read it (a builtin, a C extension)."""
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return inspect.Signature()
