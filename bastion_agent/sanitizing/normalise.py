"""Views of a text in which look-alike characters read as what they stand for.

An attacker (or a careless copy and paste) can hide ``ghp_...`` from a
pattern with a zero-width space inside it, write ``ＡＫＩＡ`` in fullwidth
letters, a Cyrillic ``А`` in a key prefix, ``&#64;`` or ``%40`` for ``@``.
``lookalike_view`` returns the text as a reader would take it (NFKC,
invisible characters removed, Cyrillic and Greek homoglyphs folded to Latin
inside tokens that also hold Latin letters or digits, HTML character
references and percent escapes decoded) together with a map from every
position of the view back to the original text, so that the sanitizer
finds on the view and redacts the matching span of the original.

``joined_view`` is the other view the sanitizer scans: single line breaks
inside a value (a card number or a key split over two lines) removed.

Combining marks drawn over or under ASCII characters (an underline U+0332
or a strike-through U+0336 after every letter of a key) are dropped in the
look-alike view: a reader sees the letters through them.

Terminal escape sequences (coloured logs) are dropped and JSON string
escapes of ASCII (``\\/``, ``\\u0040``) decoded in the same view.

Text that is plain ASCII with no ``&``, ``%``, ``\\`` or escape character
has no look-alike view: the fast path stays as fast as before.
"""

from __future__ import annotations

import bisect
import html
import re
import unicodedata
from dataclasses import dataclass

# The version of what this module finds or how it replaces it: bump it with any
# change that makes some text sanitize differently, so that every installation
# sanitizes its texts again (detection_version.py; docs/sanitize.md, "The cache key").
DETECTION_VERSION = 2

# Characters that render as nothing (or nearly): format characters (Cf:
# zero-width space/joiners, soft hyphen, BOM, bidi controls) plus these,
# and the variation selectors (nonspacing marks that only choose a glyph:
# after a letter that has no variants they render as nothing at all).
EXTRA_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180e\u3164\uffa0") | frozenset(
    map(chr, [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]))

# Cyrillic and Greek letters drawn like Latin ones (Unicode confusables, the
# ones that matter in key prefixes and addresses).
CONFUSABLES = str.maketrans({
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "У": "Y", "Ѕ": "S", "І": "I", "Ј": "J", "Ԛ": "Q", "Ԝ": "W",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j",
    "һ": "h", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ο": "o", "ν": "v", "ρ": "p", "τ": "t", "υ": "u", "κ": "k",
    # Dashes between digits: the hyphen (NFKC makes the non-breaking one this), the
    # figure dash meant for phone numbers, the en dash and the minus sign of word
    # processors and PDFs. A phone, SSN or card number typeset with them is the
    # number; the detectors' separators are "-".
    "\u2010": "-", "\u2012": "-", "\u2013": "-", "\u2212": "-",
})

# Terminal escape sequences (ECMA-48 control sequences such as the colour
# "\x1b[31m" and "\x1b[K", and ECMA-35 escapes such as the charset shifts
# "\x1b$B", "\x1b(B"): a terminal shows none of their characters. Saved
# coloured output (CI logs, ``grep --color=always``) puts one right before
# a value, whose last letter ("m", "K") then glues to the value's first
# character and hides it from every detector's left edge; one inside a
# value splits it. The view drops them.
TERMINAL_ESCAPE = r"\x1b\[[0-?]{0,64}[ -/]{0,8}[@-~]|\x1b[ -/]{0,8}[0-~]"

# JSON (and JavaScript) string escapes of printable ASCII, as serializers
# write them: PHP's json_encode escapes every "/" as "\/", Gson writes "=",
# "&" and "'" as \u003d, \u0026, \u0027; a URL's credentials or a
# "password=..." then reads as one to whoever parses the JSON, not to the
# detectors. The view decodes them.
JSON_ESCAPE = r"\\/|\\u00[2-7][0-9A-Fa-f]"

# What may need rewriting: a run of non-ASCII characters, a character
# reference, a percent escape of a printable ASCII character, a terminal
# escape, a JSON escape of a printable ASCII character.
SPECIAL = re.compile(
    r"[^\x00-\x7f]+|&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?|%(?:[2-7][0-9A-Fa-f])|"
    + TERMINAL_ESCAPE + "|" + JSON_ESCAPE
)
QUICK = re.compile(r"&#?[A-Za-z0-9]+;?|%[2-7][0-9A-Fa-f]|" + JSON_ESCAPE)
ASCII_ALNUM = re.compile(r"[A-Za-z0-9]")
TOKEN_EDGE = 16  # how far a run looks for Latin letters or digits around it


