"""The sanitize stage: remove secrets and personal data before text moves on.

It reads only the extract store and writes the sanitized store, the only
text the later stages (chunk, embed, search, serve) ever see. Each finding is
replaced by a typed placeholder, ``[REDACTED:<rule-id>]``; the result depends
only on the text and the settings, so the same document always sanitizes to
the same text and keeps its content-addressed chunk ids.

How the scan stays fast as rules are added (see ``rules.py``): one keyword
scan (a literal-led pass per first character of a keyword, so bounded by the
alphabet, not by the rules) finds every keyword of every rule, and a rule
runs only in a window around its keywords; one pass finds long runs of token
characters for the keyword-less token shapes, one pass finds runs of digits
for phone, card and SSN shapes; only IBANs and IP addresses scan the whole
text, from a character the engine skips to quickly. Text with nothing to
find comes out byte for byte unchanged.

Overlapping findings are merged into one placeholder named after the finding
that starts first (the longest one on a tie, then the earlier rule in the
table), so no part of either survives.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from bastion_agent.core import layout as store
from bastion_agent.core.errors import ManifestError, StoreError
from bastion_agent.core.progress import Progress, escape_name
from bastion_agent.core.records import ListingRow
from bastion_agent.sanitizing import columns, context, copies, names
from bastion_agent.sanitizing.normalise import joined_view, junctions, lookalike_view
from bastion_agent.sanitizing.pages import FORM_FEED, page_map
from bastion_agent.sanitizing.rules import (
    CATEGORIES,
    RULES,
    RULES_BY_ID,
    SCOPES,
    SECRET,
    Rule,
)
from bastion_agent.sanitizing.validators import CHECKS, is_placeholder, shannon_entropy

PLACEHOLDER = "[REDACTED:{}]"
SETTINGS_KEYS = ("disable", "allow", "allow_patterns", "rules")
CUSTOM_RULE_KEYS = ("id", "name", "pattern", "keywords", "entropy")
RULE_ID = re.compile(r"[a-z0-9][a-z0-9\-]{0,62}")
DOC_ID = re.compile(r"[0-9a-f]{64}")

# Windows around a keyword: from the start of its line (at most this far
# back) to the end of the next line (at most this far ahead, then on to the
# next whitespace so that no token is cut in two).
WINDOW_BACK = 512
WINDOW_AHEAD = 2048
TOKEN_RUN = re.compile(r"[A-Za-z0-9+/=_.~\-]{20,}")
NUMBER_RUN = re.compile(r"\d(?:[ \-.()/]{0,2}\d){6,}")
WHITESPACE = re.compile(r"\s")
# Views of a path in which its separators read as spaces (see Sanitizer.redact_path).
PATH_BOUNDARY_VIEWS = (
    str.maketrans("/_", "  "),
    str.maketrans("/_.", "   "),
    str.maketrans("/_.-", "    "),
)
# The e-mail reader writes each attached file as "[attachment: NAME]". NAME is
# a file name, where "_" and "-" separate words: scan_219-09-9999.pdf or
# alice@corp.com-cv.pdf hid their SSN and address from the text's detectors,
# so the name inside a label is also scanned as a path is (redact_path).
ATTACHMENT_MARK = "[attachment: "
ATTACHMENT_LABEL = re.compile(r"\[attachment: ([^\]\n]{1,1024})\]")
SHORT_TEXT = 4096  # below this, the keyword scan first checks which first characters occur


# --- settings -------------------------------------------------------------------


@dataclass(frozen=True)
class SanitizeSettings:
    """The manifest's ``[sanitize]`` table, validated.

    ``disable``: rule ids, categories or kinds ("secret", "personal") to turn
    off. ``allow``: exact strings never redacted. ``allow_patterns``: regular
    expressions; a finding that matches one in full is kept. ``rules``: custom
    detectors (category "custom").
    """

    disable: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    allow_patterns: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = field(default=())


def parse_settings(raw: dict) -> SanitizeSettings:
    """Validate ``[sanitize]``; raise ``ManifestError`` with one line naming the key."""
    if not isinstance(raw, dict):
        raise ManifestError(f"[sanitize] must be a table; got {type(raw).__name__}")
    for key in raw:
        if key not in SETTINGS_KEYS:
            raise ManifestError(f"[sanitize] unknown key {key!r}; allowed: {', '.join(SETTINGS_KEYS)}")
    custom = tuple(_custom_rule(index, item) for index, item in enumerate(_list(raw, "rules", dict, "tables")))
    seen: set[str] = set()
    for index, rule in enumerate(custom):
        if rule.id in RULES_BY_ID or rule.id in seen:
            raise ManifestError(f"[sanitize] rules[{index}].id {rule.id!r} is already used by another rule; choose another")
        seen.add(rule.id)
    names = set(RULES_BY_ID) | set(CATEGORIES) | {"secret", "personal"} | seen
    disable = tuple(_list(raw, "disable", str, "strings"))
    for index, name in enumerate(disable):
        if name not in names:
            raise ManifestError(
                f"[sanitize] disable[{index}] {name!r} is not a rule id, a category or a kind; categories: "
                f"{', '.join(CATEGORIES)}; kinds: secret, personal (rule ids: see docs/sanitize.md)"
            )
    patterns = tuple(_list(raw, "allow_patterns", str, "strings"))
    for index, pattern in enumerate(patterns):
        _compile(pattern, f"allow_patterns[{index}]")
    return SanitizeSettings(
        disable=disable,
        allow=tuple(_list(raw, "allow", str, "strings")),
        allow_patterns=patterns,
        rules=custom,
    )


def _list(raw: dict, key: str, kind: type, what: str) -> list:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, kind) for item in value):
        raise ManifestError(f"[sanitize] {key} must be a list of {what}; got {value!r}")
    if kind is str and any(not item for item in value):
        raise ManifestError(f"[sanitize] {key} must not contain empty strings")
    return value


def _compile(pattern: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise ManifestError(f"[sanitize] {where} is not a valid regular expression: {exc}") from None


def _custom_rule(index: int, item: dict) -> Rule:
    where = f"rules[{index}]"
    for key in item:
        if key not in CUSTOM_RULE_KEYS:
            raise ManifestError(f"[sanitize] {where} unknown key {key!r}; allowed: {', '.join(CUSTOM_RULE_KEYS)}")
    name = item.get("id", item.get("name"))
    if not isinstance(name, str) or not name.strip():
        raise ManifestError(f"[sanitize] {where} needs an id (or name): a short string such as \"employee-id\"")
    rule_id = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    if not RULE_ID.fullmatch(rule_id):
        raise ManifestError(f"[sanitize] {where}.id {name!r} must give letters, digits and dashes (at most 63)")
    pattern = item.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ManifestError(f"[sanitize] {where}.pattern is missing (a regular expression)")
    compiled = _compile(pattern, f"{where}.pattern")
    if compiled.fullmatch(""):
        raise ManifestError(f"[sanitize] {where}.pattern matches the empty string; it must match at least one character")
    keywords = item.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
        raise ManifestError(f"[sanitize] {where}.keywords must be a list of non-empty strings; got {keywords!r}")
    entropy = item.get("entropy")
    if entropy is not None and (isinstance(entropy, bool) or not isinstance(entropy, (int, float)) or entropy < 0):
        raise ManifestError(f"[sanitize] {where}.entropy must be a number >= 0 (bits per character); got {entropy!r}")
    return Rule(
        id=rule_id,
        category="custom",
        pattern=pattern,
        keywords=tuple(sorted({k.lower() for k in keywords})),
        entropy=float(entropy) if entropy is not None else None,
    )


# --- the scanner ------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Finding:
    """A span to replace: ``text[start:end]`` found by rule ``rule``."""

    start: int
    end: int
    order: int
    rule: str


@dataclass(frozen=True)
class _Active:
    order: int
    rule: Rule
    regex: re.Pattern
    has_secret_group: bool
    placeholder_check: bool


def _check_validators(rules: Iterable[Rule]) -> None:
    """Every ``validator`` a rule names exists: a misspelt name must stop the sanitizer, not disable the check."""
    for rule in rules:
        if rule.validator and rule.validator not in CHECKS:
            raise ManifestError(f"sanitize rule {rule.id!r} names the validator {rule.validator!r}, which does not exist;"
                                f" validators: {', '.join(sorted(CHECKS))}")


class Sanitizer:
    """Finds and replaces secrets and personal data under one set of settings."""

    def __init__(self, settings: SanitizeSettings | None = None):
        self.settings = settings or SanitizeSettings()
        off = set(self.settings.disable)
        chosen = [
            rule for rule in (*RULES, *self.settings.rules)
            if rule.id not in off and rule.category not in off and rule.kind not in off
        ]
        _check_validators(chosen)
        self.rules = [
            _Active(order, rule, regex := re.compile(rule.pattern), "secret" in regex.groupindex,
                    rule.kind == SECRET and rule.category not in ("private-key", "custom"))
            for order, rule in enumerate(chosen)
        ]
        self._by_scope: dict[str, list[_Active]] = {scope: [] for scope in SCOPES}
        for active in self.rules:
            self._by_scope[active.rule.effective_scope].append(active)
        self._rule_category = {active.order: active.rule.category for active in self.rules}
        self._keyword_rules = _keyword_index(self.rules)
        self._triggers = _trigger_regexes(self._keyword_rules)
        self._triggers_nocase: list[tuple[str, re.Pattern]] | None = None
        self._allow = frozenset(self.settings.allow)
        self._allow_patterns = [re.compile(p) for p in self.settings.allow_patterns]
        self._context_order = next((a.order for a in self._by_scope["context"]), None)

    # The public API ------------------------------------------------------------

    def redact(self, text: str) -> tuple[str, Counter]:
        """The text with every finding replaced, and the number of placeholders per rule id."""
        clean, counts, _ = self.redact_found(text)
        return clean, counts

    def redact_found(self, text: str) -> tuple[str, Counter, dict[str, str]]:
        """``redact``, and the values it found that are worth removing elsewhere (value -> rule id).

        Every other occurrence of a found value in the same text goes too
        (``copies.py``): ``api_key = "X"`` then ``print("X")``. The values
        are raw secrets: the stage keeps them inside the extract store.
        """
        findings = merge(self.findings(text))
        if not findings:
            return text, Counter(), {}
        found = copies.found_values(text, findings)
        if found:
            findings = merge(findings + [Finding(s, e, -1, rule) for s, e, rule in copies.occurrences(text, found)])
        return _replace(text, findings) + (found,)

    def redact_path(self, path: str) -> str:
        """A path name as users may see it (search hits, serve).

        In a path ``/ - _ .`` separate words as spaces do in text: besides
        the path itself, views in which they are spaces are scanned
        (character for character, so a finding's span is the same in the
        path), and the findings of all views are replaced together. So
        ``scan_219-09-9999.pdf``, ``n/+41 44 668 18 11 call log.txt`` and
        ``password=NamePw998877.txt`` lose their number and password.
        """
        findings = _keep_extension(path, merge(self.findings(path) + self._name_findings(path)))
        if not findings:
            return path
        pieces, position = [], 0
        for finding in findings:
            pieces.append(path[position:finding.start])
            pieces.append(PLACEHOLDER.format(finding.rule))
            position = finding.end
        pieces.append(path[position:])
        return "".join(pieces)

    def _name_findings(self, name: str) -> list[Finding]:
        """The findings of the views of a name in which ``/ _ . -`` read as spaces (same spans)."""
        found: list[Finding] = []
        for view in {name.translate(table) for table in PATH_BOUNDARY_VIEWS} - {name}:
            found.extend(self.findings(view))
        return found

    def findings(self, text: str) -> list[Finding]:
        """Every accepted finding, possibly overlapping, in no particular order.

        Three views are scanned: the text itself; its look-alike view
        (``normalise.lookalike_view``: NFKC, invisible characters removed,
        homoglyphs folded, character references and percent escapes
        decoded), whose findings are mapped back to the span of the
        original they came from; and, around each line break that may split
        a value, the two lines joined (``normalise.junctions``), keeping only
        findings that cross the break and whose first half was not already
        a finding (the value of ``password = x`` does not swallow the next
        line's first word). Plain ASCII text skips the look-alike view.
        """
        if not text:
            return []
        lowered = text.lower()  # one lower-cased copy for the keyword scan and the three context passes
        found = self._scan(text, lowered)
        view = lookalike_view(text)
        if view is not None:
            for first, last in view.changed_windows():
                for finding in self._scan(view.text[first:last]):
                    start, end = view.span(finding.start + first, finding.end + first)
                    found.append(Finding(start, end, finding.order, finding.rule))
        if "\n" in text:
            found.extend(self._joined_findings(text, found))
        found.extend(self._context_findings(text, lowered))
        if ATTACHMENT_MARK in text:
            for label in ATTACHMENT_LABEL.finditer(text):
                offset = label.start(1)
                found.extend(Finding(f.start + offset, f.end + offset, f.order, f.rule)
                             for f in self._name_findings(label.group(1)))
        found.extend(self._structure(text, columns.column_findings(text, self._structure_orders(), lowered)))
        found.extend(self._structure(text, names.name_findings(text, self._structure_orders(), lowered)))
        return found

    def _context_findings(self, text: str, lowered: str | None = None) -> list[Finding]:
        """The values of credential-named keys, whole, to their syntax's own end (``context.py``)."""
        if self._context_order is None:
            return []
        order = self._context_order
        return [Finding(s, e, order, "credential-value") for s, e in context.scan(text, lowered) if not self._allowed(text[s:e])]

    def _structure_orders(self) -> dict[str, int]:
        """Rule id -> order of the enabled structure rules (cells by their header, marked names)."""
        orders = getattr(self, "_structure_cache", None)
        if orders is None:
            orders = {a.rule.id: a.order for a in self.rules if a.rule.effective_scope == "structure"}
            self._structure_cache = orders
        return orders

    def _structure(self, text: str, spans: list[tuple[int, int, str]]) -> list[Finding]:
        """Findings of a structure scanner's (start, end, rule id) spans, the allowlist applied."""
        orders = self._structure_orders()
        return [Finding(start, end, orders[rule], rule) for start, end, rule in spans
                if rule in orders and not self._allowed(text[start:end])]

    def _joined_findings(self, text: str, found: list[Finding]) -> list[Finding]:
        spans = junctions(text)
        if not spans:
            return []
        covered = sorted((f.start, f.end) for f in found)
        extra: list[Finding] = []
        for first, last, group in _junction_windows(text, spans):
            view = joined_view(text[first:last], [(s - first, e - first, j) for s, e, j in group])
            for finding in self._scan(view.text):
                if self._rule_category[finding.order] in JOIN_SKIPS:
                    continue
                start, end = view.span(finding.start, finding.end)
                start, end = start + first, end + first
                for s, e, _ in group:
                    if start < s and end > e and not _covered(covered, s - 1):
                        extra.append(Finding(start, end, finding.order, finding.rule))
                        break
        return extra

    def _scan(self, text: str, lowered: str | None = None) -> list[Finding]:
        """The findings of the rules in ``text`` as it is (``lowered``: ``text.lower()``, when at hand)."""
        found: list[Finding] = []
        if not text:
            return found
        hits = self._keyword_hits(text, lowered)
        for active, positions in hits.items():
            regex, anchor = active.regex, active.rule.anchor
            if active.rule.effective_scope == "document":
                found.extend(self._accept(active, text, regex.finditer(text)))
            elif anchor == "keyword":
                found.extend(self._accept(active, text, _matches_at(regex, text, positions)))
            elif anchor == "line":
                found.extend(self._accept(active, text, _matches_at(regex, text, _line_starts(text, positions))))
            else:
                for start, end in _windows(text, positions):
                    found.extend(self._accept(active, text, regex.finditer(text, start, end)))
        run_rules = self._by_scope["run"]
        if run_rules:
            for run in TOKEN_RUN.finditer(text):
                for active in run_rules:
                    found.extend(self._accept(active, text, active.regex.finditer(text, run.start(), run.end())))
        number_rules = self._by_scope["number"]
        if number_rules:
            for run in NUMBER_RUN.finditer(text):
                start = run.start() - (run.start() > 0 and text[run.start() - 1] in "+(")
                end = min(len(text), run.end() + 2)  # the rules' look-aheads see what follows
                for active in number_rules:
                    found.extend(self._accept(active, text, active.regex.finditer(text, start, end)))
        for active in self._by_scope["text"]:
            found.extend(self._accept(active, text, active.regex.finditer(text)))
        return found

    # Internals ------------------------------------------------------------------

    def _keyword_hits(self, text: str, lowered: str | None = None) -> dict[_Active, list[int]]:
        """Where each keyword rule's keywords occur, sorted, for all rules at once."""
        if not self._triggers:
            return {}
        lowered = text.lower() if lowered is None else lowered
        triggers = self._triggers
        if len(lowered) != len(text):  # a character whose lower case is longer: keep offsets exact
            lowered = text
            if self._triggers_nocase is None:
                self._triggers_nocase = [(c, re.compile(t.pattern, re.IGNORECASE)) for c, t in self._triggers]
            triggers = self._triggers_nocase
        elif len(lowered) < SHORT_TEXT:  # a path, a line: skip the passes whose first character is absent
            present = set(lowered)
            triggers = [(c, t) for c, t in triggers if c in present]
        hits: dict[_Active, list[int]] = {}
        index = self._keyword_rules
        for _, trigger in triggers:
            for match in trigger.finditer(lowered):
                keyword = (match.group(0) + match.group(1)).lower()
                for active in index.get(keyword, ()):
                    hits.setdefault(active, []).append(match.start())
        for positions in hits.values():
            positions.sort()
        return hits

    def _accept(self, active: _Active, text: str, matches: Iterable[re.Match]) -> Iterable[Finding]:
        """The findings among a rule's matches (entropy, placeholder, validator, allowlist)."""
        rule = active.rule
        check = CHECKS[rule.validator] if rule.validator else None
        for match in matches:
            if active.has_secret_group and match.start("secret") >= 0:
                s, e = match.span("secret")
            else:
                s, e = match.span()
            if e <= s:
                continue
            if rule.entropy is not None and shannon_entropy(text[s:e]) < rule.entropy:
                continue
            if active.placeholder_check and is_placeholder(text[s:e]):
                continue
            spans = [(s, e)]
            if check is not None:
                verdict = check(match, s, e)
                if verdict is False or verdict is None:
                    continue
                if verdict is not True:
                    spans = verdict
            for s, e in spans:
                if e > s and not self._allowed(text[s:e]):
                    yield Finding(s, e, active.order, rule.id)

    def _allowed(self, value: str) -> bool:
        return value in self._allow or any(p.fullmatch(value) for p in self._allow_patterns)


# Joined lines are searched for values split in two (tokens, keys, numbers),
# not for the keyed and free shapes, which would read the next line's first
# word as the rest of a value.
JOIN_SKIPS = frozenset({"assignment", "high-entropy", "url-credentials"})
JUNCTION_CONTEXT = 256  # characters scanned on either side of a line break that may split a value


def _junction_windows(text: str, spans: list[tuple[int, int, str]]):
    """Merged windows around the junctions (their two lines, at most JUNCTION_CONTEXT
    characters each side): (start, end, the junctions inside)."""
    windows: list[tuple[int, int, list]] = []
    for span in spans:
        first = max(0, span[0] - JUNCTION_CONTEXT)
        first = text.rfind("\n", first, span[0]) + 1 or first
        last = min(len(text), span[1] + JUNCTION_CONTEXT)
        line_end = text.find("\n", span[1], last)
        last = line_end if line_end != -1 else last
        if windows and first <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], last), windows[-1][2] + [span])
        else:
            windows.append((first, last, [span]))
    return windows


