"""Views of a text with the disguises a reader undoes at a glance taken off.

A value need not be hidden to escape a pattern: it is enough to write it the
way a person reads past. ``DE89-3704-0044-0532-0130-00`` is an IBAN grouped
with hyphens; ``"AKIA" + "IOSFODNN" + "7EXAMPLE"`` is one key; ``jane (at)
corp (dot) com`` is an address; ``S S N  5 0 5 - 9 4 - 2 4 0 7`` is what a
PDF that draws each character on its own gives to a text extractor;
``cGFzc3dvcmQ9...`` is base64 of ``password=...``. Each function here finds
one such disguise and says how to undo it, as edits ``(start, end,
replacement)`` of the original text; ``views`` turns each kind's edits into
a ``normalise.View``, which the scanner reads like the look-alike view
(findings mapped back to the original, and kept only where they cover an
edit, so an undisguised text is read once, as before).

Letter-spaced text is joined here, in the sanitizer, rather than in the PDF
reader: the same spacing comes from PostScript, troff and OCR text layers
and from people, the stored text keeps the layout its reader saw, and the
extract store need not be rebuilt for an installation to be protected.

Cost: each kind is one regular-expression pass led by a literal or a
character class over the text (none nests quantifiers), skipped entirely
when a cheap test (a substring) says the disguise cannot occur; every match
is bounded in length, so the views cost time linear in the text.
"""

from __future__ import annotations

import base64
import bisect
import binascii
import re

from bastion_agent.sanitizing.normalise import View, _Builder

# The version of what this module finds or how it replaces it (detection_version.py).
DETECTION_VERSION = 2

Edit = tuple[int, int, str]

# Alphanumeric groups joined by hyphens or dots, led by two letters and two digits: an IBAN as people group it.
HYPHEN_GROUPS = re.compile(r"[A-Z]{2}\d{2}(?:[\-.][A-Z0-9]{2,4}){3,8}(?![A-Za-z0-9])")
# Led by the literal separator (the engine skips to it in C): two digits, a separator, a group, a separator.
HYPHEN_HINTS = (re.compile(r"-(?<=\d\d-)[A-Z0-9]{2,4}-"), re.compile(r"\.(?<=\d\d\.)[A-Z0-9]{2,4}\."))
# A hyphen at a line's end between two letters or digits: a word or a number broken by its writer.
SOFT_BREAK = re.compile(r"-[ \t]*\r?\n[ \t]*(?=[A-Za-z0-9])")
# Three or more short lines that each hold one token and nothing else: a key written a piece per line.
# "=" only ends a piece (base64 padding): ``AWS_REGION=us-east-1`` is a line of a .env file, not a piece.
_PIECE = r"[A-Za-z0-9+/_\-]{3,40}={0,2}"
PIECE_LINES = re.compile(r"\n[ \t]*" + _PIECE + r"[ \t]*(?:\r?\n[ \t]*" + _PIECE + r"[ \t]*){2,8}(?=\r?\n|\Z)")
# A string literal's closing quote, a concatenation operator and the next literal's opening quote.
# Both literals hold token characters at the join (an empty "" or a "\n" is no piece of a key); literals
# side by side (Python, C) need a space or a line break between them.
CONCAT = re.compile(r"""(["'])(?<=[A-Za-z0-9+/=_\-]["'])(?:[ \t]*(?:\+|\.|\.\.|&|\|\|)[ \t]*(?:\\?\r?\n[ \t]*)?"""
                    r"""|[ \t]+|[ \t]*\\?\r?\n[ \t]*)\1(?=[A-Za-z0-9+/=_\-])""")
