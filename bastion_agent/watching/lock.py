"""One watcher per output folder: ``OUT/watch.lock``, held with ``flock`` and naming its pid.

Two watchers on one folder would run the same stages on the same store at
once. The lock is an advisory ``flock`` on a private file: the kernel drops it
when the process ends, however it ends (``kill -9`` included), so a stale
file never blocks a restart. The file holds the holder's pid, which ``status``
shows, and which a second ``watch`` names when it refuses to start.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bastion_agent.core.errors import StoreError
from bastion_agent.core.layout import PRIVATE_FILE_MODE

LOCK_FILE = "watch.lock"


def lock_path(out: Path) -> Path:
    return Path(out) / LOCK_FILE


class WatchLock:
    """The held lock; ``release()`` (or leaving the ``with``) lets the next watcher start."""

    def __init__(self, out: Path):
        self.path = lock_path(out)
        self._fd: int | None = None

    def __enter__(self) -> "WatchLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise StoreError(f"another watcher{who} already keeps {self.path.parent} current; "
                             "stop it first, or give this one another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def holder(out: Path) -> int | None:
    """The pid of the running watcher of ``out``, or None when no process holds the lock."""
    try:
        fd = os.open(lock_path(out), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or -1  # held: running (pid unknown only while it is being written)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