@dataclass
class View:
    """A rewritten text and the map back: ``view[i]`` came from ``original[starts[i]:ends[i]]``.

    Stored as pieces: ``piece_view[k]`` is where piece ``k`` starts in the
    view, ``piece_orig[k]`` where it starts in the original, ``piece_len[k]``
    its length in the original, ``piece_linear[k]`` whether it was copied
    character for character (else all its view characters map to the whole
    original piece).
    """

    text: str
    piece_view: list[int]
    piece_orig: list[int]
    piece_len: list[int]
    piece_linear: list[bool]
    deletions: list[int]  # view positions where characters were dropped

    def changed_windows(self, reach: int = 256) -> list[tuple[int, int]]:
        """Merged spans of the view around its rewritten pieces (``reach`` characters each
        side, widened to whitespace): only there can the view hold a finding the text lacks."""
        windows: list[tuple[int, int]] = []
        text = self.text
        changed = [self.piece_view[k] for k, linear in enumerate(self.piece_linear) if not linear]
        for position in sorted(changed + self.deletions):
            start = max(0, position - reach)
            # Each walk to whitespace stops or starts where it can still change the result: a start inside the
            # last window merges with it anyway, and that window's end was walked to already (no blank before
            # it from here), so dense rewrites (``%2F`` repeated) cost each character once, not ``8 * reach``.
            end = min(len(text), max(position + reach, windows[-1][1] if windows else 0))
            while start > 0 and not text[start - 1].isspace() and position - start < 4 * reach and not (
                    windows and start <= windows[-1][1]):
                start -= 1
            while end < len(text) and not text[end].isspace() and end - position < 4 * reach:
                end += 1
            if windows and start <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(windows[-1][1], end))
            else:
                windows.append((start, end))
        return windows

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that view[start:end] came from."""
        return self._start(start), self._end(end)

    def _piece(self, position: int) -> int:
        return bisect.bisect_right(self.piece_view, position) - 1

    def _start(self, position: int) -> int:
        k = self._piece(position)
        if self.piece_linear[k]:
            return self.piece_orig[k] + (position - self.piece_view[k])
        return self.piece_orig[k]

    def _end(self, position: int) -> int:
        k = self._piece(position - 1)
        if self.piece_linear[k]:
            return self.piece_orig[k] + (position - self.piece_view[k])
        return self.piece_orig[k] + self.piece_len[k]


class _Builder:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.view_at = 0
        self.pv: list[int] = []
        self.po: list[int] = []
        self.pl: list[int] = []
        self.lin: list[bool] = []
        self.deleted: list[int] = []

    def copy(self, text: str, start: int, end: int) -> None:
        if end > start:
            self._add(text[start:end], start, end - start, True)

    def replace(self, replacement: str, start: int, end: int) -> None:
        if replacement:
            self._add(replacement, start, end - start, False)
        else:
            self.deleted.append(self.view_at)

    def _add(self, piece: str, orig: int, length: int, linear: bool) -> None:
        self.parts.append(piece)
        self.pv.append(self.view_at)
        self.po.append(orig)
        self.pl.append(length)
        self.lin.append(linear)
        self.view_at += len(piece)

    def view(self) -> View:
        return View("".join(self.parts), self.pv, self.po, self.pl, self.lin, self.deleted)


def needs_lookalike_view(text: str) -> bool:
    """False for the common case: ASCII without character references, percent, terminal or JSON escapes."""
    if text.isascii():
        return "\x1b" in text or (("&" in text or "%" in text or "\\" in text) and QUICK.search(text) is not None)
    return True


def _character(ch: str, fold: bool) -> str:
    if ch in EXTRA_INVISIBLE or unicodedata.category(ch) == "Cf":
        return ""
    normal = unicodedata.normalize("NFKC", ch)
    return normal.translate(CONFUSABLES) if fold else normal


def _run(text: str, start: int, end: int, out: _Builder) -> None:
    """A run of non-ASCII characters: rewrite only the characters that change."""
    run = text[start:end]
    left = text[max(0, start - TOKEN_EDGE):start]
    right = text[end:end + TOKEN_EDGE]
    left = "" if not left or left[-1].isspace() else left.split()[-1]
    right = "" if not right or right[0].isspace() else right.split()[0]
    fold = bool(ASCII_ALNUM.search(left) or ASCII_ALNUM.search(right))  # a token mixing scripts
    marks = start > 0 and text[start - 1].isascii() and unicodedata.combining(text[start])
    if not fold and not marks and unicodedata.is_normalized("NFKC", run) and not any(
            ch in EXTRA_INVISIBLE or unicodedata.category(ch) == "Cf" for ch in run):
        out.copy(text, start, end)
        return
    copied = start
    for offset, ch in enumerate(run):
        new = "" if marks and unicodedata.combining(ch) else _character(ch, fold)
        if new != ch:
            position = start + offset
            out.copy(text, copied, position)
            out.replace(new, position, position + 1)
            copied = position + 1
    out.copy(text, copied, end)


def _escape(match: re.Match) -> str:
    token = match.group(0)
    if token.startswith("%"):
        return chr(int(token[1:], 16))
    if token.startswith("\\"):
        return "/" if token == "\\/" else chr(int(token[2:], 16))
    if not token.endswith(";") and not token.startswith("&#"):
        return token  # "&copy" without ";" is left as written, as browsers mostly do in text
    decoded = html.unescape(token)
    return "".join(_character(ch, True) for ch in decoded) if decoded != token else token


def lookalike_view(text: str) -> View | None:
    """The normalised view of ``text``, or None when it would be the text itself."""
    if not needs_lookalike_view(text):
        return None
    out = _Builder()
    copied = 0
    changed = False
    for match in SPECIAL.finditer(text):
        start, end = match.span()
        out.copy(text, copied, start)
        if text[start] == "\x1b":
            out.replace("", start, end)
            changed = True
        elif text[start] in "&%\\":
            new = _escape(match)
            if new != match.group(0):
                out.replace(new, start, end)
                changed = True
            else:
                out.copy(text, start, end)
        else:
            before = len(out.parts)
            _run(text, start, end, out)
            changed = changed or any(not linear for linear in out.lin[before:]) or len(out.parts) - before != 1
        copied = end
    out.copy(text, copied, len(text))
    if not changed:
        return None
    view = out.view()
    return view if view.text != text else None


# --- values broken by one line break ------------------------------------------------

# The end of a line that looks like the first half of a value (a token with
# a digit, an underscore or base64 punctuation; a capitalised prefix such as
# AKIA; a long token), and the start of the next line (the second half).
HEAD = re.compile(
    r"(?:(?=[A-Za-z0-9+/=_\-]*\d)[A-Za-z0-9+/=_\-]{8,}|[A-Z0-9]{8,}|\d{4}[ \-]\d{4}|[A-Za-z0-9+/=_\-]{20,})[ \t]?\r?\Z"
)
TAIL = re.compile(r"[ \t]*(?=[A-Za-z0-9+/=_\-]{4})")
REACH = 64  # characters looked at on either side of a line break


def junctions(text: str) -> list[tuple[int, int, str]]:
    """The single line breaks that may split a value: (start, end, what replaces them).

    Between two digits the break becomes the separator the digits before it
    use (``4111 1111`` / ``1111 1111`` joins as one card number); elsewhere
    it is removed. One bounded look per line keeps this linear in the text.
    """
    found = []
    position = text.find("\n")
    while position != -1:
        head = HEAD.search(text, max(0, position - REACH), position)
        following = position + 1
        if head is not None and following < len(text) and text[following] != "\n":
            tail = TAIL.match(text, following, following + REACH)
            if tail is not None:
                start = head.end() - len(head.group(0)) + len(head.group(0).rstrip(" \t\r"))
                end = tail.end()
                before = text[max(0, start - 5):start]
                joiner = ""
                if start > 0 and text[start - 1].isdigit() and end < len(text) and text[end].isdigit():
                    joiner = " " if " " in before else "-" if "-" in before else ""
                found.append((start, end, joiner))
        position = text.find("\n", position + 1)
    return found


def joined_view(text: str, spans: list[tuple[int, int, str]]) -> View:
    """``text`` with each junction replaced by its joiner (see ``junctions``)."""
    out = _Builder()
    copied = 0
    for start, end, joiner in spans:
        out.copy(text, copied, start)
        out.replace(joiner, start, end)
        copied = end
    out.copy(text, copied, len(text))
    return out.view()