# Single characters between cell delimiters: a number written one digit per cell (HTML, TSV, pipes).
_CELL_GAP = r"(?:[ \t]*</t[dh]>[ \t]*<t[dh](?:[ \t][^<>\n]{0,64})?>[ \t]*|[ \t]*[\t|][ \t]*)"
CELL_DIGITS = re.compile(r"[\d\-](?:" + _CELL_GAP + r"[\d\-](?![\w\-])){7,19}")
CELL_GAP = re.compile(_CELL_GAP)
# Base64 of at least fifteen bytes whose text may be ``key=value`` (``password=`` and six characters).
BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{20,}+={0,2}+(?![A-Za-z0-9+/=])")  # possessive: no backtracking
MAX_BASE64 = 4096
# ``local (at) host (dot) tld`` and its bracketed and upper-case spellings.
_DOT = r"[ \t]*(?:\((?:dot|DOT)\)|\[(?:dot|DOT)\]|\{(?:dot|DOT)\}|<(?:dot|DOT)>)[ \t]*| DOT | dot (?=[a-z]{2,6}\b)|\."
# The "at" words, each pass led by a literal; the lower-case " at " only when the text also has " dot ".
AT_LEADS = (re.compile(r"\((?:at|AT)\)"), re.compile(r"\[(?:at|AT)\]"), re.compile(r"\{(?:at|AT)\}"),
            re.compile(r"<(?:at|AT)>"), re.compile(r" AT "), re.compile(r" at (?=[\w\-]{1,63} dot )"))
LOCAL_PART = re.compile(r"[A-Za-z0-9][\w.+\-]{0,63}\Z")
DOMAIN_PART = re.compile(r"[A-Za-z0-9][\w\-]{0,62}(?:(?:" + _DOT + r")[A-Za-z0-9][\w\-]{0,62}){1,4}")
# Each led by a literal (the engine skips to it in C): whether the text can hold a bracketed or upper-case "at".
AT_HINTS = (re.compile(r"at[)\]}>]"), re.compile(r"AT[ )\]}>]"))
DOT_WORD = re.compile(r"[ \t]*(?:\((?:dot|DOT)\)|\[(?:dot|DOT)\]|\{(?:dot|DOT)\}|<(?:dot|DOT)>)[ \t]*| DOT | dot ")
# Letter-spaced text: six or more single characters, one space between letters, two or three between words.
LETTER_SPACED = re.compile(r"(?<!\S)\S(?: {1,3}\S(?!\S)){5,400}")  # only run in windows around a hint
# Led by the literal space: three single characters in a row, one space apart.
LETTER_HINT = re.compile(r" (?<=\S )\S \S \S(?!\S)")
# A Jupyter output's text/plain lines, each a JSON string ending in "\n".
NOTEBOOK_LINE = re.compile(r'(?m)^[ \t]*"((?:[^"\\\n]|\\.){0,4096}?)(?:\\n)?",?[ \t]*$')


def _free(text: str, position: int, chars: str) -> bool:
    """Is ``position`` the start of the text or after a character that is neither alphanumeric nor in ``chars``?"""
    return position == 0 or not (text[position - 1].isalnum() or text[position - 1] in chars)


def _from_hints(text: str, hint: re.Pattern, shape: re.Pattern, back: int):
    """The matches of ``shape`` that start at most ``back`` characters before a match of the cheaper ``hint``
    (or inside it)."""
    done = 0
    for found in hint.finditer(text):
        if found.start() < done:
            continue
        for match in shape.finditer(text, max(done, found.start() - back), found.end() + 4096):
            if match.start() >= found.end():
                break
            done = match.end()
            yield match
        done = max(done, found.end())


def hyphen_groups(text: str) -> list[Edit]:
    edits = []
    for separator, hint in zip("-.", HYPHEN_HINTS):
        if separator in text:
            edits.extend((m.start() + i, m.start() + i + 1, " ") for m in _from_hints(text, hint, HYPHEN_GROUPS, 4)
                         if _free(text, m.start(), "-") for i, ch in enumerate(m.group()) if ch in "-.")
    return sorted(set(edits))


def soft_breaks(text: str) -> list[Edit]:
    if "\n" not in text:
        return []
    return [(m.start(), m.end(), "") for m in SOFT_BREAK.finditer(text) if m.start() and text[m.start() - 1].isalnum()]


