"""gradcheck against tf.test.compute_gradient, in one process, on this machine.

    python benchmarks/bench_compare.py [--limit SECONDS] [--only NAME]

For each case it times, after a warm-up call of each method on a small
input: ``tf.test.compute_gradient`` plus ``assertAllClose`` (the usual
TensorFlow way; skipped with a note where its own cost model predicts more
than ``--limit`` seconds), ``gradcheck.check(mode="full")``,
``gradcheck.check(mode="fast")`` and ``gradcheck.check(shape_only=True)``.
Each timed run starts after ``gc.collect()``. It prints a Markdown table:
seconds, the ratio to compute_gradient, how many times Python called the
forward and the backward function (a batched or traced call counts once),
the peak resident memory added during the run, and the verdict. Every case's
custom gradient is correct, so every verdict should be "passed".

A second table measures fast mode against its floor: one forward and
backward pass of the same custom gradient (eagerly, under a tape, with the
gradients fetched as numpy arrays), timed in the same process right before
each fast check; ``--repeats`` pairs, the median ratios reported, of
wall-clock time and of CPU time. A ratio is steadier than either time on a
busy machine, and the CPU-time ratio steadier than the wall-clock one.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import gradcheck
from gradcheck import _tf

tf = _tf.tensorflow()

CALLS = {"forward": 0, "backward": 0}


def _counted(forward: Callable[..., Any]) -> Callable[..., Any]:
    """Count the forward calls and the backward calls of a custom gradient."""

    def wrapped(*args: Any) -> Any:
        CALLS["forward"] += 1
        result, grad = forward(*args)

        def counted_grad(*upstreams: Any) -> Any:
            CALLS["backward"] += 1
            return grad(*upstreams)

        return result, counted_grad

    wrapped.__name__ = forward.__name__
    return tf.custom_gradient(wrapped)


def _matmul(A: Any, W: Any) -> Any:
    def grad(dy: Any) -> Any:
        return tf.matmul(dy, W, transpose_b=True), tf.matmul(A, dy, transpose_a=True)

    return tf.matmul(A, W), grad


def _softplus(x: Any) -> Any:
    def grad(dy: Any) -> Any:
        return dy * tf.math.sigmoid(x)

    return tf.where(x > 30.0, x, tf.math.log1p(tf.exp(x))), grad


matmul = _counted(_matmul)
softplus = _counted(_softplus)


@dataclass(frozen=True)
class Case:
    name: str
    function: Any
    inputs: dict[str, tuple[int, ...]]

    @property
    def input_elements(self) -> int:
        return sum(int(np.prod(s)) for s in self.inputs.values())


CASES = [
    Case("matmul (32,16)x(16,8)", matmul, {"A": (32, 16), "W": (16, 8)}),
    Case("matmul (128,128)x(128,128)", matmul, {"A": (128, 128), "W": (128, 128)}),
    Case("matmul (512,512)x(512,512)", matmul, {"A": (512, 512), "W": (512, 512)}),
    Case("softplus 10^3", softplus, {"x": (1000,)}),
    Case("softplus 10^5", softplus, {"x": (100_000,)}),
    Case("softplus 10^6", softplus, {"x": (1_000_000,)}),
    Case("batched matmul (8,32,16)x(8,16,8)", matmul, {"A": (8, 32, 16), "W": (8, 16, 8)}),
]


class PeakMemory:
    """Peak resident memory added while the block runs, sampled from /proc every few ms."""

    def __enter__(self) -> PeakMemory:
        self.base = self.peak = _rss()
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def __exit__(self, *exc: Any) -> None:
        self._running = False
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def added_mb(self) -> float:
        return (self.peak - self.base) / 2**20


def _rss() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class Row:
    case: str
    method: str
    seconds: float | None
    estimate: float | None
    forward: int
    backward: int
    memory_mb: float
    verdict: str
    note: str = ""


def _arrays(case: Case) -> list[Any]:
    rng = np.random.default_rng(0)
    return [tf.constant(rng.standard_normal(shape)) for shape in case.inputs.values()]


def _compute_gradient(case: Case) -> str:
    theoretical, numerical = tf.test.compute_gradient(case.function, _arrays(case))
    checker = tf.test.TestCase()
    for expected, got in zip(theoretical, numerical):
        checker.assertAllClose(expected, got, rtol=1e-5, atol=1e-5)
    return "passed"


def _compute_gradient_estimate(case: Case) -> float:
    """compute_gradient's own cost: two forward passes per input element, one VJP per output element."""
    arrays = _arrays(case)
    start = time.perf_counter()
    for _ in range(3):
        with tf.GradientTape() as tape:
            for array in arrays:
                tape.watch(array)
            output = case.function(*arrays)
        tape.gradient(output, arrays)
    per_pass = (time.perf_counter() - start) / 3
    outputs = int(np.prod(output.shape))
    return per_pass * (2 * case.input_elements + outputs)


