"""Who may search what: group names, the manifest's ``[access]`` settings, and the visibility rule.

Every document carries a set of groups (its labels, given at sanitize from
the manifest's rules or the file system); every caller of a search is either
*every group* (``None``: the one ``BASTION_SERVE_TOKEN``, a local user
without ``[access] local_groups``) or a frozenset of group names. A caller
sees a document iff the two sets share a name; a document with no group is
seen only by a caller with every group (fail closed: a label that could not
be given hides the document instead of showing it to everyone).

Group names are plain identifiers (``GROUP_RE``), never paths or raw data,
so a label can be written to the sanitized listing, vectors.db, the
central index and an audit line without saying anything about a file. This
module is the base that the manifest, the tokens file, sanitize, search,
serve and the central index share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from bastion_agent.core.globs import GlobSet

GROUP_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
GROUP_RULE = "lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters"


def is_group_name(name) -> bool:
    return isinstance(name, str) and GROUP_RE.fullmatch(name) is not None


def validate_group(name) -> str:
    """``name`` when it is a valid group name, else ``ValueError`` with one line saying what is allowed."""
    if not is_group_name(name):
        raise ValueError(f"group names are {GROUP_RULE} (e.g. \"hr\", \"eng-staff\"); got {name!r}")
    return name


def validate_groups(names: Iterable) -> tuple[str, ...]:
    """Valid group names, sorted and without repeats (``ValueError`` at the first bad one)."""
    return tuple(sorted({validate_group(name) for name in names}))


def parse_group_list(text: str) -> frozenset:
    """``"hr,staff"`` (a command line's ``--groups``) as a set of valid names; empty items are refused."""
    names = [part.strip() for part in text.split(",")]
    return frozenset(validate_groups(names))


def can_see(caller: frozenset | None, document_groups: Iterable[str]) -> bool:
    """Whether a caller (None: every group) may see a document labelled ``document_groups``."""
    if caller is None:
        return True
    return not caller.isdisjoint(document_groups)


def visible_paths(caller: frozenset | None, paths: list[str], path_groups, document_groups=()) -> list[str]:
    """The paths of a document that a caller may see: those whose own groups it shares.

    A window whose text several documents share (equal sanitized texts are
    one document) carries every path; a ``public`` caller must not learn
    that the same form also sits at ``hr/dismissals/...``. ``path_groups``
    is aligned with ``paths``; when it is not (a store embedded before paths
    had their own groups), each path has the document's groups, as before,
    until the next embed copies them from the sanitized listing.
    """
    return [paths[position] for position in visible_positions(caller, paths, path_groups, document_groups)]


def visible_positions(caller: frozenset | None, paths: list, path_groups, document_groups=()) -> list[int]:
    """The positions in ``paths`` of those a caller may see (``visible_paths``), for what is kept per path beside them."""
    if caller is None:
        return list(range(len(paths)))
    if not isinstance(path_groups, list) or len(path_groups) != len(paths):
        return list(range(len(paths))) if can_see(caller, document_groups) else []
    return [position for position, groups in enumerate(path_groups)
            if isinstance(groups, list) and can_see(caller, groups)]


def caller_key(caller: frozenset | None) -> tuple | None:
    """A hashable, ordered form of a caller's groups (None stays None)."""
    return None if caller is None else tuple(sorted(caller))


@dataclass(frozen=True)
class AccessRule:
    """``[[access.rules]]``: documents at these paths (globs from the source root) get these groups."""

    paths: tuple[str, ...]
    groups: tuple[str, ...]

    @property
    def globs(self) -> GlobSet:
        return GlobSet(self.paths, "access.rules")


@dataclass(frozen=True)
class AccessSettings:
    """``[access]`` and ``[source] groups_from_permissions``: how documents are labelled, and what the local user sees."""

    default: tuple[str, ...] = ()
    rules: tuple[AccessRule, ...] = ()
    local_groups: frozenset | None = None  # None: the CLI search and stdio MCP see every group
    from_permissions: bool = False
