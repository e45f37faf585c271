"""Collection cost against the size of the tree: ``gradcheck list`` of a big tree and of its one module.

    python benchmarks/bench_collect.py [--modules N] [--repeat N]

A temporary tree holds N modules (default 2,000) without custom gradients,
a third of them mentioning ``Layer`` and ``custom_gradient`` in a comment and
a tenth importing each other, beside one module with a custom gradient.
Each run is a fresh ``gradcheck list`` from the command line, start-up
included:

- ``list ops.py``: the one module;
- ``list .``: the whole tree, walked (read, not imported).

The two are run in turn, ``--repeat`` times (rotating which goes first), and
the table shows the median wall-clock seconds of each and their ratio. The
one-minute load average before each round is printed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CUSTOM = """import tensorflow as tf


@tf.custom_gradient
def square(x):
    def grad(dy):
        return 2.0 * x * dy
    return x * x, grad
"""


def plain_module(index: int) -> str:
    """A module without custom gradients; some mention the markers in comments, some import others."""
    lines = [f'"""Module {index}: ordinary code."""', "import math", ""]
    if index % 3 == 0:
        lines.insert(1, "# a Layer subclass used to call tf.custom_gradient here; it moved")
    if index % 10 == 0 and index:
        lines.insert(2, f"from pkg{(index - 1) // 100} import mod_{index - 1:04d}")
    lines += [f"class Thing{index}:", "    def value(self):", f"        return math.sqrt({index})", ""]
    lines += [f"def helper_{index}(x):", "    return x + 1", ""]
    return "\n".join(lines)


def make_tree(root: Path, modules: int) -> Path:
    """The tree: ``pkgK/mod_NNNN.py`` in folders of 100, and ``ops.py`` with the one custom gradient."""
    for index in range(modules):
        folder = root / f"pkg{index // 100}"
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
        (folder / f"mod_{index:04d}.py").write_text(plain_module(index), encoding="utf-8")
    ops = root / "ops.py"
    ops.write_text(CUSTOM, encoding="utf-8")
    (root / "gradcheck.toml").write_text("[functions.square]\ninputs = { x = [3] }\n", encoding="utf-8")
    return ops


def timed(args: list[str], cwd: Path) -> float:
    environ = dict(os.environ, PYTHONPATH=str(REPO), CI="1", NO_COLOR="1")
    started = time.perf_counter()
    process = subprocess.run(
        [sys.executable, "-m", "gradcheck", "list", *args], cwd=cwd, env=environ, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if process.returncode != 0 or "ops.py::square" not in process.stdout:
        raise SystemExit(f"gradcheck list {' '.join(args)} failed ({process.returncode}):\n{process.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        make_tree(root, args.modules)
        runs: dict[str, list[float]] = {"one": [], "tree": []}
        timed(["ops.py"], root)  # warm the file cache and the interpreter's imports once
        for round_ in range(args.repeat):
            load = os.getloadavg()[0]
            order = [("one", ["ops.py"]), ("tree", ["."])]
            if round_ % 2:
                order.reverse()
            for name, command in order:
                runs[name].append(timed(command, root))
            print(f"round {round_ + 1}: load {load:.2f}, one {runs['one'][-1]:.2f}s, tree {runs['tree'][-1]:.2f}s")
        one, tree = statistics.median(runs["one"]), statistics.median(runs["tree"])
        print()
        print("| run | median s |")
        print("|---|---|")
        print(f"| `gradcheck list ops.py` | {one:.2f} |")
        print(f"| `gradcheck list .` ({args.modules} modules + ops.py) | {tree:.2f} |")
        print(f"| ratio | {tree / one:.2f}x |")


if __name__ == "__main__":
    main()
