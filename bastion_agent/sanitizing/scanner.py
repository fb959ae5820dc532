"""The scanner: a text in, the text with its secrets and personal data replaced out.

A pure function of the text and the settings, with no file in sight (the
stage that reads the extract store and writes the sanitized one is
``sanitize.py``). Each finding is replaced by a typed placeholder,
``[REDACTED:<rule-id>]``; the result depends only on the text and the
settings, so the same document always sanitizes to the same text and keeps
its content-addressed chunk ids.

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
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from bastion_agent.core.errors import ManifestError
from bastion_agent.core.progress import escape_name
from bastion_agent.sanitizing import columns, context, copies, disguises, names, path_memo, recognised
from bastion_agent.sanitizing.normalise import joined_view, junctions, lookalike_view
from bastion_agent.sanitizing.pages import FORM_FEED
from bastion_agent.sanitizing.rules import RULES, SCOPES, SECRET, Rule
from bastion_agent.sanitizing.settings import SanitizeSettings
from bastion_agent.sanitizing.validators import CHECKS, is_count, is_placeholder, shannon_entropy

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 2

PLACEHOLDER = "[REDACTED:{}]"

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
        self._path_key: bytes | None = None  # the digest path_memo keeps this sanitizer's paths under

    # The public API ------------------------------------------------------------

    def redact(self, text: str, ocr_pages=None) -> tuple[str, Counter]:
        """The text with every finding replaced, and the number of placeholders per rule id.

        ``ocr_pages``: the pages (from 1, split at form feeds) that OCR read, scanned with tolerance (``recognised.py``).
        """
        clean, counts, _ = self.redact_found(text, ocr_pages=ocr_pages)
        return clean, counts

    def redact_found(self, text: str, others: dict[str, str] | None = None,
                     ocr_pages=None) -> tuple[str, Counter, dict[str, str]]:
        """``redact``, and the values it found that are worth removing elsewhere (value -> rule id).

        Every other occurrence of a found value in the same text goes too
        (``copies.py``): ``api_key = "X"`` then ``print("X")``. The values
        are raw secrets: the stage keeps them inside the extract store.

        ``others`` (value -> rule id) are values found in other texts that
        may reach this one (the stage's readers rule): their copies go in
        the same pass, merged with this text's findings, so a copy that a
        finding here cut in two (``pw = "abc" +⏎ "def"``) goes whole. The
        counts stay this text's own: they must not move with other texts.
        """
        findings = merge(self.findings(text, ocr_pages))
        if not findings and not others:
            return text, Counter(), {}
        found = copies.found_values(text, findings)
        if found:
            findings = merge(findings + [Finding(s, e, -1, rule) for s, e, rule in copies.occurrences(text, found)])
        clean, counts = replace_findings(text, findings)
        copied = [Finding(s, e, -1, rule) for s, e, rule in copies.occurrences(text, others)] if others else []
        if copied:
            clean = replace_findings(text, merge(findings + copied))[0]
        return clean, counts, found

    def redact_found_noting(self, text: str, note, others: dict[str, str] | None = None,
                            ocr_pages=None) -> tuple[str, Counter, dict[str, str]]:
        """``redact_found``, calling ``note(name)`` each time the rule being matched changes.

        ``name`` is a custom rule's id, or "built-in" for every other rule:
        when a custom pattern backtracks without end, the budgeted worker's
        last note names it, so the manifest's author knows which to fix.
        """
        accept, running = self._accept, [None]

        def noted(active, text, matches):  # the matching itself happens while _accept iterates
            name = active.rule.id if active.rule.category == "custom" else "built-in"
            if name != running[0]:
                running[0] = name
                note(name)
            return accept(active, text, matches)

        self._accept = noted
        try:
            return self.redact_found(text, others, ocr_pages)
        finally:
            self._accept = accept

    def redact_path(self, path: str) -> str:
        """A path name as users may see it (``_redact_path``), remembered while a watcher runs (``path_memo``)."""
        if not path_memo.active():
            return self._redact_path(path)
        if self._path_key is None:
            self._path_key = path_memo.key_of(self.settings, [active.rule for active in self.rules]) or b""
        found = path_memo.recall(self._path_key or None, path)
        if found is None:
            found = self._redact_path(path)
            path_memo.keep(self._path_key or None, path, found)
        return found

    def _redact_path(self, path: str) -> str:
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

    def findings(self, text: str, ocr_pages=None) -> list[Finding]:
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
        runs = [run.span() for run in TOKEN_RUN.finditer(text)]  # long tokens: the run rules' and base64's
        found = self._scan(text, lowered, runs)
        view = lookalike_view(text)
        if view is not None:
            for first, last in view.changed_windows():
                for finding in self._scan(view.text[first:last]):
                    start, end = view.span(finding.start + first, finding.end + first)
                    found.append(Finding(start, end, finding.order, finding.rule))
        if "\n" in text:
            found.extend(self._joined_findings(text, found))
        found.extend(Finding(*f) for f in disguises.findings(text, self._view_scan, runs))
        if ocr_pages:
            spans = recognised.page_spans(text, ocr_pages)
            iban = next((a.order for a in self.rules if a.rule.id == "iban"), None)
            found.extend(Finding(*f) for f in recognised.findings(text, spans, lambda piece: self._view_scan(piece, False), iban))
        found.extend(self._context_findings(text, lowered))
        if ATTACHMENT_MARK in text:
            for label in ATTACHMENT_LABEL.finditer(text):
                offset = label.start(1)
                found.extend(Finding(f.start + offset, f.end + offset, f.order, f.rule)
                             for f in self._name_findings(label.group(1)))
        found.extend(self._structure(text, columns.column_findings(text, self._structure_orders(), lowered)))
        found.extend(self._structure(text, names.name_findings(text, self._structure_orders(), lowered)))
        return found

    def _view_scan(self, text: str, tables: bool) -> list[tuple[int, int, int, str]]:
        """What the rules, the keyed values and (``tables``) the columns find in a piece of a view (``disguises.py``)."""
        found = self._scan(text) + self._context_findings(text)
        if tables:
            found += self._structure(text, columns.column_findings(text, self._structure_orders()))
        return [(f.start, f.end, f.order, f.rule) for f in found]

    def _context_findings(self, text: str, lowered: str | None = None) -> list[Finding]:
        """The values of credential-named keys, whole, to their syntax's own end (``context.py``)."""
        if self._context_order is None:
            return []
        order = self._context_order
        return [Finding(s, e, order, "credential-value") for s, e in context.scan(text, lowered)
                if not self._allowed(text[s:e]) and not is_count(text, s, e)]

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

    def _scan(self, text: str, lowered: str | None = None, runs=None) -> list[Finding]:
        """The findings of the rules in ``text`` as it is (``lowered``: ``text.lower()``, ``runs``: the
        spans of ``TOKEN_RUN`` in it, when at hand)."""
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
            for start, end in runs if runs is not None else (run.span() for run in TOKEN_RUN.finditer(text)):
                for active in run_rules:
                    found.extend(self._accept(active, text, active.regex.finditer(text, start, end)))
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


def replace_findings(text: str, findings: list[Finding]) -> tuple[str, Counter]:
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
