"""Every copy goes: once a value is found, its other occurrences are removed too.

A token redacted where it is assigned (``api_key = "X"``) is often pasted
elsewhere without its key: ``print("X")`` on the next line, ``docker login
-p X`` in the how-to beside ``deploy.toml``. No detector sees those copies,
since their context is gone; the value itself is the evidence. So the values
a sanitizer found (``found_values``) are searched for everywhere: in the same
text (``Sanitizer.redact_found``) and in every other text of the sweep (the
``sanitize`` stage), each copy replaced by the placeholder of the rule that
found the value.

Which values travel. A short or plain value found everywhere would shred
text (a PIN ``4821`` in a table of figures, ``production`` in prose), so a
value is copied only when it has at least ``MIN_LENGTH`` (8) characters and
two kinds of character (lower case, upper case, digit, symbol), or at least
``MIN_PLAIN`` (20) characters of any kind; never when it spans lines, and
never above ``MAX_LENGTH`` (256: a key block is found by its own armour).

Cost. All values are searched at once with one regular expression built as a
radix trie of the values (a branch per first character, shared prefixes
merged), so a text is read once whatever the number of values: linear in the
folder's size. The values are raw secrets: they live in memory and in the
private map inside ``extract/``, never elsewhere.
"""

from __future__ import annotations

import re

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 1

MIN_LENGTH = 8
MIN_PLAIN = 20
MAX_LENGTH = 256
WORD = re.compile(r"\w")


def eligible(value: str) -> bool:
    """Is this found value distinctive enough to be removed wherever it occurs?"""
    if not MIN_LENGTH <= len(value) <= MAX_LENGTH or "\n" in value or "\r" in value:
        return False
    if value.startswith("[REDACTED:"):
        return False
    if len(value.strip()) != len(value) and len(value) < MIN_PLAIN:
        return False
    if len(value) >= MIN_PLAIN:
        return True
    kinds = (any(ch.islower() for ch in value) + any(ch.isupper() for ch in value)
             + any(ch.isdigit() for ch in value) + any(not ch.isalnum() and not ch.isspace() for ch in value))
    return kinds >= 2


def found_values(text: str, findings) -> dict[str, str]:
    """value -> rule id of the findings (merged, so not overlapping) whose value may travel."""
    values: dict[str, str] = {}
    for finding in findings:
        value = text[finding.start:finding.end]
        if eligible(value):
            values.setdefault(value, finding.rule)
    return values


class Matcher:
    """All the values at once: one regular expression, a radix trie of them (longest first)."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)
        self.regex = re.compile(trie_pattern(sorted(self.values))) if self.values else None

    def finditer(self, text: str):
        """``(start, end, rule id)`` of every occurrence, left to right, not overlapping."""
        if self.regex is None:
            return
        for match in self.regex.finditer(text):
            value = match.group(0)
            yield match.start(), match.end(), self.values[value]

    def present(self, text: str) -> set[str]:
        """The values that occur in ``text``."""
        return {text[s:e] for s, e, _ in self.finditer(text)}


def occurrences(text: str, values: dict[str, str]) -> list[tuple[int, int, str]]:
    """Every occurrence of the values in ``text``: ``(start, end, rule id)``."""
    return list(Matcher(values).finditer(text))


def trie_pattern(values: list[str]) -> str:
    """A pattern matching exactly the values, the longest at each position first (no backtracking blow-up)."""
    trie: dict = {}
    for value in values:
        node = trie
        for ch in value:
            node = node.setdefault(ch, {})
        node[""] = {}
    return _node_pattern(trie)


def _node_pattern(node: dict) -> str:
    ending = "" in node
    branches = []
    for ch in sorted(k for k in node if k):
        label, child = ch, node[ch]
        while len(child) == 1 and "" not in child:  # a chain: one literal (keeps the pattern shallow)
            (next_ch, next_child), = child.items()
            label += next_ch
            child = next_child
        branches.append(re.escape(label) + _node_pattern(child))
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 and not ending else "(?:" + "|".join(branches) + ")"
    return "(?:" + body + ")?" if ending else body
