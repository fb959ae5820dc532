"""Paths the scanner has already redacted, remembered while a watcher runs.

A watch cycle's sanitize lists every document again, each of its paths
through the path scanner (``Sanitizer.redact_path``): on a folder of a
thousand files that was the largest part of a cycle that changed one file.
``redact_path`` is a function of the settings, the active rules and the path
alone, so while ``remembered()`` is open (the watcher holds it for its whole
run) each answer is kept, under a digest of the settings and rules that gave
it. Kept in this process's memory only (raw paths, like the watcher's
snapshots; never written), at most ``MAX_PATHS`` of them, and forgotten when
the last holder closes it. Outside a watcher nothing is remembered, so a
sweep, or a test that changes a detector, never meets an old answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
import threading

MAX_PATHS = 200_000  # past this, everything is forgotten and kept again from the next path

_lock = threading.Lock()
_holders = 0
_paths: dict[tuple[bytes, str], str] = {}


@contextlib.contextmanager
def remembered():
    """Remember redacted paths until the block ends (and every other holder's block too)."""
    global _holders
    with _lock:
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if not _holders:
                _paths.clear()


def active() -> bool:
    return _holders > 0


def key_of(settings, rules) -> bytes | None:
    """What the answers depend on, as a digest; None (nothing remembered) when it cannot be made."""
    try:
        return hashlib.sha256(pickle.dumps((settings, rules), protocol=pickle.HIGHEST_PROTOCOL)).digest()
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def recall(key: bytes | None, path: str) -> str | None:
    if key is None or not _holders:
        return None
    return _paths.get((key, path))


def keep(key: bytes | None, path: str, redacted: str) -> None:
    if key is None or not _holders:
        return
    with _lock:
        if len(_paths) >= MAX_PATHS:
            _paths.clear()
        _paths[(key, path)] = redacted