def _covered(spans: list[tuple[int, int]], position: int) -> bool:
    """Does one of the (start, end) spans, sorted by start, cover ``position``?"""
    index = bisect.bisect_right(spans, (position, 1 << 62))
    for start, end in reversed(spans[max(0, index - 64):index]):  # findings are short: look at the last few
        if end > position:
            return True
    return False


def _keep_extension(path: str, findings: list[Finding]) -> list[Finding]:
    """A value read to the end of a name (``password=X.txt``) stops before the name's extension."""
    dot = path.rfind(".")
    if dot <= path.rfind("/") or len(path) - dot > 6:
        return findings
    return [Finding(f.start, dot, f.order, f.rule) if f.start < dot < f.end == len(path) else f for f in findings]


def _replace(text: str, findings: list[Finding]) -> tuple[str, Counter]:
    """The text with each (merged) finding replaced by its placeholder, and the count per rule id.

    A page break inside a finding stays, after its placeholder: the page
    map (``pages.py``) counts form feeds in the sanitized text.
    """
    counts: Counter = Counter()
    pieces, position = [], 0
    for finding in findings:
        pieces.append(text[position:finding.start])
        pieces.append(PLACEHOLDER.format(finding.rule) + FORM_FEED * text.count(FORM_FEED, finding.start, finding.end))
        counts[finding.rule] += 1
        position = finding.end
    pieces.append(text[position:])
    return "".join(pieces), counts


