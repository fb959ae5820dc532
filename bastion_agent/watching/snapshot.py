"""What the source folder looks like, from ``stat`` alone, and what changed between two looks.

The watcher never trusts an event for *what* changed: inotify drops events
when its queue overflows, and polling has none. Both only say *when* to look;
a look is a ``Snapshot`` (each selected file's size, modification time,
inode and change time, by its path relative to the root), and a cycle's
counts come from the difference of two snapshots. A snapshot reads no file's
bytes, so looking at 10,000 files costs 10,000 ``stat`` calls and nothing else.

A cycle reads only the files whose entry changed (the others keep what
extract made of them), so an entry must change whenever a read could give
something else. The change time (``st_ctime_ns``) does: the kernel sets it
on every write, and also on what leaves the bytes alone but not what a read
gives (``chmod``, ``chown``), and no program can set it back, unlike the
modification time (``touch -d``).

Raw paths stay in memory: a snapshot is never written, since a file name
can itself be personal data; the cycle line and the state file carry counts.
The walk never follows a folder link (a link loop costs nothing), and skips
the output folder and folders the manifest excludes, as extract does.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from bastion_agent.core.globs import GlobSet
from bastion_agent.extracting.walk import MAX_DEPTH  # as deep as extract reads: a file it reads is watched


class Entry(NamedTuple):
    """One selected file as ``stat`` sees it: enough to tell a change, a rename and a removal apart.

    A named tuple, not a dataclass: two snapshots of 10,000 files are compared
    at every look, and tuples compare in C."""

    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int = 0  # any change of the file or of who may read it; not part of a rename's identity


@dataclass
class Changes:
    """What differs between two snapshots, by relative path (in memory only)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path), same bytes

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.renamed)

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "changed": len(self.changed), "renamed": len(self.renamed),
                "removed": len(self.removed)}


class Snapshot(dict):
    """``{relative path: Entry}`` of every selected file under the root."""

    def diff(self, before: "Snapshot") -> Changes:
        """What changed from ``before`` to this snapshot; a path gone and one come with the same
        inode, size and modification time is a rename (``mv`` keeps all three)."""
        changes = Changes()
        gone = {path: entry for path, entry in before.items() if path not in self}
        come = {path: entry for path, entry in self.items() if path not in before}
        by_identity = {(entry.inode, entry.size, entry.mtime_ns): path for path, entry in gone.items()}
        for path in sorted(come):
            old = by_identity.pop((come[path].inode, come[path].size, come[path].mtime_ns), None)
            if old is not None and old in gone:
                changes.renamed.append((old, path))
                del gone[old]
            else:
                changes.added.append(path)
        changes.removed = sorted(gone)
        changes.changed = sorted(path for path, entry in self.items() if path in before and before[path] != entry)
        return changes


class Selection:
    """The manifest's globs, with each path's answer remembered: a look at an unchanged folder then costs
    one ``lstat`` per file and no pattern matching (the globs ran a dozen regular expressions per path)."""

    MAX_REMEMBERED = 1_000_000

    def __init__(self, include: GlobSet, exclude: GlobSet):
        self.include, self.exclude = include, exclude
        self._folders: dict[str, bool] = {}
        self._files: dict[str, bool] = {}

    def enters(self, path: str) -> bool:
        found = self._folders.get(path)
        if found is None:
            found = self._folders[path] = not self.exclude.matches(path)
        return found

    def selects(self, path: str) -> bool:
        found = self._files.get(path)
        if found is None:
            if len(self._files) > self.MAX_REMEMBERED:
                self._files.clear()
            found = self._files[path] = self.include.matches(path) and not self.exclude.matches(path)
        return found


def scan(root: Path, include: GlobSet, exclude: GlobSet, out: Path | None = None,
         selection: Selection | None = None) -> Snapshot:
    """The snapshot of ``root`` now; a folder that vanished or cannot be read is simply empty.

    ``selection`` (a ``Selection`` kept between looks) remembers which paths the globs take."""
    snapshot = Snapshot()
    selection = selection or Selection(include, exclude)
    out_id = _identity(out)
    pending: list[tuple[str, str, int]] = [(str(root), "", 0)]
    while pending:
        folder, rel, depth = pending.pop()
        try:
            with os.scandir(folder) as entries:
                listed = list(entries)
        except OSError:
            continue  # removed meanwhile, or unreadable: extract reports it, the next look sees it again
        for item in listed:
            path = f"{rel}/{item.name}" if rel else item.name
            _look(item, path, depth, selection, out_id, snapshot, pending)
    return snapshot


def _look(item: os.DirEntry, path: str, depth: int, selection: Selection, out_id, snapshot: Snapshot,
          pending: list) -> None:
    """Add one directory entry to the snapshot, or queue the folder it is."""
    try:
        info = item.stat(follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        if depth < MAX_DEPTH and selection.enters(path) and (info.st_dev, info.st_ino) != out_id:
            pending.append((item.path, path, depth + 1))
        return
    if not selection.selects(path):
        return
    if stat.S_ISLNK(info.st_mode):  # a file link: its target's change is the change (a loop: the link itself)
        try:
            target = os.stat(item.path)
            info = target if stat.S_ISREG(target.st_mode) else info
        except OSError:
            pass
    snapshot[path] = Entry(info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns)


def _identity(folder: Path | None):
    try:
        info = os.stat(folder) if folder is not None else None
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if info else None
