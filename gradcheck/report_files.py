"""Writing report files: checked before the run, written whole or not at all, as any file the user writes.

A report path that cannot be written is a usage error found before the first
check (so a long run never ends in a crash with nothing written), and each
report goes through a temporary file beside it and one rename. A path that
is not a file to replace (a character device, a FIFO, a pipe such as bash's
``>(...)`` or ``/dev/stdout``) is written to directly, as the shell's ``>``
would: a rename would put a regular file in its place (as root, ``-o
/dev/null`` would replace the machine's ``/dev/null``; a FIFO's reader would
get nothing).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from gradcheck.errors import UsageError


class ReportPathError(UsageError):
    """A report file (``-o``, or ``output`` in the config) cannot be written there."""


def _nearest_existing(folder: Path) -> Path:
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def _kind(path: Path) -> str:
    """``file`` (absent, or a regular file or symlink to replace), ``stream`` (written in place) or ``block``."""
    try:
        mode = os.stat(path).st_mode  # through symlinks: /dev/stdout and the like are links
    except OSError:
        return "file"
    if stat.S_ISBLK(mode):
        return "block"
    # A FIFO, and a pipe or socket behind /dev/fd/N (bash's process substitution >(...)) or /dev/stdout.
    streamed = stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    return "stream" if streamed else "file"


def check_writable(path: Path) -> None:
    """Raise :class:`ReportPathError` unless a report can be written at ``path``; write nothing.

    The path must not be a folder, the nearest existing folder above it must
    be a folder (not a file), and a file must be creatable there: that is
    tried with a temporary file, removed at once, since permission bits do not
    tell (root, read-only mounts, ``/proc``).
    """
    if path.is_dir():
        raise ReportPathError(f"{path}: is a folder; give -o a file name (the report's own)")
    kind = _kind(path)
    if kind == "block":
        raise ReportPathError(f"{path}: is a block device (a disk); give -o a file name")
    if kind == "stream":
        if not os.access(path, os.W_OK):
            raise ReportPathError(f"{path}: cannot write the report there: {os.strerror(errno.EACCES)}")
        return
    folder = _nearest_existing(path.parent if str(path.parent) else Path("."))
    if not folder.is_dir():
        raise ReportPathError(f"{path}: {folder} is not a folder, so the report cannot be written there")
    try:
        handle, probe = tempfile.mkstemp(prefix=".gradcheck-probe.", dir=folder)
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise ReportPathError(f"{path}: cannot write the report in {folder}: {reason}") from None
    os.close(handle)
    os.unlink(probe)


def _umask() -> int:
    # Linux tells it without changing it (another thread may be creating a file meanwhile).
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    # Elsewhere the only way to read the umask is to set it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_report(path: Path, text: str) -> None:
    """Write a report at ``path``: a device or pipe in place, as ``>`` would (a FIFO waits for its
    reader); anything else :func:`write_atomically`."""
    if _kind(path) != "stream":
        write_atomically(path, text)
        return
    # backslashreplace: as write_atomically, a report must never fail on a lone surrogate.
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as stream:
        stream.write(text)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    An interrupted or failing write leaves any earlier file at ``path`` whole.
    The temporary file is made beside ``path`` as given (not beside a
    symlink's target), so the rename never crosses a device, and a symlink at
    ``path`` is replaced by the report, as ``mv`` would. The file gets the
    permissions of any new file (``0666`` less the umask), not ``mkstemp``'s
    ``0600``.
    """
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(handle, 0o666 & ~_umask())
        # backslashreplace: a reporter lets no lone surrogate through, but a report must never fail on one.
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
