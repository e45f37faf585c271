"""``-j 2`` against its own limit: two independent ``gradcheck run`` processes side by side.

    python benchmarks/bench_jobs.py [--repeat N] [--jobs N] [--tf-threads] [--auto] [DIR]

DIR (default: ``benchmarks/jobs_suite``, 16 correct custom gradients of
matmuls, elementwise functions and batched bilinear forms, a fraction of a
second to a second each) is checked, each time in a fresh ``gradcheck run``
from the command line, start-up included:

- ``-j 1``: one worker;
- ``-j N`` (default 2);
- the limit: N independent ``gradcheck run`` processes started together,
  each on its share of DIR's modules (sorted, cut into N consecutive parts),
  timed until the last one ends.

With ``--tf-threads`` a fourth run is ``-j N`` with TensorFlow's own thread
pools in every worker (one thread per core each, as a lone process has)
instead of gradcheck's share of the cores per worker.

The runs are run in turn, ``--repeat`` times (rotating which goes first, as
the machine's load drifts), and the table shows the median wall-clock
seconds, the speed-up over ``-j 1`` and, in the last line, ``-j N``'s
speed-up as a share of the limit's. The one-minute load average before each
round is printed too: on a shared machine the numbers mean little without it.
With ``--auto`` a further run is ``-j auto``, which must never be slower
than ``-j 1`` (it starts a second worker only when the work ahead outlasts
a worker's start-up).

Every run must exit 0 (every function of the suite passes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SUITE = REPO / "benchmarks" / "jobs_suite"


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gradcheck", "run", *args, "-q"]


def _environment(threads: int | None = None) -> dict[str, str]:
    # This checkout's gradcheck, whatever is installed; no progress bar, no colour.
    environ = dict(os.environ, PYTHONPATH=str(REPO), CI="1", NO_COLOR="1")
    if threads is not None:  # set by the user: gradcheck keeps it in every worker
        for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            environ[name] = str(threads)
    return environ


def timed(commands: list[list[str]], threads: int | None = None) -> float:
    """Seconds from starting ``commands`` together until the last one ends; each must exit 0."""
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            command, env=_environment(threads), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for command in commands
    ]
    outputs = [process.communicate()[0] for process in processes]
    seconds = time.perf_counter() - started
    for command, process, output in zip(commands, processes, outputs):
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {process.returncode}:\n{output}")
    return seconds


def parts(suite: Path, count: int) -> list[list[str]]:
    """The suite's modules, sorted, cut into ``count`` consecutive parts of (nearly) equal length."""
    modules = sorted(str(path) for path in suite.rglob("*.py"))
    size, extra = divmod(len(modules), count)
    cut: list[list[str]] = []
    start = 0
    for index in range(count):
        end = start + size + (index < extra)
        cut.append(modules[start:end])
        start = end
    return cut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", nargs="?", type=Path, default=DEFAULT_SUITE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tf-threads", action="store_true", help="also -j N with TensorFlow's own thread pools")
    parser.add_argument("--auto", action="store_true", help="also -j auto")
    arguments = parser.parse_args()
    suite, jobs = arguments.suite, arguments.jobs
    runs = {
        "-j 1": [_command(str(suite), "-j", "1")],
        f"-j {jobs}": [_command(str(suite), "-j", str(jobs))],
        f"{jobs} processes": [_command(*part, "-j", "1") for part in parts(suite, jobs)],
    }
    tf_threads = f"-j {jobs}, TF's thread pools"
    if arguments.tf_threads:
        runs[tf_threads] = runs[f"-j {jobs}"]
    if arguments.auto:
        runs["-j auto"] = [_command(str(suite), "-j", "auto")]
    names = list(runs)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    print(f"{suite}: {len(os.sched_getaffinity(0))} usable cores", file=sys.stderr)
    for round_ in range(arguments.repeat):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        load = os.getloadavg()[0]
        for name in order:
            cores = len(os.sched_getaffinity(0)) if name == tf_threads else None
            seconds[name].append(timed(runs[name], cores))
        line = ", ".join(f"{name} {seconds[name][-1]:.1f} s" for name in names)
        print(f"round {round_ + 1}: load {load:.1f} before; {line}", file=sys.stderr)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print("| run | median s | all runs s | speed-up over -j 1 |")
    print("|---|---:|---|---:|")
    for name in names:
        all_runs = ", ".join(f"{value:.1f}" for value in seconds[name])
        print(f"| {name} | {median[name]:.1f} | {all_runs} | {median['-j 1'] / median[name]:.2f}x |")
    share = median[f"{jobs} processes"] / median[f"-j {jobs}"]
    print(f"\n-j {jobs} reaches {share:.0%} of the speed-up of {jobs} independent processes")


if __name__ == "__main__":
    main()
