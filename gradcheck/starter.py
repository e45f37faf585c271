"""``gradcheck init``: a starter config for the targets, with the shapes probing finds.

:func:`starter_entries` finds every function (and layer) of the targets and
probes shapes for each with the same prober a run uses
(:func:`gradcheck.checking.guess_shapes`), ignoring any config that exists:
the file is written from scratch. :func:`render_starter` turns the entries
into TOML text; nothing here writes files or prints.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field, replace
from typing import Any

from gradcheck import probing
from gradcheck.check_requests import request_for
from gradcheck.checking import guess_shapes
from gradcheck.checking.recognise import recognised_proxy
from gradcheck.checking.surrogates import ProxyChoice
from gradcheck.collection import collect
from gradcheck.config import Settings
from gradcheck.kinds.protocol import signature_or_empty
from gradcheck.options import RunOptions
from gradcheck.results import Result
from gradcheck.walk import Exclusion

#: TOML keys that need no quotes.
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class StarterInput:
    """One input of a starter entry: a probed shape, or a placeholder."""

    name: str
    """Argument name."""
    shape: tuple[int, ...] | None
    """The shape the forward pass accepted; None where probing found none."""
    distribution: str = "normal"
    """The distribution the accepted shape was drawn from (``positive`` for log-like functions)."""
    dtype: str | None = None
    """A dtype the run's would not give: ``int32`` for labels and indices, ``complex128``."""
    low: float | None = None
    """Lower bound of an integer draw."""
    high: float | None = None
    """Upper bound (exclusive) of an integer draw."""