def piece_lines(text: str) -> list[Edit]:
    """The line breaks (and indents) inside a block of one-token lines that, joined, look like a key (capitals)."""
    if "\n" not in text:
        return []
    edits = []
    for block in PIECE_LINES.finditer("\n" + text):  # the line break leads each block (the engine skips to it)
        block = _Shifted(block)
        joined = re.sub(r"\s", "", block.group())
        if len(joined) < 16 or joined.islower() or joined.isdigit():
            continue  # a list of words or of numbers, one per line
        for gap in re.finditer(r"[ \t]*\r?\n[ \t]*", block.group()):
            edits.append((block.start() + gap.start(), block.start() + gap.end(), ""))
    return edits


class _Shifted:
    """A match in ``"\n" + text`` read as a span of ``text`` (from the block's first line, its break left out)."""

    def __init__(self, match: re.Match):
        self._text = match.group()[1:]
        self._start = match.start()

    def group(self) -> str:
        return self._text

    def start(self) -> int:
        return self._start


PIECE = re.compile(r"[A-Za-z0-9+/=_\-]{1,200}")


def concatenations(text: str) -> list[Edit]:
    """The joins between string literals that each hold one piece of a token (no space, no other character).

    ``"AKIA" + "IOSF..."`` joins; ``"-Wl,--as-needed" "x.so"`` (arguments
    side by side) and ``"Hello, " + name`` do not.
    """
    if '"' not in text and "'" not in text:
        return []
    edits = []
    for match in CONCAT.finditer(text):
        quote = match.group(1)
        opening = text.rfind(quote, max(0, match.start() - 201), match.start())
        closing = text.find(quote, match.end(), match.end() + 201)
        if opening != -1 and closing != -1 and PIECE.fullmatch(text, opening + 1, match.start()) \
                and PIECE.fullmatch(text, match.end(), closing):
            edits.append((match.start(), match.end(), ""))
    return edits


def cell_digits(text: str) -> list[Edit]:
    if "\t" not in text and "|" not in text and "<t" not in text:
        return []
    edits = []
    for run in CELL_DIGITS.finditer(text):
        if not _free(text, run.start(), "_-"):
            continue
        edits.extend((run.start() + g.start(), run.start() + g.end(), "") for g in CELL_GAP.finditer(run.group()))
    return edits


