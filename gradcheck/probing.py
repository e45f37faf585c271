"""Probing: find inputs a forward pass accepts when the config gives no shapes.

A search over guesses, each tried with one forward call, at most
:data:`MAX_ATTEMPTS` calls per function. The guesses come from three
places, the cheapest first:

- what the code says before it runs: shapes written in the docstring
  (``x: Tensor of shape [batch, time, depth]``), names and annotations that
  mean an integer tensor (``labels``, ``indices``, ``ids``, ``lengths``,
  ``mask``) or a positive one (``scale``, ``concentration``);
- a fixed list of small shapes of ranks 0 to 4: one shape for every input,
  broadcast-compatible pairs, and chains whose inner dimensions match for
  matmul and einsum;
- what TensorFlow said about the last guess: a rank it expected, shapes it
  found incompatible, matrices that do not chain, a square matrix, a complex
  dtype, or a domain error (or a NaN result), which brings positive draws.

Nothing here imports TensorFlow: the caller runs the forward pass and hands
back its error or outputs; this module only reads them.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

#: Forward calls probing may make for one function, all guesses and retries together.
MAX_ATTEMPTS = 24

#: Sizes given to the named dimensions of a docstring shape, in order of appearance
#: (distinct and non-square, so a transpose or a swap cannot pass unseen).
SYMBOL_SIZES = (3, 4, 5, 2, 6, 7, 8)

_INTEGER_NAME = re.compile(
    r"^(labels?|targets?|indices|index|idx|ids|\w+_ids?|\w+_indices|lengths?|\w+_lengths?|seq_lens?|"
    r"mask|\w+_mask|positions|segment_ids|classes|tokens?)$"
)
_POSITIVE_NAME = re.compile(
    r"^(scale|\w+_scale|concentration\d*|rate|df|stddev|std|sigma|variance|temperature|precision|"
    r"\w+_concentration)$"
)
_SHAPE_IN_TEXT = re.compile(r"shape\s*(?:of\s*)?`?[\[(]([^\])]*)[\])]`?", re.IGNORECASE)
_RANK = re.compile(
    r"(?:expected|must be|must have|to have|to be|should be|requires?)\s+(?:a\s+)?(?:at least\s+)?"
    r"rank\s*(?:=|of\s*)?\s*(\d+)"
    r"|expected\s+(?:min_)?ndim\s*=\s*(\d+)"
    r"|rank\s*(\d+)\s+(?:tensor\s+)?(?:expected|required)"
    r"|must be (\d+)-dimensional"
    r"|rank\s*>=?\s*(\d+)"
    r"|but input\(1\) is a vector of size (\d+)",
    re.IGNORECASE,
)
#: "Shape of tensor input [3,4] is not compatible with expected shape [?,?,4]": the rank and sizes it wants.
_SEQUENCE_OF_TENSORS = re.compile(r"\b(sequence|list|tuple)s? of\b[^.;]*?\btensors?\b", re.IGNORECASE)
_EXPECTED_SHAPE = re.compile(r"expected shape \[([^\]]*)\]", re.IGNORECASE)
_INCOMPATIBLE = re.compile(r"incompatible shapes|not broadcastable|broadcast|are incompatible", re.IGNORECASE)
_MATMUL = re.compile(
    r"matrix size-incompatible|dimensions must be equal|inner dimension|contracting|einsum|"
    r"expected dimension \d+ at axis|filter depth",
    re.IGNORECASE,
)
_INCOMPATIBLE_PAIR = re.compile(r"incompatible shapes:?\s*\[([\d,\s]*)\]\s*vs\.?\s*\[([\d,\s]*)\]", re.IGNORECASE)
_SQUARE = re.compile(r"square matrices, after TensorFlow's error", re.IGNORECASE)
_COMPLEX = re.compile(
    r"of (double|float|half)\b.*not in the list of allowed values: complex|expected to be a complex|"
    r"must be (a )?complex|requires? (a |tf\.)?complex",
    re.IGNORECASE | re.DOTALL,
)
_DOMAIN = re.compile(
    r"domain|positive|non-?negative|not successful|invertible|singular|\bnan\b|not finite|must be >|"
    r"did not hold|cholesky|out of range|greater than",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Hint:
    """What the code says about one parameter before it runs."""

    name: str
    integer: bool = False
    """Its name or annotation says it holds integers (labels, indices, lengths, a mask)."""
    positive: bool = False
    """Its name or docstring says it must be positive (a scale, a concentration)."""
    shape: tuple[int | str, ...] | None = None
    """The shape its docstring gives: sizes and dimension names."""
    sequence: bool = False
    """Its docstring says it is a list of tensors ("A sequence of Tensors"): the config gives it as ``items``."""


@dataclass(frozen=True)
class Guess:
    """One set of inputs to try: a shape, a kind and a draw for each unknown parameter."""

    shapes: tuple[tuple[int, ...], ...]
    """One shape per unknown parameter, in order."""
    kinds: tuple[str, ...]
    """``float``, ``integer`` or ``complex``, per parameter."""
    positive: tuple[bool, ...]
    """Draw this parameter positive (an spd matrix where it is square)."""
    source: str = "small shapes"
    """Where the guess came from, for the report's note."""
    unit: bool = False
    """Draw every float parameter in (0.1, 0.9): the last resort for domains (probabilities, ``betainc``'s x)."""

    def with_positive(self) -> Guess:
        """The same shapes with every float parameter drawn positive."""
        return replace(self, positive=tuple(k == "float" or p for k, p in zip(self.kinds, self.positive)))

    def narrower(self) -> list[Guess]:
        """The next narrower draw after NaN or a domain error: positive, then the unit interval."""
        if not self.any_positive:
            return [self.with_positive()]
        return [] if self.unit else [replace(self.with_positive(), unit=True)]

    @property
    def any_positive(self) -> bool:
        """True when some float parameter is drawn positive."""
        return any(p and k == "float" for p, k in zip(self.positive, self.kinds))


