"""What the format readers share: the refusal signal, its reasons, and decoding bytes as text."""

from __future__ import annotations

import codecs
import re
import unicodedata

REASON_BINARY = "binary"
REASON_DAMAGED = "damaged"
REASON_EMPTY = "empty"
REASON_ENCRYPTED = "encrypted"
REASON_UNPACKED = "too large unpacked"
REASON_OUTPUT = "too_costly: output"

# Binary detection: any NUL byte (outside UTF-16/32), or more than this share
# of control characters in the first part of the decoded text.
CONTROL_RATIO_LIMIT = 0.02
_SNIFF_CHARS = 65_536


class Refused(Exception):
    """Raised inside a reader to give up with a reason; ``readers.read`` turns it into a row."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class OutputMeter:
    """Characters of text the reader running now may still produce.

    Formats that expand (a shared string repeated by many cells, a zip)
    spend from it as they produce text, so a small file that would become
    gigabytes stops at the cap instead of after it. One reader runs at a
    time per process (``readers.read`` sets the cap), hence one meter.
    """

    left: int | None = None

    @classmethod
    def spend(cls, count: int) -> None:
        if cls.left is not None:
            cls.left -= count
            if cls.left < 0:
                raise Refused(REASON_OUTPUT)


spend_output = OutputMeter.spend


_BOMS = (  # longest first: the UTF-32-LE BOM begins with the UTF-16-LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def decode_text(data: bytes, declared: str | None = None) -> str:
    """Decode bytes that should be text, or raise ``Refused("binary")``.

    Order: a byte-order mark; UTF-16 without a mark when every other byte is
    NUL; a charset the document declares (HTML, e-mail); strict UTF-8; then
    cp1252 (a superset of latin-1's printable range, the usual legacy
    encoding), and latin-1 for the few bytes cp1252 leaves undefined. The
    result is refused as binary when it is full of control characters.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _checked(data[len(bom):].decode(encoding, errors="replace"))
    guessed = _utf16_without_bom(data)
    if guessed:
        return _checked(data.decode(guessed, errors="replace"))
    if b"\x00" in data:
        raise Refused(REASON_BINARY)
    for encoding in _candidates(declared):
        try:
            return _checked(data.decode(encoding))
        except (UnicodeDecodeError, LookupError):
            continue
    return _checked(data.decode("latin-1"))


def _candidates(declared: str | None) -> list[str]:
    names = []
    if declared:
        try:
            name = codecs.lookup(declared.strip().strip("\"'")).name
        except LookupError:
            name = None
        # As browsers do: a page labelled latin-1 or ASCII is read as cp1252,
        # whose printable range is a superset (curly quotes, dashes, euro).
        if name:
            names.append("cp1252" if name in ("iso8859-1", "ascii") else name)
    return names + ["utf-8", "cp1252"]


def _utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 text without a mark: mostly-ASCII text has NUL in every other byte."""
    sample = data[:4096]
    if len(sample) < 4 or len(data) % 2:
        return None
    even, odd = sample[0::2], sample[1::2]
    if odd.count(0) > 0.3 * len(odd) and even.count(0) == 0:
        return "utf-16-le"
    if even.count(0) > 0.3 * len(even) and odd.count(0) == 0:
        return "utf-16-be"
    return None


def _checked(text: str) -> str:
    sample = text[:_SNIFF_CHARS]
    if not sample:
        return text
    controls = sum(1 for ch in sample if ch not in "\t\n\r\f\v\x1b" and unicodedata.category(ch) == "Cc")
    if controls > CONTROL_RATIO_LIMIT * len(sample):
        raise Refused(REASON_BINARY)
    return text


def squeeze_blank_lines(text: str) -> str:
    """At most one blank line in a row, none at the start or the end."""
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def tidy_lines(text: str) -> str:
    """Trailing tabs and spaces off each line, blank runs squeezed."""
    return squeeze_blank_lines("\n".join(line.rstrip(" \t") for line in text.split("\n")))