def merge(findings: list[Finding]) -> list[Finding]:
    """Resolve overlaps: earliest start wins, then the longest, then the earlier rule; spans are merged."""
    merged: list[Finding] = []
    for finding in sorted(findings, key=lambda f: (f.start, -f.end, f.order)):
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            if finding.end > last.end:
                merged[-1] = Finding(last.start, finding.end, last.order, last.rule)
            continue
        merged.append(finding)
    return merged


def _keyword_index(rules: list[_Active]) -> dict[str, list[_Active]]:
    """keyword -> the rules it triggers, including rules of keywords that are its prefixes.

    The keyword scan reports the longest keyword at each position; a shorter
    keyword that starts there too (``pass`` inside ``password``) is a prefix of it.
    """
    direct: dict[str, list[_Active]] = {}
    for active in rules:
        if active.rule.effective_scope in ("keyword", "document"):
            for keyword in active.rule.keywords:
                direct.setdefault(keyword.lower(), []).append(active)
    index = {}
    for keyword in direct:
        triggered = []
        for other, actives in direct.items():
            if keyword.startswith(other):
                triggered.extend(a for a in actives if a not in triggered)
        index[keyword] = sorted(triggered, key=lambda a: a.order)
    return index


def _trigger_regexes(index: dict[str, list[_Active]]) -> list[tuple[str, re.Pattern]]:
    """The keyword scan: one regular expression per first character of a keyword.

    Each is that character (a literal, which the engine skips to at memchr
    speed) followed by a look-ahead holding the trie of the keywords'
    remainders, so overlapping keywords are all found. The number of passes
    is bounded by the alphabet of the keywords' first characters, not by the
    number of rules.
    """
    trie: dict = {}
    for keyword in index:
        node = trie
        for ch in keyword:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        ending = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and not ending else "(?:" + "|".join(branches) + ")"
        return body + "?" if ending else body

    return [(first, re.compile(re.escape(first) + "(?=(" + build(child) + "))")) for first, child in sorted(trie.items())]