@dataclass
class Attempt:
    """What one forward call said about a guess."""

    guess: Guess
    error: BaseException | None = None
    finite: bool = True
    """False when the outputs held NaN or Inf."""
    outputs: bool = True
    """False when the forward pass returned no float outputs."""

    @property
    def accepted(self) -> bool:
        """The guess ran, gave float outputs, all finite."""
        return self.error is None and self.finite and self.outputs


@dataclass
class Search:
    """The state of one function's probing: guesses still to try, what each try said."""

    names: tuple[str, ...]
    hints: Mapping[str, Hint]
    budget: int = MAX_ATTEMPTS
    attempts: list[Attempt] = field(default_factory=list)
    _seen: set[Guess] = field(default_factory=set)
    _queue: list[Guess] = field(default_factory=list)

    def run(
        self, forward: Callable[[Guess], Attempt], stop: Callable[[list[Attempt]], bool] | None = None
    ) -> Attempt | None:
        """Try guesses until one is accepted, ``stop`` says enough, or the budget is spent.

        ``forward`` makes one forward call; the accepted attempt is returned, or None.
        """
        self._queue = list(self._initial())
        while self._queue and len(self.attempts) < self.budget and not (stop and stop(self.attempts)):
            guess = self._queue.pop(0)
            if guess in self._seen:
                continue
            self._seen.add(guess)
            attempt = forward(guess)
            self.attempts.append(attempt)
            if attempt.accepted:
                return attempt
            self._queue[:0] = [g for g in self._learn(attempt) if g not in self._seen]
        return None

    @property
    def errors(self) -> list[BaseException]:
        """The errors the forward pass raised, in order."""
        return [a.error for a in self.attempts if a.error is not None]

    def _initial(self) -> Iterator[Guess]:
        kinds = tuple("integer" if self.hints[n].integer else "float" for n in self.names)
        positive = tuple(self.hints[n].positive for n in self.names)
        documented = documented_shapes(self.names, self.hints)
        if documented is not None:
            yield Guess(documented, kinds, positive, source="from the docstring")
        integers = [i for i, kind in enumerate(kinds) if kind == "integer"]
        for shapes in candidate_shapes(len(self.names)):
            floats = [shapes[i] for i in range(len(shapes)) if i not in integers]
            if integers and floats and floats[0]:
                # Labels and indices usually index the last axis of the first float tensor away.
                shorter = list(shapes)
                for i in integers:
                    shorter[i] = floats[0][:-1]
                yield Guess(tuple(shorter), kinds, positive)
            yield Guess(tuple(shapes), kinds, positive)

    def _learn(self, attempt: Attempt) -> list[Guess]:
        """Guesses worth trying next, from what the forward pass said."""
        guess = attempt.guess
        if attempt.error is None:
            # It ran but gave NaN or Inf: a domain, most likely.
            return guess.narrower() if not attempt.finite else []
        try:
            text = str(attempt.error)
        except Exception:  # the user's exception cannot say what it is: nothing to learn from it
            text = ""
        learned = learn_from_error(text, guess)
        if not learned and not guess.any_positive:
            # Nothing in the message to go on: the values may be out of the function's domain.
            learned = [guess.with_positive()]
        return learned


