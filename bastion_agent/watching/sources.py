"""When to look again: inotify through watchfiles (the ``watch`` extra), or a plain timer.

A source only says *when* the watcher should take a snapshot
(``snapshot.py`` says *what* changed). ``Polling`` wakes every
``[watch] poll_seconds``; ``Inotify`` wakes when the kernel reports an event
under the root, and also every ``SAFETY_SECONDS``, so an event lost to a
full inotify queue (thousands of files at once) is still seen.
"""

from __future__ import annotations

import threading
from pathlib import Path

from bastion_agent.core.extras import optional

SAFETY_SECONDS = 60.0


class Polling:
    """Wake every ``interval`` seconds, or at once when ``stop`` is set."""

    name = "polling"

    def __init__(self, root: Path, interval: float, stop: threading.Event):
        self.root, self.interval, self.stop = root, interval, stop

    def wait(self, timeout: float | None = None) -> None:
        self.stop.wait(self.interval if timeout is None else min(timeout, self.interval))

    def close(self) -> None:
        pass


class Inotify:
    """Wake on an inotify event under ``root`` (a background thread reads watchfiles' generator)."""

    name = "inotify"

    def __init__(self, module, root: Path, stop: threading.Event):
        self.root, self.stop = root, stop
        self._closed = threading.Event()  # ends the reading thread alone (``stop`` is the watcher's)
        self._dirty = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(module, root), daemon=True, name="watch-inotify")
        self._thread.start()

    def _read(self, module, root: Path) -> None:
        """Feed ``_dirty`` until stopped; a watch that ends (the root deleted, made again) is started again."""
        while not (self.stop.is_set() or self._closed.is_set()):
            try:
                for _ in module.watch(root, watch_filter=None, debounce=50, step=50, stop_event=self._closed,
                                      rust_timeout=1000, yield_on_timeout=False, raise_interrupt=False,
                                      ignore_permission_denied=True):
                    self._dirty.set()
            except Exception:  # the root vanished, or the watch failed: look, then try again in a second
                pass
            self._dirty.set()
            self._closed.wait(1.0)

    def wait(self, timeout: float | None = None) -> None:
        """Until an event, ``timeout`` or ``SAFETY_SECONDS``; a second at a time, so a stop is seen at once."""
        left = SAFETY_SECONDS if timeout is None else min(timeout, SAFETY_SECONDS)
        while left > 0 and not self.stop.is_set():
            if self._dirty.wait(min(1.0, left)):
                break
            left -= 1.0
        self._dirty.clear()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)


def open_source(root: Path, poll_seconds: float, stop: threading.Event, polling: bool = False):
    """Inotify when watchfiles is installed (and ``polling`` not asked for), else ``Polling``."""
    module = None if polling else optional("watchfiles")
    if module is None:
        return Polling(root, poll_seconds, stop)
    return Inotify(module, root, stop)