def _matches_at(regex: re.Pattern, text: str, positions: list[int]) -> Iterable[re.Match]:
    """The rule's match starting exactly at each position (once per position)."""
    done = -1
    for position in positions:
        if position <= done:
            continue
        match = regex.match(text, position)
        if match is not None:
            done = max(match.end() - 1, position)
            yield match
        else:
            done = position


def _windows(text: str, positions: list[int]) -> list[tuple[int, int]]:
    """Merged windows around keyword positions (see WINDOW_BACK / WINDOW_AHEAD).

    Every search for a line boundary is bounded, so thousands of keywords on
    one very long line cost no more than the line itself.
    """
    windows: list[tuple[int, int]] = []
    for position in positions:
        back = max(0, position - WINDOW_BACK)
        start = text.rfind("\n", back, position) + 1 or back
        limit = min(len(text), position + WINDOW_AHEAD)
        line_end = text.find("\n", position, limit)
        if line_end != -1:
            next_end = text.find("\n", line_end + 1, limit)
            end = limit if next_end == -1 else next_end
        else:
            end = limit
        if end == limit and limit < len(text):
            space = WHITESPACE.search(text, limit, limit + WINDOW_AHEAD)
            end = space.start() if space else min(len(text), limit + WINDOW_AHEAD)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], end))
        else:
            windows.append((start, end))
    return windows