def learn_from_error(text: str, guess: Guess) -> list[Guess]:
    """Guesses that answer what TensorFlow's error says was wrong with ``guess``."""
    learned: list[Guess] = []
    floats = [i for i, kind in enumerate(guess.kinds) if kind != "integer"]
    rank = _rank_in(text)
    if rank is not None:
        learned += [
            _reshaped(guess, floats, [rank_shape(rank)] * len(floats), f"rank {rank}, from TensorFlow's error"),
            _reshaped(guess, floats, chain_shapes(len(floats), rank), f"rank {rank}, from TensorFlow's error"),
        ]
    expected = _EXPECTED_SHAPE.search(text)
    if expected is not None:
        sizes = [part.strip() for part in expected.group(1).split(",") if part.strip()]
        wanted = rank_shape(len(sizes)) if len(sizes) <= 4 else None
        if wanted is not None:
            shape = tuple(int(s) if s.isdigit() else w for s, w in zip(sizes, wanted))
            learned.append(_reshaped(guess, floats, [shape] * len(floats), "the shape TensorFlow expected"))
    if _MATMUL.search(text):
        rank_now = max((len(guess.shapes[i]) for i in floats), default=2)
        learned.append(
            _reshaped(
                guess,
                floats,
                chain_shapes(len(floats), max(rank_now, 2)),
                "matching inner dimensions, after TensorFlow's shape error",
            )
        )
    pair = _INCOMPATIBLE_PAIR.search(text)
    if pair is not None:
        learned += _broadcast_fixes(guess, floats, _sizes(pair.group(1)), _sizes(pair.group(2)))
    if _INCOMPATIBLE.search(text) and floats:
        first = guess.shapes[floats[0]]
        learned.append(
            _reshaped(guess, floats, [first] * len(floats), "one shape for all, after TensorFlow's shape error")
        )
        learned.append(
            _reshaped(
                guess, floats, [first] + [first[-1:]] * (len(floats) - 1), "a broadcast, after TensorFlow's shape error"
            )
        )
    if _SQUARE.search(text):
        rank_now = max((len(guess.shapes[i]) for i in floats), default=2)
        learned.append(
            _reshaped(
                guess,
                floats,
                [(2,) * (rank_now - 2) + (4, 4)] * len(floats),
                "square matrices, after TensorFlow's error",
            )
        )
    if _COMPLEX.search(text) and "complex" not in guess.kinds:
        # The message names an op's input, not which parameter: one at a time, then all.
        choices = [[i] for i in floats] + ([floats] if len(floats) > 1 else [])
        for chosen in choices:
            kinds = tuple("complex" if i in chosen else kind for i, kind in enumerate(guess.kinds))
            learned.append(replace(guess, kinds=kinds, source="a complex dtype, after TensorFlow's dtype error"))
    if _DOMAIN.search(text):
        learned += guess.narrower()
    return learned


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _broadcast_fixes(guess: Guess, floats: Sequence[int], left: tuple[int, ...], right: tuple[int, ...]) -> list[Guess]:
    """For ``Incompatible shapes: [3,5] vs. [5,6]``: the parameter shaped like one side becomes a bias of the other."""
    fixes = []
    source = "a broadcast, after TensorFlow's shape error"
    for mine, other in ((right, left), (left, right)):
        owners = [i for i in range(len(guess.shapes)) if guess.shapes[i] == mine]
        if owners and other:
            bias = _reshaped(guess, owners, [other[-1:]] * len(owners), source)
            same = _reshaped(guess, owners, [other] * len(owners), source)
            # A float tensor shaped like one side is a bias; an integer one (a mask) has the data's shape.
            fixes += [bias, same] if any(i in floats for i in owners) else [same, bias]
    return fixes