def _measure(case: Case, method: str, limit: float) -> Row:
    CALLS.update(forward=0, backward=0)
    if method == "compute_gradient":
        estimate = _compute_gradient_estimate(case)
        if estimate > limit:
            return Row(case.name, method, None, estimate, 0, 0, 0.0, "skipped", f"~{estimate:,.0f} s estimated")
        CALLS.update(forward=0, backward=0)
        run: Callable[[], str] = lambda: _compute_gradient(case)  # noqa: E731
    else:
        settings = {"full": {"mode": "full"}, "fast": {"mode": "fast"}, "shape-only": {"shape_only": True}}[method]

        def run() -> str:
            return gradcheck.check(case.function, inputs=case.inputs, **settings).status

    # Collect first, so a collection of the garbage an earlier method left does not land in
    # this one's time; the collector stays on, as in real use (peak memory depends on it).
    gc.collect()
    with PeakMemory() as memory:
        start = time.perf_counter()
        verdict = run()
        seconds = time.perf_counter() - start
    return Row(case.name, method, seconds, None, CALLS["forward"], CALLS["backward"], memory.added_mb, verdict)


#: The cases fast mode is held to at most 10x one forward+backward pass on (issue 12).
PASS_CASES = ("matmul (512,512)x(512,512)", "softplus 10^6")


def _one_pass(case: Case, arrays: list[Any]) -> None:
    """One forward and backward pass of the custom gradient, as training would run it."""
    with tf.GradientTape() as tape:
        for array in arrays:
            tape.watch(array)
        output = case.function(*arrays)
    for gradient in tape.gradient(output, arrays, output_gradients=tf.ones_like(output)):
        gradient.numpy()


def _timed(run: Callable[[], Any]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (all threads of this process) of one run."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def fast_against_pass(case: Case, repeats: int) -> tuple[float, float, float, float]:
    """Medians over ``repeats`` pairs: seconds of one pass, of one fast check, their wall-clock ratio and their
    CPU-time ratio (the steadier one while other processes share the cores)."""
    arrays = _arrays(case)
    _one_pass(case, arrays)
    passes, checks, walls, cpus = [], [], [], []
    for _ in range(repeats):
        one = np.median([_timed(lambda: _one_pass(case, arrays)) for _ in range(3)], axis=0)
        check = _timed(lambda: gradcheck.check(case.function, inputs=case.inputs, mode="fast"))
        passes.append(one[0])
        checks.append(check[0])
        walls.append(check[0] / one[0])
        cpus.append(check[1] / one[1])
    return tuple(float(np.median(x)) for x in (passes, checks, walls, cpus))  # type: ignore[return-value]


def _print_against_pass(only: str | None, repeats: int) -> None:
    print()
    print(f"fast mode against one forward+backward pass of the same custom gradient (median of {repeats}):")
    print()
    print("| case | one pass (ms) | fast check (ms) | fast / pass, wall clock | fast / pass, CPU time |")
    print("|---|---|---|---|---|")
    for case in CASES:
        if case.name not in PASS_CASES or (only and only not in case.name):
            continue
        one, check, wall, cpu = fast_against_pass(case, repeats)
        print(f"| {case.name} | {one * 1e3:.0f} | {check * 1e3:.0f} | {wall:.1f}x | {cpu:.1f}x |", flush=True)


def _warm_up() -> None:
    small = CASES[0]
    _compute_gradient(small)
    for mode in ("fast", "full"):
        gradcheck.check(small.function, inputs=small.inputs, mode=mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=60.0, help="skip compute_gradient beyond this estimate")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--repeats", type=int, default=5, help="pass/check pairs for the fast-mode ratio")
    parser.add_argument("--against-pass", action="store_true", help="only the fast-mode ratio to one pass")
    args = parser.parse_args(argv)
    _warm_up()
    methods = ("compute_gradient", "full", "fast", "shape-only")
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs; times after import and a warm-up call")
    if args.against_pass:
        _print_against_pass(args.only, args.repeats)
        return 0
    print()
    print("| case | method | seconds | vs compute_gradient | forward calls | backward calls | peak memory | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        baseline: float | None = None
        estimated = False
        for method in methods:
            row = _measure(case, method, args.limit)
            if method == "compute_gradient":
                baseline = row.seconds if row.seconds is not None else row.estimate
                estimated = row.seconds is None
            seconds = f"{row.seconds:.3f}" if row.seconds is not None else row.note
            ratio = ""
            if baseline and row.seconds and method != "compute_gradient":
                ratio = f"{'~' if estimated else ''}{baseline / row.seconds:,.0f}x faster"
            print(
                f"| {row.case} | {method} | {seconds} | {ratio} | {row.forward} | {row.backward} | "
                f"{row.memory_mb:.0f} MB | {row.verdict} |",
                flush=True,
            )
    _print_against_pass(args.only, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
