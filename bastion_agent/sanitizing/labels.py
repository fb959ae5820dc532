"""Access labels: the groups of each sanitized document, computed where the raw paths are known.

Sanitize is the last stage that sees a document's raw paths; only the group
names it computes here go forward (to the sanitized listing, then
vectors.db and the central index), never the paths or anything about the
files. The rules, in order, for each raw path:

1. the first ``[[access.rules]]`` whose ``paths`` glob matches the path
   gives its ``groups`` (rules always win);
2. else, with ``[source] groups_from_permissions``, the file's mode: a file
   others may read gets ``[access] default``; a file its group may read but
   others may not gets that group's name; a file only its owner may read,
   a link, or a file that cannot be stat'ed gets no group;
3. else ``[access] default``.

A document with several paths gets the union of its paths' groups. A group
name taken from the file system must be a valid group name that the
sanitizer's path rules leave unchanged (a group named after a person or an
account number is a name that must not leave); otherwise it is dropped and
counted, never written, and the file gets no group from it. No group means
fail closed: only a caller with every group sees the document.
"""

from __future__ import annotations

import grp
import os
import stat
from dataclasses import dataclass, field
from typing import Callable, Iterable

from bastion_agent.core.access import AccessSettings, is_group_name
from bastion_agent.core.confine import SourceRoot


@dataclass
class LabelCounts:
    """What labelling met, as counts only (a dropped group's name is never recorded)."""

    groups_dropped: int = 0  # paths whose file-system group was refused (invalid or not a safe name)
    without_group: int = 0  # documents that got no group (seen only by a caller with every group)


@dataclass
class Labeller:
    """Groups per raw path and per document, for one sanitize run.

    ``clean_name`` is the sanitizer's treatment of a path name (what a
    listing would show); a file-system group name must come out of it
    unchanged.
    """

    settings: AccessSettings
    root: str | os.PathLike | None
    clean_name: Callable[[str], str]
    counts: LabelCounts = field(default_factory=LabelCounts)
    _globs: list = field(default_factory=list, init=False)
    _names: dict = field(default_factory=dict, init=False)

    def __post_init__(self):
        self._globs = [(rule.globs, rule.groups) for rule in self.settings.rules]

    def document_groups(self, raw_paths: Iterable[str], source: SourceRoot | None) -> list[str]:
        """The sorted union of the groups of a document's raw paths."""
        return self.labelled(raw_paths, source)[0]

    def labelled(self, raw_paths: Iterable[str], source: SourceRoot | None) -> tuple[list[str], dict[str, tuple]]:
        """The document's groups (sorted union) and each raw path's own, each path looked at once.

        A path's own groups decide who sees that path in a hit: a window
        whose text is at ``public/form.txt`` and ``hr/dismissals/...`` shows
        a ``public`` caller the first path only.
        """
        groups: set[str] = set()
        by_path = {}
        for path in raw_paths:
            by_path[path] = tuple(self.path_groups(path, source))
            groups.update(by_path[path])
        if not groups:
            self.counts.without_group += 1
        return sorted(groups), by_path

    def path_groups(self, path: str, source: SourceRoot | None) -> tuple[str, ...]:
        for globs, groups in self._globs:
            if globs.matches(path):
                return groups
        if self.settings.from_permissions:
            return self._permission_groups(path, source)
        return self.settings.default

    def _permission_groups(self, path: str, source: SourceRoot | None) -> tuple[str, ...]:
        if source is None:
            return ()
        try:
            info = source.lstat([part for part in path.split("/") if part])
        except (OSError, IndexError):
            return ()  # gone since extract, or unreadable: fail closed
        if not stat.S_ISREG(info.st_mode):
            return ()  # a link: its own mode says nothing about the file it names
        if info.st_mode & stat.S_IROTH:
            return self.settings.default
        if info.st_mode & stat.S_IRGRP:
            name = self._group_name(info.st_gid)
            if name is None:
                self.counts.groups_dropped += 1
                return ()
            return (name,)
        return ()

    def _group_name(self, gid: int) -> str | None:
        """The group's name when it may leave as a label, else None (cached per gid)."""
        if gid not in self._names:
            try:
                name = grp.getgrgid(gid).gr_name
            except KeyError:
                name = None
            if name is not None and (not is_group_name(name) or self.clean_name(name) != name):
                name = None
            self._names[gid] = name
        return self._names[gid]


def open_root(settings: AccessSettings, root) -> SourceRoot | None:
    """The source root held open for permission labels, or None when they are off or the root is gone."""
    if not settings.from_permissions or root is None:
        return None
    try:
        return SourceRoot(root)
    except OSError:
        return None