@dataclass(frozen=True)
class StarterEntry:
    """One ``[functions.NAME]`` (or ``[layers.NAME]``) table of the starter config."""

    table: str
    """The config table the entry goes under: ``functions`` or ``layers``."""
    name: str
    """The key: the function's name in its module (``Class.method`` for methods)."""
    id: str
    """``path::name``, for the comment above the table."""
    inputs: tuple[StarterInput, ...] = ()
    """The inputs the function needs shapes for."""
    failure: str | None = None
    """Why probing found no shapes, where it did not."""
    init: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments (layers and classes of methods); written as a placeholder when needed."""
    needs_init: bool = False
    """The class could not be built without arguments."""
    parameters: tuple[str, ...] = ()
    """The required arguments of the function (a layer's ``call``), for the placeholder."""
    lists: tuple[str, ...] = ()
    """Of :attr:`parameters`, those documented as lists of tensors: their placeholder is ``items``."""
    init_parameters: tuple[str, ...] = ()
    """The required constructor arguments of a layer or a method's class, for the placeholder."""
    dtype: str | None = None
    """The dtype probing had to use where it is not the run's (float32 code)."""
    constants: tuple[tuple[str, str], ...] = ()
    """Arguments that are Python values (a function, a loop count): each name with its TOML placeholder."""
    proxy: ProxyChoice | None = None
    """The shipped proxy a surrogate gradient was recognised as standing for, with its own constants."""


@dataclass(frozen=True)
class Starter:
    """What ``gradcheck init`` found: an entry per function and layer, and the modules that failed to import."""

    entries: list[StarterEntry]
    module_results: tuple[Result, ...] = ()


def starter_entries(targets: tuple[str, ...], seed: int = 0, exclusions: tuple[Exclusion, ...] = ()) -> Starter:
    """Every function and layer of ``targets``, with probed shapes or the reason there are none.

    ``exclusions`` leave files out of the walks, as for ``gradcheck run``.
    """
    options = RunOptions(targets=targets, overrides={"seed": seed}, exclusions=exclusions)
    entries = []
    collected = collect(options, read_configs=False)
    for check in collected.checks:
        request = request_for(check, options)
        subject = request.subject
        named = StarterEntry(table=subject.kind.table, name=subject.name, id=subject.id)
        guess = guess_shapes(request)
        if guess.plan is None:
            failure = guess.failure or "no shapes found"
            # Only a method's class or a layer is constructed: only they can want constructor arguments.
            needs_init = guess.reason in ("needs-init", "init-raised")
            parameters = _required(subject.kind.signature(subject))  # as `gradcheck list` shows it
            hints = probing.hints_for(subject.kind.described_by(subject), parameters)
            entries.append(
                replace(
                    named,
                    failure=failure,
                    constants=guess.constants,
                    needs_init=needs_init,
                    parameters=parameters,
                    lists=tuple(name for name, hint in hints.items() if hint.sequence),
                    init_parameters=_required(signature_or_empty(subject.owner)) if needs_init else (),
                )
            )
            continue
        inputs = tuple(
            StarterInput(
                argument.name,
                argument.spec.shape,
                argument.spec.distribution,
                dtype=None if argument.spec.differentiable else argument.spec.dtype,
                low=argument.spec.low if argument.spec.distribution == "integer" else None,
                high=argument.spec.high if argument.spec.distribution == "integer" else None,
            )
            for argument in guess.plan.arguments
            if argument.guessed and argument.spec is not None
        )
        floats = {a.spec.dtype for a in guess.plan.leaves if a.spec is not None and a.spec.differentiable}
        dtype = floats.pop() if len(floats) == 1 and request.settings.dtype not in floats else None
        proxy = recognised_proxy(request, guess.plan)
        entries.append(replace(named, inputs=inputs, dtype=dtype, proxy=proxy))
    return Starter(entries, collected.module_results)


def _required(signature: inspect.Signature) -> tuple[str, ...]:
    """Names of the parameters without defaults."""
    return tuple(
        p.name
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def toml_key(name: str) -> str:
    """A TOML key: bare where allowed, else a quoted string."""
    if _BARE_KEY.match(name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _comment(text: str) -> str:
    # A comment is one line: newlines in a user's exception message must not end it.
    return "# " + " ".join(text.split())


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def _input_value(item: StarterInput) -> str:
    assert item.shape is not None
    if item.distribution == "normal" and item.dtype is None:
        return _shape(item.shape)
    parts = [f"shape = {_shape(item.shape)}"]
    if item.dtype is not None:
        parts.append(f'dtype = "{item.dtype}"')
    if item.distribution != "normal":
        parts.append(f'distribution = "{item.distribution}"')
    if item.low is not None and item.high is not None:
        parts.append(f"low = {int(item.low)}, high = {int(item.high)}")
    return "{ " + ", ".join(parts) + " }"


def _proxy_lines(proxy: ProxyChoice | None) -> list[str]:
    """The ``proxy`` line (and its constants) of a function recognised as a surrogate gradient."""
    if proxy is None:
        return []
    lines = [f'proxy = "{proxy.spec}"  # recognised: a surrogate gradient, checked against this proxy\'s derivative']
    if proxy.constants:
        lines.append(
            "constants = { " + ", ".join(f"{k} = {v:.6g}" for k, v in proxy.constants) + " }  # the proxy's own"
        )
    return lines


def render_starter(entries: list[StarterEntry], command: str) -> str:
    """The starter config as TOML text: every entry's table, guesses and placeholders commented."""
    defaults = Settings()
    lines = [
        f"# Starter config written by `{command}`.",
        "# Shapes marked 'guessed' are small shapes the forward pass accepted; replace them",
        "# with the shapes you use. Tables marked TODO need shapes written by hand.",
        "",
        f'dtype = "{defaults.dtype}"',
        f"seed = {defaults.seed}",
        f'mode = "{defaults.mode}"',
        f'execution = "{defaults.execution}"',
    ]
    written: dict[tuple[str, str], StarterEntry] = {}
    for entry in entries:
        key = (entry.table, entry.name)
        if key in written:
            # A config table is keyed by name alone: one table serves every module defining the name.
            continue
        written[key] = entry
        also = [other.id for other in entries if (other.table, other.name) == key and other is not entry]
        lines += ["", _comment(entry.id + (f" (the same table applies to {', '.join(also)})" if also else ""))]
        lines.append(f"[{entry.table}.{toml_key(entry.name)}]")
        if entry.failure is not None:
            lines.append(_comment(f"TODO: {entry.failure}"))
            if entry.needs_init:
                arguments = ", ".join(f"{toml_key(name)} = ..." for name in entry.init_parameters)
                lines.append(f"# init = {{ {arguments} }}  # the constructor's keyword arguments")
            if entry.constants:
                values = ", ".join(f"{toml_key(name)} = {value}" for name, value in entry.constants)
                lines.append(f"# constants = {{ {values} }}  # Python values; a function is imported from your code")
            given = {name for name, _ in entry.constants}
            tensors = [name for name in entry.parameters if name not in given]
            if tensors or not given:
                placeholder = ", ".join(
                    f"{toml_key(name)} = " + ("{ items = [[4, 5], [4, 5]] }" if name in entry.lists else "[4, 5]")
                    for name in tensors
                )
                placeholder = placeholder or "x = [4, 5]"
                lines.append(f"# inputs = {{ {placeholder} }}  # the shape of each argument, in order")
            continue
        lines += _proxy_lines(entry.proxy)
        if not entry.inputs:
            lines.append("# every argument has a default or is configured: nothing to guess")
            continue
        if entry.dtype is not None:
            lines.append(f'dtype = "{entry.dtype}"  # guessed: the code is written for {entry.dtype}')
        described = ", ".join(f"{toml_key(item.name)} = {_input_value(item)}" for item in entry.inputs)
        lines.append(f"inputs = {{ {described} }}  # guessed")
    return "\n".join(lines) + "\n"