def _reshaped(guess: Guess, indices: Sequence[int], shapes: Sequence[tuple[int, ...]], source: str) -> Guess:
    new = list(guess.shapes)
    for index, shape in zip(indices, shapes):
        new[index] = shape
    return replace(guess, shapes=tuple(new), source=source)


def _rank_in(text: str) -> int | None:
    match = _RANK.search(text)
    if match is None:
        return None
    rank = int(next(group for group in match.groups() if group is not None))
    return rank if 0 <= rank <= 4 else None


def rank_shape(rank: int) -> tuple[int, ...]:
    """A small non-square shape of ``rank``: (), (3,), (3, 4), (2, 3, 4), (2, 3, 4, 5)."""
    return {0: (), 1: (3,), 2: (3, 4), 3: (2, 3, 4), 4: (2, 3, 4, 5)}[rank]


def chain_shapes(count: int, rank: int) -> list[tuple[int, ...]]:
    """Shapes whose last two dimensions chain for matmul: (3, 4), (4, 5), (5, 6)..., batched to ``rank``."""
    batch = (2, 3)[: max(rank - 2, 0)]
    if rank < 2:
        return [rank_shape(rank)] * count
    return [batch + (3 + i, 4 + i) for i in range(count)]


def candidate_shapes(count: int) -> Iterator[list[tuple[int, ...]]]:
    """Small shapes to try, the most telling first, for ``count`` parameters.

    Non-square first (they expose transposes and swaps), then a matmul
    chain, then a row-and-bias pair, then square, vector, scalar and 3-D;
    then what the first list did not reach: a 4-D batch, broadcast pairs
    of ranks 3 and 4, and a tensor with scalar parameters after it.
    """
    first = (3, 4)
    candidates: list[list[tuple[int, ...]]] = [
        [first] * count,
        chain_shapes(count, 2),
        [first] + [(4,)] * (count - 1),
        [(4, 4)] * count,
        [(5,)] * count,
        [()] * count,
        [(2, 3, 4)] * count,
        chain_shapes(count, 3),
        [(2, 3, 4, 5)] * count,
        [(2, 3, 4)] + [(4,)] * (count - 1),
        [(2, 3, 4, 5)] + [(5,)] * (count - 1),
        [first] + [()] * (count - 1),
        chain_shapes(count, 4),
        [(2, 4, 4)] * count,
    ]
    seen: set[tuple[tuple[int, ...], ...]] = set()
    for shapes in candidates:
        key = tuple(shapes)
        if key not in seen:
            seen.add(key)
            yield list(shapes)


# -- what the code says --------------------------------------------------------


def hints_for(function: Callable[..., object] | None, names: Iterable[str]) -> dict[str, Hint]:
    """Each parameter's hint from its name, its annotation and the function's docstring."""
    names = tuple(names)
    annotations: dict[str, str] = {}
    doc = ""
    if function is not None:
        doc = inspect.getdoc(function) or ""
        try:
            parameters = inspect.signature(function).parameters
            annotations = {n: str(p.annotation) for n, p in parameters.items() if p.annotation is not p.empty}
        except (TypeError, ValueError):
            pass
    entries = docstring_entries(doc, names)
    return {name: _hint(name, annotations.get(name, ""), entries.get(name, "")) for name in names}