def _line_starts(text: str, positions: list[int], reach: int = 4096) -> list[int]:
    """The start of each position's line, when it is at most ``reach`` characters back."""
    starts = []
    for position in positions:
        back = max(0, position - reach)
        newline = text.rfind("\n", back, position)
        if newline != -1 or back == 0:
            starts.append(newline + 1)
    return starts


@functools.lru_cache(maxsize=8)
def sanitizer_for(settings: SanitizeSettings | None) -> Sanitizer:
    """A shared sanitizer per settings (compiling the rules once)."""
    return Sanitizer(settings)


def sanitize_path(path: str, settings: SanitizeSettings | None) -> str:
    """A path name shown to users, through the same sanitizer as the text, then with its control
    characters escaped (a newline, ESC, a bidi control): sanitized first, on the name as decoded."""
    return escape_name(sanitizer_for(settings).redact_path(path))


def redact(text: str, settings: SanitizeSettings | None = None) -> str:
    """Convenience: the sanitized text alone."""
    return sanitizer_for(settings).redact(text)[0]


# --- the stage ----------------------------------------------------------------------
#
# Ids. A document's id (``doc``) is the sha256 of its sanitized text: nothing
# computed from unsanitized bytes leaves the extract store, so no hit, listing
# or table can be used to test guesses of what was redacted. The extract store
# keys its texts by the raw bytes' sha256 (its private "key"); this stage keeps
# a private map, ``extract/sanitized.jsonl``, from each key to the document it
# became, so an unchanged raw text is not sanitized again under the same
# sanitizer and settings, and so the stage knows which documents went stale.


SANITIZED_MAP = "sanitized.jsonl"
# Documents to erase from vectors.db and index/ (``embedding.erase``): the ids
# of documents that the current sanitizer superseded. Private like the map:
# an old id is the hash of text holding what the current sanitizer removes.
ERASE_LIST = "erase.jsonl"
# The modules whose code decides what sanitize removes: a change to any of them
# (or to the manifest's [sanitize] settings) sanitizes every text again.
SANITIZER_MODULES = ("sanitize", "rules", "validators", "context", "copies", "columns", "names")


@dataclass
class _Extracted:
    """One extract key (one raw content): its raw paths, the kind of the first, and its pages read by OCR."""

    paths: list[str]
    kind: str
    ocr_pages: list[int] | None = None  # None: not a paged document (a PDF or an image is)


