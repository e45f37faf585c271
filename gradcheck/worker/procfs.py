"""What Linux's ``/proc`` says about processes and memory, and killing a set of processes.

Both sides use it: the parent to bound a worker's memory and stop it with
everything below it, the worker to end the processes a check left after it.
Elsewhere than Linux ``/proc`` is missing, and each answer says "unknown".
"""

from __future__ import annotations

import contextlib
import os
import signal


def resident_megabytes(pid: int, field: str = "VmRSS") -> float | None:
    """The resident memory of process ``pid`` in MB, where ``/proc`` tells it (Linux).

    ``field``: ``VmRSS`` (now) or ``VmHWM`` (the peak so far).
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), read from ``/proc`` (Linux; elsewhere none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                parent = int(stat.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        child = queue.pop()
        if child not in found:
            found.append(child)
            queue.extend(children.get(child, []))
    return found


def kill_processes(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that is still there."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def default_max_memory() -> int | None:
    """Half the machine's memory in MB (where ``/proc/meminfo`` tells it), else no bound."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024 // 2
    except (OSError, ValueError, IndexError):
        return None
    return None
