r"""Every copy goes: once a value is found, its other occurrences are removed too.

A token redacted where it is assigned (``api_key = "X"``) is often pasted
elsewhere without its key: ``print("X")`` on the next line, ``docker login
-p X`` in the how-to beside ``deploy.toml``. No detector sees those copies,
since their context is gone; the value itself is the evidence. So the values
a sanitizer found (``found_values``) are searched for everywhere: in the same
text (``Sanitizer.redact_found``) and in the other texts of the sweep that
the value's own readers may read (the ``sanitize`` stage), each copy replaced
by the placeholder of the rule that found the value.

Which values travel. A short or plain value found everywhere would shred
text (a PIN ``4821`` in a table of figures, ``production`` in prose), so a
value is copied only when it has at least ``MIN_LENGTH`` (8) characters and
two kinds of character (lower case, upper case, digit, symbol), or at least
``MIN_PLAIN`` (20) characters of any kind, or is a number of at least
``MIN_DIGITS`` (8) digits found by a rule for personal numbers (an SSN, an
account number: a bare copy of a labelled column's value is the same
person's); never when it spans lines, and never above ``MAX_LENGTH`` (256:
a key block is found by its own armour).

Whole words only. A copy is a match that no word character (``\w``) touches
on either side: ``X!`` found in one file leaves ``X!Ops`` alone, since
taking a piece out of a longer word both shreds it and says where the value
sits inside it.

Transformed copies. A reader undoes some writings of a value at a glance,
so each value is also looked for as it is written upper-cased or
lower-cased, percent-encoded (``%40`` for ``@``, ``+`` for a space),
JSON-escaped (``\"``, ``\\``, ``\/``, ``\u00e9``), split over lines (one
line break, with its indentation, a trailing backslash or a string
concatenation, inside the value), and, for a number, with its digits
grouped otherwise (``123-45-6789``, ``123 45 6789``, ``123456789``).

Cost. All values (and their writings) are searched at once with one
regular expression built as a radix trie (a branch per first character,
shared prefixes merged), so a text is read once whatever the number of
values, plus once more as a view with its line breaks removed when it has
any: linear in the folder's size. The values are raw secrets: they live in
memory and in the private map inside ``extract/``, never elsewhere.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

from bastion_agent.sanitizing.normalise import View, _Builder

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 2

MIN_LENGTH = 8
MIN_PLAIN = 20
MIN_DIGITS = 8
MAX_LENGTH = 256
WORD = re.compile(r"\w")
# Rules whose values are personal numbers: a bare copy of one (without its label) is still the number.
NUMBER_RULES = frozenset({"us-ssn", "us-ssn-labelled", "ssn-column", "account-column", "card-column",
                          "id-number-column", "iban", "card-number", "de-tax-id", "uk-national-insurance"})
NUMBER = re.compile(r"\d(?:[\d \-.]*\d)?")
# A line break inside a value as writers leave it: indentation, a trailing backslash, or a string
# closed, concatenated and opened again ("abc" +\n "def", 'abc' .\n 'def').
LINE_BREAK = re.compile(r"""(["'])[ \t]*[+.]?[ \t]*\r?\n[ \t]*(?:[+.][ \t]*)?\1|[ \t]*\\?[ \t]*\r?\n[ \t]*""")


def eligible(value: str, rule: str | None = None) -> bool:
    """Is this found value distinctive enough to be removed wherever it occurs?"""
    if not MIN_LENGTH <= len(value) <= MAX_LENGTH or "\n" in value or "\r" in value:
        return False
    if value.startswith("[REDACTED:"):
        return False
    if rule in NUMBER_RULES and NUMBER.fullmatch(value) and sum(ch.isdigit() for ch in value) >= MIN_DIGITS:
        return True
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
        if eligible(value, finding.rule):
            values.setdefault(value, finding.rule)
    return values


def writings(value: str) -> set[str]:
    """The ways a reader would still recognise ``value`` at a glance (itself included)."""
    forms = {value, value.upper(), value.lower()}
    for safe in ("", "/", "-_.!~*'()"):
        forms.add(quote(value, safe=safe))
        forms.add(quote_plus(value, safe=safe))
    escaped = json.dumps(value)[1:-1]
    forms.update({escaped, escaped.replace("/", "\\/"), json.dumps(value, ensure_ascii=False)[1:-1]})
    if NUMBER.fullmatch(value):
        forms.update(_number_writings(value))
    return {form for form in forms if form}


def _number_writings(value: str) -> set[str]:
    """A number's digits, and the same digits grouped as written elsewhere (``-``, space, ``.``, none)."""
    digits = re.sub(r"\D", "", value)
    if len(digits) < MIN_DIGITS:
        return set()
    groupings = [re.split(r"[ \-.]+", value)]
    if len(digits) == 9:
        groupings.append([digits[:3], digits[3:5], digits[5:]])  # an SSN's 3-2-4
    groupings.append([digits[i:i + 4] for i in range(0, len(digits), 4)])
    return {separator.join(groups) for groups in groupings for separator in ("", "-", " ", ".")}


class Matcher:
    """All the values and their writings at once: one regular expression, a radix trie of them (longest first)."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)
        self.forms: dict[str, str] = {}  # a writing -> the value it writes
        for value in sorted(self.values):
            for form in writings(value):
                self.forms.setdefault(form, value)
        self.regex = (re.compile(r"(?<!\w)" + trie_pattern(sorted(self.forms)) + r"(?!\w)")
                      if self.forms else None)

    def finditer(self, text: str):
        """``(start, end, rule id)`` of every occurrence, left to right, not overlapping."""
        for start, end, value in self._spans(text):
            yield start, end, self.values[value]

    def present(self, text: str) -> set[str]:
        """The values that occur in ``text`` (in any of their writings)."""
        return {value for _, _, value in self._spans(text)}

    def _spans(self, text: str):
        """``(start, end, value)``: the plain pass, then copies split over lines (from the joined view)."""
        if self.regex is None:
            return
        taken = []
        for match in self.regex.finditer(text):
            taken.append((match.start(), match.end()))
            yield match.start(), match.end(), self.forms[match.group(0)]
        view = _without_line_breaks(text) if "\n" in text else None
        if view is None:
            return
        for match in self.regex.finditer(view.text):
            start, end = view.span(match.start(), match.end())
            if "\n" in text[start:end] and not any(s < end and start < e for s, e in taken):
                yield start, end, self.forms[match.group(0)]


def _without_line_breaks(text: str) -> View | None:
    """``text`` with each line break (and what writers put around one inside a value) removed."""
    out = _Builder()
    copied = 0
    for match in LINE_BREAK.finditer(text):
        out.copy(text, copied, match.start())
        out.replace("", match.start(), match.end())
        copied = match.end()
    if copied == 0:
        return None
    out.copy(text, copied, len(text))
    return out.view()


def occurrences(text: str, values: dict[str, str]) -> list[tuple[int, int, str]]:
    """Every occurrence of the values in ``text``: ``(start, end, rule id)``, sorted."""
    return sorted(Matcher(values).finditer(text))


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


def lead_pass(lead: str, padding: str, word: str, *, tab: bool) -> re.Pattern:
    """One pass of a scan for cells or markers: a ``lead`` pattern, ``padding`` (a class with ``*``), then
    ``word`` as the group ``word``.

    When the lead is a tab it is padding too, so a pass failing at one tab of a long run would be tried again
    at every later tab, each reading the rest of the run (quadratic). That pass reads the padding possessively
    and makes the word optional: a match without its word consumes the run, and the caller drops it
    (``match.start("word") < 0``). A word can only start where the padding ends, so the kept matches are the
    same as without the change."""
    if tab:
        return re.compile(f"{lead}{padding}+(?P<word>{word})?")
    return re.compile(f"{lead}{padding}(?P<word>{word})")