@dataclass
class _Document:
    """One sanitized document: the raw paths of every key whose sanitized text it is."""

    raw_paths: set[str] = field(default_factory=set)
    kind_by_path: dict[str, str] = field(default_factory=dict)
    ocr_pages_by_path: dict[str, list[int] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class MapRow:
    """A line of the private ``extract/sanitized.jsonl``: what one extract key became."""

    key: str
    doc: str
    sanitizer: str
    findings: dict
    bytes_in: int
    # Raw values (private, like the whole map): those this text's own findings found, value -> rule
    # id, and those found in other texts of the sweep whose copies were removed here (copies.py).
    values: dict = field(default_factory=dict)
    copies: list = field(default_factory=list)


def map_path(layout) -> Path:
    return Path(layout.extract_dir) / SANITIZED_MAP


def read_map(layout) -> dict[str, MapRow]:
    """The private key -> document map of the last run ({} when missing or unreadable)."""
    try:
        rows = store.read_jsonl(map_path(layout))
        return {row["key"]: MapRow(**row) for row in rows}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def sanitizer_fingerprint(settings: SanitizeSettings) -> str:
    """A digest of the settings and the sanitizer's code: equal means the same text sanitizes the same."""
    import hashlib
    import importlib

    digest = hashlib.sha256(repr(settings).encode("utf-8"))
    for name in SANITIZER_MODULES:
        module = importlib.import_module(f"{__package__}.{name}")
        digest.update(b"\0" + Path(module.__file__).read_bytes())
    return digest.hexdigest()


def doc_id(clean_text: str) -> str:
    """A document's id: the lowercase hex sha256 of its sanitized text (UTF-8)."""
    import hashlib

    return hashlib.sha256(clean_text.encode("utf-8")).hexdigest()


def run(manifest, layout) -> dict:
    """Sanitize every extracted text into ``<out>/sanitized/<doc>.txt``; write the listing and summary."""
    from bastion_agent.core import legacy_ids
    from bastion_agent.core.budget import WorkerPool, budget_of

    extracted = _extracted_keys(layout)
    settings = getattr(manifest, "sanitize", None) or SanitizeSettings()
    sanitizer = sanitizer_for(settings)
    store.claim_out_dir(layout.root)
    store.ensure_private_dir(layout.sanitized_dir)
    store.remove_stale_temps(layout.sanitized_dir)
    store.remove_stale_temps(layout.root, ("sanitize.summary.json",))
    pool = WorkerPool(budget_of(getattr(manifest, "source", None)))
    failed: Counter = Counter()
    previous = read_map(layout)
    if not previous and legacy_ids.sanitized_store_is_legacy(layout):
        legacy_ids.announce("sanitize")
    fingerprint = sanitizer_fingerprint(settings)
    by_rule: Counter = Counter()
    documents: dict[str, _Document] = {}
    mapped: list[MapRow] = []
    kept: list[tuple[str, MapRow]] = []
    changed = bytes_in = reused = 0
    with Progress("sanitize", len(extracted), "docs") as progress, pool:
        for key in sorted(extracted):
            row = _reusable(previous.get(key), fingerprint, layout)
            if row is None:
                row = _sanitize_one(layout, (pool, settings), key, fingerprint)
            else:
                reused += 1
            if isinstance(row, str):  # over budget: fails closed, not indexed, counted
                failed[row] += max(1, len(extracted[key].paths))
                progress.advance()
                continue
            kept.append((key, row))
            progress.advance()
        kept, matcher = _apply_copies(layout, (pool, settings), fingerprint, kept, failed)
        for key, row in kept:
            mapped.append(row)
            files = max(1, len(extracted[key].paths))  # counted per file, never per distinct raw content
            by_rule.update({rule: count * files for rule, count in row.findings.items()})
            changed += files if row.findings else 0
            bytes_in += row.bytes_in
            document = documents.setdefault(row.doc, _Document())
            document.raw_paths.update(extracted[key].paths)
            document.kind_by_path.update((path, extracted[key].kind) for path in extracted[key].paths)
            document.ocr_pages_by_path.update((path, extracted[key].ocr_pages) for path in extracted[key].paths)
        superseded = _superseded(layout, (pool, settings), previous, extracted, mapped, fingerprint, set(documents))
    store.sync_to_disk()
    labeller = _labeller(manifest, sanitizer, matcher)
    rows, paths_redacted = _listing_rows(documents, sanitizer, matcher, labeller, layout)
    store.write_jsonl(layout.sanitized_listing, rows)
    # The erase list before the map: once the map is rewritten, nothing else remembers the old documents.
    write_erase_list(layout, (read_erase_list(layout) | superseded) - set(documents))
    store.write_jsonl(map_path(layout), [asdict(row) for row in mapped])
    removed = _remove_stale(layout, set(documents))
    bytes_out = sum(layout.doc_text_path(layout.sanitized_dir, doc).stat().st_size for doc in documents)
    categories: Counter = Counter()
    kinds: Counter = Counter()
    for rule_id, count in by_rule.items():
        rule = next((a.rule for a in sanitizer.rules if a.rule.id == rule_id), None)
        categories[rule.category if rule else "unknown"] += count
        kinds[rule.kind if rule else "unknown"] += count
    # Counts of files and of sanitized documents only: a count of distinct raw texts, or of those
    # reused by raw key, says which raw files are equal, and a raw byte total (even bytes_out, beside
    # the files' sizes) measures what was removed. Those figures stay in extract/ (write_figures).
    store.write_figures(layout, "sanitize", {"texts": len(extracted), "reused": reused,
                                             "bytes_in": bytes_in, "bytes_out": bytes_out})
    counts = {
        "documents": len(documents),
        "files": sum(max(1, len(item.paths)) for item in extracted.values()),
        "files_changed": changed,
        "findings": sum(by_rule.values()),
        "findings_by_rule": dict(sorted(by_rule.items())),
        "findings_by_category": dict(sorted(categories.items())),
        "findings_by_kind": dict(sorted(kinds.items())),
        "paths_redacted": paths_redacted,
        "groups_dropped": labeller.counts.groups_dropped,
        "documents_without_group": labeller.counts.without_group,
        "removed_stale": removed,
        "rules_active": len(sanitizer.rules),
        "skipped": sum(failed.values()),
        "skipped_by_reason": dict(sorted(failed.items())),
    }
    return store.write_summary(layout, "sanitize", counts, manifest.signature)


def erase_list_path(layout) -> Path:
    return Path(layout.extract_dir) / ERASE_LIST


def read_erase_list(layout) -> set[str]:
    """The superseded documents still to erase (``embedding.erase`` reads this through ``sanitized_store``)."""
    try:
        return {row["doc"] for row in store.read_jsonl(erase_list_path(layout)) if DOC_ID.fullmatch(row.get("doc", ""))}
    except FileNotFoundError:
        return set()
    except (OSError, ValueError, TypeError, AttributeError):
        raise StoreError(f"{erase_list_path(layout)} is unreadable: run sanitize again") from None


def write_erase_list(layout, docs: set[str]) -> None:
    """Keep the documents still to erase; no file when there are none."""
    path = erase_list_path(layout)
    if docs:
        store.write_jsonl(path, [{"doc": doc} for doc in sorted(docs)])
    elif path.exists():
        path.unlink()


def _superseded(layout, sanitizer, previous: dict[str, MapRow], extracted: dict, mapped: list[MapRow],
                fingerprint: str, current: set[str]) -> set[str]:
    """Last run's documents that another sanitizer made and the current one would not make again.

    An unchanged raw text (the same key) that now sanitizes to another
    document supersedes its old one (a new rule, an allow-list change, an
    upgrade): the old windows were computed from text the current sanitizer
    would not let out, so they are erased. A text that left (its file changed
    or removed) under another sanitizer has no new document to compare
    with: its old sanitized text is sanitized again, and erased when the
    current sanitizer would change it (or cannot say, over its budget).
    Documents of this run are never superseded.
    """
    now = {row.key: row.doc for row in mapped}
    superseded = set()
    for key, old in previous.items():
        if old.sanitizer == fingerprint or old.doc in current or not DOC_ID.fullmatch(old.doc):
            continue
        if key in extracted:
            if now.get(key) != old.doc:
                superseded.add(old.doc)
        elif old.doc not in superseded and _would_change(layout, sanitizer, old.doc):
            superseded.add(old.doc)
    return superseded


def _would_change(layout, sanitizer, doc: str) -> bool:
    """Whether the current sanitizer changes this sanitized text (True when it is gone or over budget)."""
    try:
        text = layout.doc_text_path(layout.sanitized_dir, doc).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True
    clean, _, _ = _redact_in_budget(*sanitizer, text)
    return clean != text


def _reusable(row: MapRow | None, fingerprint: str, layout) -> MapRow | None:
    """Last run's result for this key, when the same sanitizer made it and its text is still there."""
    if row is None or row.sanitizer != fingerprint or not DOC_ID.fullmatch(row.doc):
        return None
    if not layout.doc_text_path(layout.sanitized_dir, row.doc).is_file():
        return None
    return row


def _sanitize_one(layout, sanitizer: Sanitizer, key: str, fingerprint: str) -> MapRow:
    """Sanitize one extracted text, store it under its document id, and say what it became."""
    raw = _read_extracted(layout, key)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StoreError("a text in the extract store is not UTF-8: run extract again") from None
    clean, counts, values = _redact_in_budget(*sanitizer, text)
    if clean is None:
        return counts  # the reason it was not sanitized
    doc = doc_id(clean)
    _write_if_changed(layout.doc_text_path(layout.sanitized_dir, doc), clean.encode("utf-8"))
    return MapRow(key, doc, fingerprint, dict(sorted(counts.items())), len(raw), values)


def _apply_copies(layout, worker, fingerprint: str, kept: list, failed: Counter):
    """Remove, in every text of the sweep, the copies of values found in any of them.

    Each text's own sanitizing (``_sanitize_one``) already removed the copies
    of its own values; this pass gathers every text's values into one
    matcher (``copies.Matcher``: one pass per text whatever their number),
    finds which values of *other* texts each raw text holds, and replaces
    those in its sanitized text. A text whose stored result was made with
    another set of copies (a value appeared in, or left, some other file
    since) is sanitized again from its raw text, so a re-sweep that finds a
    value in a new file cleans the older documents that hold it.
    """
    values: dict[str, str] = {}
    for _, row in kept:
        for value, rule in row.values.items():
            values.setdefault(value, rule)
    matcher = copies.Matcher(values) if values else None
    result = []
    for key, row in kept:
        present: list[str] = []
        if matcher is not None:
            raw = _read_extracted(layout, key).decode("utf-8", "replace")
            present = sorted(matcher.present(raw) - set(row.values))
        if present == list(row.copies):
            result.append((key, row))
            continue
        if row.copies:  # made with other copies: start again from the raw text
            row = _sanitize_one(layout, worker, key, fingerprint)
            if isinstance(row, str):
                failed[row] += 1
                continue
            if not present:
                result.append((key, row))
                continue
        result.append((key, _with_copies(layout, row, {value: values[value] for value in present})))
    return result, matcher


def _with_copies(layout, row: MapRow, present: dict[str, str]) -> MapRow:
    """The row's sanitized text with the copies of ``present`` (values found elsewhere) replaced."""
    clean = layout.doc_text_path(layout.sanitized_dir, row.doc).read_bytes().decode("utf-8")
    found = [Finding(s, e, -1, rule) for s, e, rule in copies.occurrences(clean, present)]
    findings = dict(row.findings)
    if found:
        clean, counts = _replace(clean, merge(found))
        for rule, count in counts.items():
            findings[rule] = findings.get(rule, 0) + count
    doc = doc_id(clean)
    _write_if_changed(layout.doc_text_path(layout.sanitized_dir, doc), clean.encode("utf-8"))
    return MapRow(row.key, doc, row.sanitizer, dict(sorted(findings.items())), row.bytes_in, row.values,
                  sorted(present))


def _redact_in_budget(pool, settings: SanitizeSettings, text: str):
    """``(clean, counts, values)`` from a budgeted worker, or ``(None, reason, {})`` when it overran.

    A custom pattern that backtracks without end (``(a+)+$``) is stopped by
    the time budget like a runaway reader; the reason names the rule that
    was running, so the manifest's author knows which pattern to fix.
    """
    import pickle

    from bastion_agent.core.budget import Call

    data = text.encode("utf-8")
    answer = pool.run(Call("redact", (pickle.dumps(settings), data), len(data)))
    if answer.reason is not None:
        rule = answer.progress
        return None, f"{answer.reason} (rule {rule})" if rule and rule != "built-in" else answer.reason, {}
    if "error" in answer.header:
        raise StoreError(f"sanitize failed on a text of the extract store ({answer.header['error']}); run it again")
    values = answer.header.get("values", {})
    return answer.data.decode("utf-8"), Counter(answer.header.get("findings", {})), values


_WORKER_SANITIZERS: dict[bytes, "Sanitizer"] = {}


def budget_task_redact(note, settings_blob: bytes, data: bytes):
    """The worker's side of ``_redact_in_budget``: redact, saying which custom rule is running."""
    import hashlib
    import pickle

    digest = hashlib.sha256(settings_blob).digest()
    sanitizer = _WORKER_SANITIZERS.get(digest)
    if sanitizer is None:
        _WORKER_SANITIZERS.clear()
        sanitizer = _WORKER_SANITIZERS[digest] = Sanitizer(pickle.loads(settings_blob))
    accept, running = sanitizer._accept, [None]

    def noted(active, text, matches):  # the matching itself happens while _accept iterates
        name = active.rule.id if active.rule.category == "custom" else "built-in"
        if name != running[0]:
            running[0] = name
            note(name)
        return accept(active, text, matches)

    sanitizer._accept = noted
    try:
        clean, counts, values = sanitizer.redact_found(data.decode("utf-8"))
    finally:
        sanitizer._accept = accept
    # values: raw, handed back to the stage through the worker's pipe, kept in the private map
    return {"findings": dict(counts), "values": values}, clean.encode("utf-8")


def _labeller(manifest, sanitizer: Sanitizer, matcher):
    """The access labeller of this run: the manifest's rules, and the path rules a group name must pass."""
    from bastion_agent.core.access import AccessSettings
    from bastion_agent.sanitizing.labels import Labeller

    settings = getattr(manifest, "access", None) or AccessSettings()
    source = getattr(manifest, "source", None)
    return Labeller(settings, getattr(source, "root", None),
                    lambda name: escape_name(_without_copies(sanitizer.redact_path(name), matcher)))


def _listing_rows(documents: dict[str, _Document], sanitizer: Sanitizer, matcher=None,
                  labeller=None, layout=None) -> tuple[list[dict], int]:
    """``sanitized/listing.jsonl`` rows (doc, sanitized paths, kind of the first raw path, groups) and how many paths changed.

    A paged document (a PDF, an image) also gets its page map (``pages.py``), made from its
    sanitized text and the pages extract recognised by OCR.

    A value found in any text of the sweep is removed from the path names too (``matcher``).
    The paths are sanitized, then their control characters escaped, so search, serve, MCP and
    publish show no name that can forge a line or drive a terminal. The groups are computed
    from the raw paths (``labels``); only their names are written.
    """
    from bastion_agent.sanitizing.labels import open_root

    source = open_root(labeller.settings, labeller.root) if labeller is not None else None
    try:
        return _rows(documents, sanitizer, matcher, labeller, source, layout)
    finally:
        if source is not None:
            source.close()


def _rows(documents, sanitizer, matcher, labeller, source, layout) -> tuple[list[dict], int]:
    rows, paths_redacted = [], 0
    for doc in sorted(documents):
        document = documents[doc]
        redacted = {path: _without_copies(sanitizer.redact_path(path), matcher) for path in document.raw_paths}
        paths_redacted += sum(1 for path, clean_path in redacted.items() if clean_path != path)
        shown = {path: escape_name(clean_path) for path, clean_path in redacted.items()}  # every output's form
        first = min(document.raw_paths) if document.raw_paths else None
        kind = document.kind_by_path.get(first, "") if first is not None else ""
        row = {"doc": doc, "paths": sorted(set(shown.values())), "kind": kind}
        ocr_pages = document.ocr_pages_by_path.get(first) if first is not None else None
        if ocr_pages is not None and layout is not None:
            clean = layout.doc_text_path(layout.sanitized_dir, doc).read_bytes().decode("utf-8")
            row["pages"] = page_map(clean, ocr_pages)
        if labeller is not None:
            row["groups"] = labeller.document_groups(document.raw_paths, source)
        rows.append(row)
    return rows, paths_redacted


def _without_copies(text: str, matcher) -> str:
    if matcher is None:
        return text
    found = [Finding(s, e, -1, rule) for s, e, rule in matcher.finditer(text)]
    return _replace(text, merge(found))[0] if found else text


def _extracted_keys(layout) -> dict[str, _Extracted]:
    """The texts extract read, by extract key: their raw paths (sorted) and the kind of the first."""
    listing = Path(layout.extract_listing)
    if not listing.is_file():
        raise StoreError(f"no extract store at {layout.extract_dir}: run extract first")
    try:
        rows = store.read_jsonl(listing)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"extract listing {listing} is unreadable ({exc.__class__.__name__}): run extract again") from None
    found: dict[str, list[tuple[str, str]]] = {}
    ocr_pages: dict[str, list[int] | None] = {}  # the same for every path of a key: they hold the same bytes
    for line in rows:
        row = ListingRow.from_line(line) if isinstance(line, dict) else None
        if row is None or row.status != "extracted":
            continue
        key = row.key
        if not isinstance(key, str) or not DOC_ID.fullmatch(key):
            raise StoreError(f"extract listing {listing} has an invalid or missing key: run extract again")
        found.setdefault(key, []).append((row.path, row.kind))
        ocr_pages.setdefault(key, _ocr_pages(row.ocr_pages))
    keys = {}
    for key, entries in found.items():
        entries.sort()
        keys[key] = _Extracted(paths=sorted({path for path, _ in entries if path}), kind=entries[0][1],
                               ocr_pages=ocr_pages[key])
    return keys


def _ocr_pages(value) -> list[int] | None:
    """A listing row's ``ocr_pages`` (page numbers from 1), or None when the text has no pages."""
    if not isinstance(value, list):
        return None
    return [page for page in value if isinstance(page, int) and not isinstance(page, bool) and page > 0]


def _read_extracted(layout, key: str) -> bytes:
    try:
        return layout.doc_text_path(layout.extract_dir, key).read_bytes()
    except FileNotFoundError:
        # No key in the message: it is a hash of raw bytes, and stderr is outside the extract store.
        raise StoreError(f"extract store at {layout.extract_dir} lacks a text its listing names: run extract again") from None


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    store.write_private(path, data, durable=False)


def _remove_stale(layout, keep: set[str]) -> int:
    """Delete sanitized texts that are no document of this run (their file left, changed, or an old id)."""
    removed = 0
    for path in Path(layout.sanitized_dir).glob("*.txt"):
        if DOC_ID.fullmatch(path.stem) and path.stem not in keep:
            path.unlink()
            removed += 1
    return removed
