"""Copies within readers: a value found in one text is removed from another only if its readers may read the first.

Removing a copy says where the value sits: a public file of guesses that
comes out with ``[REDACTED:secret-assignment]`` on one line has told its
author which guess is the HR password, and a count of findings that grows
with the copies tells the same without any text. So the sanitize stage
removes a value found in text A from text B only when everyone who may
read B may also read A; otherwise B is judged on its own text, as if A did
not exist.

With the visibility rule of ``core/access.py`` (a caller sees a document
iff they share a group; no group: only a caller with every group), B's
readers are a subset of A's exactly when B's groups are a subset of A's:
a caller holding just one of B's groups must also find it among A's, and a
text with no group is read by the every-group caller alone, who reads
everything. A text's groups are those of its raw paths (their union), as
the labeller gives them.

With one group set for every text (the default: no ``[access]``, or one
default and no rules), every value reaches every text, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bastion_agent.sanitizing import copies


def may_take_from(target: frozenset, source: frozenset) -> bool:
    """Whether a value found in a text labelled ``source`` may be removed from a text labelled ``target``."""
    return target <= source


@dataclass
class CopySources:
    """The values found in the sweep, by the group set of the text that found them; a matcher per target group set."""

    by_groups: dict[frozenset, dict[str, str]] = field(default_factory=dict)
    _matchers: dict[frozenset, copies.Matcher | None] = field(default_factory=dict)

    def add(self, groups: frozenset, values: dict[str, str]) -> None:
        found = self.by_groups.setdefault(frozenset(groups), {})
        for value, rule in values.items():
            found.setdefault(value, rule)
        self._matchers.clear()

    def values_for(self, target: frozenset) -> dict[str, str]:
        """value -> rule id of every value a text labelled ``target`` may lose."""
        values: dict[str, str] = {}
        for source in sorted(self.by_groups, key=sorted):
            if may_take_from(frozenset(target), source):
                for value, rule in self.by_groups[source].items():
                    values.setdefault(value, rule)
        return values

    def matcher_for(self, target: frozenset) -> copies.Matcher | None:
        """One matcher per group set of the targets (built once; None when no value may reach them)."""
        target = frozenset(target)
        if target not in self._matchers:
            values = self.values_for(target)
            self._matchers[target] = copies.Matcher(values) if values else None
        return self._matchers[target]

    def every_value(self) -> dict[str, str]:
        """Every value of the sweep, whatever its readers (for checks that only refuse, never reveal)."""
        values: dict[str, str] = {}
        for found in self.by_groups.values():
            for value, rule in found.items():
                values.setdefault(value, rule)
        return values