def base64_texts(text: str, runs=None) -> list[Edit]:
    """Base64 tokens whose bytes are printable text holding ``=`` or ``:`` (a ``key=value``), decoded.

    ``runs``: the spans of the scanner's long-token runs (``scanner.TOKEN_RUN``, which every base64 token
    of 20 characters or more lies in), so that prose costs no pass of its own.
    """
    edits = []
    spans = runs if runs is not None else [(0, len(text))]
    for token in (token for start, end in spans for token in BASE64.finditer(text, start, end)):
        raw = token.group()
        if len(raw) % 4 or len(raw) > MAX_BASE64 or raw.islower() or raw.isupper():
            continue
        try:
            decoded = base64.b64decode(raw, validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if decoded.isprintable() and ("=" in decoded or ":" in decoded):
            edits.append((token.start(), token.end(), " " + decoded + " "))
    return edits


def obfuscated_emails(text: str) -> list[Edit]:
    """``local (at) host (dot) tld``: each "at" word found first (a literal), then the address read around it."""
    words = " at " in text and " dot " in text
    if AT_HINTS[0].search(text) is None and AT_HINTS[1].search(text) is None and not words:
        return []
    edits = []
    for at in (AT_LEADS if words else AT_LEADS[:-1]):
        for match in at.finditer(text):
            start, end = match.span()
            while start > 0 and text[start - 1] in " \t" and match.start() - start < 4:
                start -= 1  # "jane (at) corp": the spaces around the word go with it
            while end < len(text) and text[end] in " \t" and end - match.end() < 4:
                end += 1
            local = LOCAL_PART.search(text, max(0, start - 64), start)
            domain = DOMAIN_PART.match(text, end)
            if local is None or domain is None or not _free(text, local.start(), "_.+-"):
                continue
            edits.append((start, end, "@"))
            edits.extend((d.start(), d.end(), ".") for d in DOT_WORD.finditer(text, domain.start(), domain.end()))
    return edits


def letter_spaced(text: str) -> list[Edit]:
    """Spaces inside letter-spaced runs: one between characters goes, two or three between words become one."""
    return _letter_spaced(text, False)


def letter_spaced_words(text: str) -> list[Edit]:
    """``letter_spaced``, but one space between a letter and a digit stays: ``S S N 5 0 5`` reads ``SSN 505``."""
    return _letter_spaced(text, True)


# The last text read and its letter-spaced runs, as one tuple (replaced whole, so a thread never reads one
# text's runs for another): the two letter-spaced views read the same runs.
_spaced_cache: tuple = (None, [])


def _spaced_runs(text: str) -> list[tuple[int, str]]:
    global _spaced_cache
    cached = _spaced_cache
    if cached[0] is text:
        return cached[1]
    runs = [(run.start(), run.group()) for run in _from_hints(text, LETTER_HINT, LETTER_SPACED, 12)] if " " in text else []
    _spaced_cache = (text, runs)
    return runs


def _letter_spaced(text: str, split_digits: bool) -> list[Edit]:
    edits = []
    for start, value in _spaced_runs(text):
        for gap in re.finditer(r" {1,3}", value):
            before, after = value[gap.start() - 1], value[gap.end()]
            # One space between letters goes; between a letter and a digit it stays one ("S S N 5 0 5" is "SSN 505").
            word_break = gap.end() - gap.start() > 1 or split_digits and before.isalpha() != after.isalpha() \
                and before.isalnum() and after.isalnum()
            edits.append((start + gap.start(), start + gap.end(), " " if word_break else ""))
    return edits


def notebook_lines(text: str) -> list[Edit]:
    """The JSON quoting of a notebook's text/plain lines, so its printed table reads as lines again."""
    if '"text/plain"' not in text:
        return []
    edits = []
    for line in NOTEBOOK_LINE.finditer(text):
        edits.append((line.start(), line.start(1), ""))
        edits.append((line.end(1), line.end(), ""))
    return edits


# Each kind of disguise, read on its own view (one kind's edits never overlap another's).
KINDS = (hyphen_groups, soft_breaks, piece_lines, concatenations, cell_digits, base64_texts, obfuscated_emails,
         letter_spaced, letter_spaced_words, notebook_lines)
# The kinds whose view is also read for tables (a printed frame inside a notebook's JSON).
TABLE_KINDS = frozenset({"notebook_lines", "letter_spaced", "letter_spaced_words"})


def view_of(text: str, edits: list[Edit]) -> View:
    out = _Builder()
    copied = 0
    for start, end, replacement in sorted(edits):
        if start < copied:
            continue  # overlapping matches of one kind: the first wins
        out.copy(text, copied, start)
        out.replace(replacement, start, end)
        copied = end
    out.copy(text, copied, len(text))
    return out.view()


def views(text: str, runs=None):
    """(kind, view, edited spans of the original) for each kind of disguise the text holds.

    One view at a time (a generator): a text holding every disguise never has more than one copy beside it.
    """
    for kind in KINDS:
        edits = kind(text, runs) if kind is base64_texts else kind(text)
        if edits:
            yield kind.__name__, view_of(text, edits), sorted((s, e) for s, e, _ in edits)


def findings(text: str, scan, runs=None) -> list[tuple[int, int, int, str]]:
    """(start, end, order, rule) in ``text`` of what ``scan`` finds in its disguise views.

    ``scan(window, tables)`` returns ``(start, end, order, rule)`` found in a
    piece of a view (``tables``: read its tables too). Only the view's
    windows around its edits are read, and a finding is kept only when its
    span in the original covers an edit: the undisguised text around it was
    read as it is already. A cell of a table the view revealed (a notebook's
    printed frame) lies between edits and is kept whole.
    """
    found = []
    for kind, view, edited in views(text, runs):
        starts = [s for s, _ in edited]
        tables = kind in TABLE_KINDS
        for first, last in view.changed_windows():
            for start, end, order, rule in scan(view.text[first:last], tables):
                s, e = view.span(start + first, end + first)
                index = bisect.bisect_left(starts, e) - 1  # the last edit starting before the finding's end
                if tables or (index >= 0 and edited[index][1] > s):
                    found.append((s, e, order, rule))
    return found