def _hint(name: str, annotation: str, entry: str) -> Hint:
    lowered = name.lower()
    integer = bool(_INTEGER_NAME.match(lowered)) or bool(re.search(r"\bint(8|16|32|64)?\b", annotation))
    if re.search(r"\bfloat|complex", annotation):
        integer = False
    positive = bool(_POSITIVE_NAME.match(lowered)) or bool(
        re.search(r"\b(must be |strictly )?positive\b", entry, re.IGNORECASE)
    )
    return Hint(
        name=name,
        integer=integer,
        positive=positive and not integer,
        shape=_shape_in(entry),
        sequence=bool(_SEQUENCE_OF_TENSORS.search(entry)),
    )


def docstring_entries(doc: str, names: Sequence[str]) -> dict[str, str]:
    """The text of each parameter's entry in a Google- or numpy-style ``Args`` section."""
    entries: dict[str, list[str]] = {}
    current: str | None = None
    indent = -1
    start = re.compile(r"^(\s*)[`*]*(\w+)[`*]*\s*(?:\([^)]*\))?\s*:(.*)$")
    for line in doc.splitlines():
        match = start.match(line)
        if match and match.group(2) in names and (current is None or len(match.group(1)) <= indent):
            current, indent = match.group(2), len(match.group(1))
            entries[current] = [match.group(3)]
        elif current is not None and line.strip() and len(line) - len(line.lstrip()) > indent:
            entries[current].append(line.strip())
        elif current is not None and line.strip():
            current = None
    return {name: " ".join(lines) for name, lines in entries.items()}


def _shape_in(text: str) -> tuple[int | str, ...] | None:
    match = _SHAPE_IN_TEXT.search(text)
    if match is None:
        return None
    sizes: list[int | str] = []
    for part in match.group(1).split(","):
        part = part.strip().strip("`'\"")
        if not part or "..." in part or part.lower() in ("batch_shape", "sample_shape"):
            continue
        sizes.append(int(part) if part.isdigit() and int(part) > 0 else part)
    return tuple(sizes) if len(sizes) <= 4 else None


def documented_shapes(names: Sequence[str], hints: Mapping[str, Hint]) -> tuple[tuple[int, ...], ...] | None:
    """The docstring's shapes with one size per dimension name, or None where a parameter has none.

    A name stands for the same size in every parameter (``B`` in ``[B, T]``
    and ``[B]``); parameters the docstring leaves out take the first
    documented shape.
    """
    given = [hints[n].shape for n in names]
    if all(shape is None for shape in given):
        return None
    sizes: dict[str, int] = {}

    def concrete(shape: tuple[int | str, ...]) -> tuple[int, ...]:
        out = []
        for size in shape:
            if isinstance(size, str):
                key = size.lower()
                sizes.setdefault(key, SYMBOL_SIZES[len(sizes) % len(SYMBOL_SIZES)])
                out.append(sizes[key])
            else:
                out.append(size)
        return tuple(out)

    resolved = [concrete(shape) if shape is not None else None for shape in given]
    fallback = next(shape for shape in resolved if shape is not None)
    return tuple(shape if shape is not None else fallback for shape in resolved)


# -- integer and complex tensors -----------------------------------------------


def integer_range(name: str, float_shapes: Iterable[tuple[int, ...]]) -> tuple[int, int]:
    """``[low, high)`` for an integer parameter: small enough to index every float input's axes.

    A mask is 0 or 1; a length is at least 1 and at most the smallest size;
    labels, indices and ids are below the smallest size, and labels start
    at 1: label 0 is CTC's blank and most sequence APIs' padding, and a
    class like any other elsewhere, so leaving it out keeps every guess valid.
    """
    smallest = min((size for shape in float_shapes for size in shape), default=3)
    smallest = max(smallest, 2)
    lowered = name.lower()
    if "mask" in lowered:
        return 0, 2
    if "length" in lowered or lowered.startswith("seq_len"):
        return 1, smallest + 1
    if "label" in lowered:
        return 1, smallest
    return 0, smallest


def complex_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A complex draw: independent standard normal real and imaginary parts."""
    return rng.standard_normal(size=shape) + 1j * rng.standard_normal(size=shape)
