"""Probing on real custom gradients, before and after issue 10 item 3: which get inputs with no config.

Usage: TF_USE_LEGACY_KERAS=1 PYTHONPATH=. python3 benchmarks/probe_realworld.py /work/research/realworld.toml [SKIP...]

SKIP names functions left out: ``hyp2f1_small_argument``'s series runs for minutes on draws
outside |z| < 1 (``gradcheck run`` stops it at its 60 s timeout, before and after).

For every public function of the corpus (layers and methods left out: they need ``init``),
the forward pass is called eagerly, as gradcheck's probing calls it:

- ``before``: the eight shape sets probing tried before (same shape for all, a matmul chain, a
  row and a bias, square, vector, scalar, 3-D, batched chain), each with normal then positive draws;
- ``after``: :class:`gradcheck.probing.Search`, with the docstring, the parameter names and
  TensorFlow's errors.

A guess is accepted when the forward pass returns float outputs, all finite. The table gives the
inputs found and the number of forward calls each way. It needs the packages of the corpus.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gradcheck import probing
from gradcheck.checking.build import dtype_clash
from gradcheck.checking.probe import _stop_probing, guess_specs
from gradcheck.sampling import draw_tensor, subject_rng

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _forward(function: Any, names: tuple[str, ...], specs: dict[str, Any]) -> tuple[BaseException | None, bool, bool]:
    import tensorflow as tf

    rng = subject_rng(0, function.__name__, 0)
    args = [tf.constant(draw_tensor(specs[n], rng), dtype=specs[n].dtype) for n in names]
    try:
        outputs = tf.nest.flatten(function(*args))
    except Exception as error:  # the guess was refused
        return error, True, True
    floats = [np.asarray(o) for o in outputs if getattr(o, "dtype", None) is not None and o.dtype.is_floating]
    return None, all(np.all(np.isfinite(o)) for o in floats), bool(floats)


def before(function: Any, names: tuple[str, ...]) -> tuple[str, int]:
    calls = 0
    for shapes in list(probing.candidate_shapes(len(names)))[:8]:
        for positive in (False, True):
            guess = probing.Guess(tuple(shapes), ("float",) * len(names), (positive,) * len(names))
            calls += 1
            error, finite, outputs = _forward(function, names, guess_specs(guess, names, "float64"))
            if error is None and finite and outputs:
                return _describe(guess, names), calls
            if error is None and not outputs:
                break
    return "-", calls


def after(function: Any, names: tuple[str, ...]) -> tuple[str, int]:
    calls = 0
    for dtype in ("float64", "float32"):  # float32 where float64 met float32 code, as a check reruns
        search = probing.Search(names, probing.hints_for(function, names))

        def forward(guess: probing.Guess, dtype: str = dtype) -> probing.Attempt:
            error, finite, outputs = _forward(function, names, guess_specs(guess, names, dtype))
            return probing.Attempt(guess, error=error, finite=finite, outputs=outputs)

        found = search.run(forward, stop=_stop_probing)
        calls += len(search.attempts)
        if found is not None:
            return _describe(found.guess, names) + ("" if dtype == "float64" else " (float32)"), calls
        if not any(dtype_clash(e) for e in search.errors):
            break
    return "-", calls


def _describe(guess: probing.Guess, names: tuple[str, ...]) -> str:
    parts = []
    for name, shape, kind, positive in zip(names, guess.shapes, guess.kinds, guess.positive):
        extra = {"integer": " int", "complex": " complex"}.get(kind, " +" if positive else "")
        extra = " (0.1..0.9)" if guess.unit and kind == "float" else extra
        parts.append(f"{name}={list(shape)}{extra}")
    return ", ".join(parts)


def main(corpus: Path, skip: set[str]) -> None:
    targets = tomllib.loads(corpus.read_text())["target"]
    print("| target | before (calls) | after (calls) |\n|---|---|---|")
    found = {"before": 0, "after": 0}
    total = 0
    for target in targets:
        module_name, _, name = target["target"].partition("::")
        if target.get("section") == "layers" or "." in name or name in skip:
            continue
        function = getattr(importlib.import_module(module_name), name)
        parameters = inspect.signature(function).parameters.values()
        names = tuple(p.name for p in parameters if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD)
        total += 1
        start = time.perf_counter()
        old, old_calls = before(function, names)
        new, new_calls = after(function, names)
        found["before"] += old != "-"
        found["after"] += new != "-"
        seconds = time.perf_counter() - start
        print(f"| `{name}` | {old} ({old_calls}) | {new} ({new_calls}) | {seconds:.1f} s")
    print(f"\nfound inputs: before {found['before']}/{total}, after {found['after']}/{total}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), set(sys.argv[2:]))
