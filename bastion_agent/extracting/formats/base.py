"""What the format readers share: the refusal signal, its reasons, and decoding bytes as text."""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import re
import unicodedata
from dataclasses import dataclass

from bastion_agent.core.budget import (
    REASON_OUTPUT,  # the cap on a reader's output is the worker's budget
)

REASON_BINARY = "binary"
REASON_DAMAGED = "damaged"
REASON_EMPTY = "empty"
REASON_ENCRYPTED = "encrypted"
REASON_UNPACKED = "too large unpacked"

# Binary detection: any NUL byte (outside UTF-16/32), or more than this share
# of control characters in the first part of the decoded text.
# The version of what every core reader shares: this module's decoding and
# output caps, and the table form. Bump it when a change here changes any
# reader's text: stored texts of every core format are read again (one
# format's own change bumps that format's ``version`` in ``registry.py``).
# 2: plausible decodings (UTF-16 shapes, ASCII-compatible charsets); 3: linear
# readers, output caps; 4: tables in one normal form (rows as lines, cells by
# tabs, spans kept).
DECODING_VERSION = "4"

CONTROL_RATIO_LIMIT = 0.02
_SNIFF_CHARS = 65_536


class Refused(Exception):
    """Raised inside a reader to give up with a reason; ``readers.read`` turns it into a row."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Paged:
    """What a reader of pages returns: the text, its pages apart by ``pages.PAGE_BREAK``, and which OCR read.

    ``ocr_pages`` holds page numbers from 1; a reader that returns ``str``
    has no pages (a text file, an e-mail), and its hits no page number.
    """

    text: str
    ocr_pages: tuple[int, ...] = ()


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

# While set (``plain_decoding()``), every reader decodes bytes the dumb way:
# NUL bytes dropped, then latin-1. The byte-level scan of extract reads a
# document a second time like this, to see what a clever decoding may hide.
_PLAIN = contextvars.ContextVar("plain_decoding", default=False)

# A code unit of UTF-16 whose two bytes are both printable ASCII (or tab,
# line feed, carriage return) is what 8-bit text looks like read pair-wise.
_ASCII_BYTES = frozenset(b"\t\n\r" + bytes(range(0x20, 0x7F)))
_UTF16_WINDOW = 16  # code units per window of the UTF-16 plausibility check
_UTF16_EIGHT_BIT = 15  # ... of which this many pairs of ASCII bytes make the window 8-bit text
_ASCII_PROBE = bytes(sorted(_ASCII_BYTES))


@contextlib.contextmanager
def plain_decoding():
    """Within this block, ``decode_text`` (and the RTF reader) decode NUL-stripped latin-1."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def plain_mode() -> bool:
    return _PLAIN.get()


# The shift sequences of the 7-bit ISO 2022 encodings (ESC $ B, ESC ( B, SO, SI):
# in the plain view they separate words instead of gluing to the next one.
_ISO2022_SHIFTS = re.compile(rb"\x1b\$[()*+]?[@A-Z]|\x1b[()*+][@A-Z]|[\x0e\x0f]")


def plain_text(data: bytes) -> str:
    """The dumb view of bytes: NULs dropped, ISO 2022 shifts made spaces, each other byte one latin-1 character."""
    return _ISO2022_SHIFTS.sub(b" ", data.replace(b"\x00", b"")).decode("latin-1")


def decode_text(data: bytes, declared: str | None = None) -> str:
    """Decode bytes that should be text, or raise ``Refused("binary")``.

    Order: a byte-order mark; UTF-16 without a mark when every other byte is
    NUL; a charset the document declares (HTML, e-mail); strict UTF-8; then
    cp1252 (a superset of latin-1's printable range, the usual legacy
    encoding), and latin-1 for the few bytes cp1252 leaves undefined. The
    result is refused as binary when it is full of control characters.

    A decoding is used only where it is plausible for the bytes
    (``plausible_encoding``): a declared charset that does not read ASCII
    as ASCII (EBCDIC, UTF-7) is ignored, and UTF-16 is applied only to the
    stretches whose bytes have the shape of UTF-16; stretches of ordinary
    8-bit text after a UTF-16 mark (a log that another program appended to)
    are decoded as 8-bit text. Otherwise an attacker's ASCII would come out
    as CJK characters that sanitize cannot read.
    """
    if _PLAIN.get():
        return _checked(plain_text(data))
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            body = data[len(bom):]
            if encoding.startswith("utf-16"):
                return _checked(_decode_utf16(body, encoding))
            if encoding.startswith("utf-32") and not _utf32_plausible(body, encoding):
                return _decode_8bit(body, None)
            return _checked(body.decode(encoding, errors="replace"))
    guessed = _utf16_without_bom(data)
    if guessed:
        return _checked(_decode_utf16(data, guessed))
    return _decode_8bit(data, declared)


def _decode_8bit(data: bytes, declared: str | None) -> str:
    if b"\x00" in data:
        raise Refused(REASON_BINARY)
    for encoding in _candidates(declared):
        if encoding.startswith("utf-32"):
            continue  # UTF-32 without NUL bytes is not UTF-32
        if encoding.startswith("utf-16"):
            if any(is_utf16 for _, is_utf16 in _utf16_segments(data, encoding)):
                return _checked(_decode_utf16(data, encoding))
            continue
        try:
            return _checked(data.decode(encoding))
        except (UnicodeDecodeError, LookupError):
            continue
    return _checked(data.decode("latin-1"))


def ascii_compatible(encoding: str) -> bool:
    """Does the codec read printable ASCII (and tab, CR, LF) as itself? EBCDIC, UTF-7, UTF-16 do not."""
    try:
        return _ASCII_PROBE.decode(encoding) == _ASCII_PROBE.decode("ascii")
    except (UnicodeDecodeError, LookupError):
        return False


def _candidates(declared: str | None) -> list[str]:
    names = []
    if declared:
        try:
            name = codecs.lookup(declared.strip().strip("\"'")).name
        except LookupError:
            name = None
        # As browsers do: a page labelled latin-1 or ASCII is read as cp1252,
        # whose printable range is a superset (curly quotes, dashes, euro).
        if name in ("iso8859-1", "ascii"):
            names.append("cp1252")
        elif name and (ascii_compatible(name) or name.startswith(("utf-16", "utf-32"))):
            names.append(name)
    return names + ["utf-8", "cp1252"]


def _utf16_segments(data: bytes, encoding: str) -> list[tuple[bytes, bool]]:
    """Split bytes into stretches that look like UTF-16 (True) and like 8-bit text (False).

    A window of 16 code units is 8-bit text when at least 15 of its units are
    two printable ASCII bytes: real UTF-16 text has a NUL high byte for
    ASCII, and CJK text has such units about a quarter of the time. An
    8-bit stretch is widened unit by unit over neighbouring ASCII pairs so
    its first and last characters are not read pair-wise.
    """
    unit_ok = [a in _ASCII_BYTES and b in _ASCII_BYTES for a, b in zip(data[0::2], data[1::2])]
    units = len(unit_ok)
    eight_bit = [False] * units
    for first in range(0, units, _UTF16_WINDOW):
        window = unit_ok[first:first + _UTF16_WINDOW]
        needed = _UTF16_EIGHT_BIT if len(window) == _UTF16_WINDOW else len(window)
        if sum(window) >= needed:
            for index in range(first, first + len(window)):
                eight_bit[index] = True
    for index in range(1, units):  # widen 8-bit stretches forwards, then backwards
        if eight_bit[index - 1] and unit_ok[index]:
            eight_bit[index] = True
    for index in range(units - 2, -1, -1):
        if eight_bit[index + 1] and unit_ok[index]:
            eight_bit[index] = True
    segments: list[tuple[bytes, bool]] = []
    start = 0
    for index in range(1, units + 1):
        if index == units or eight_bit[index] != eight_bit[start]:
            end = 2 * index if index < units else len(data)
            segments.append((data[2 * start:end], not eight_bit[start]))
            start = index
    if not segments:
        segments.append((data, True))
    return segments


def _decode_utf16(data: bytes, encoding: str) -> str:
    """UTF-16 where the bytes have its shape, 8-bit text (NULs dropped) where they do not."""
    parts = []
    for chunk, is_utf16 in _utf16_segments(data, encoding):
        if is_utf16:
            parts.append(chunk.decode(encoding, errors="replace"))
        else:
            parts.append(_decode_plain_8bit(chunk.replace(b"\x00", b"")))
    return "".join(parts)


def _decode_plain_8bit(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _utf32_plausible(data: bytes, encoding: str) -> bool:
    """UTF-32 text has two NUL bytes in every code unit below U+10000."""
    sample = data[:4096]
    high = sample[2::4] + sample[3::4] if encoding.endswith("le") else sample[0::4] + sample[1::4]
    return len(sample) >= 4 and high.count(0) >= 0.9 * len(high)


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


def decode_word(data: bytes, declared: str | None = None) -> str:
    """A short piece of text a header holds (an RFC 2047 encoded word, an RFC 2231 file name): the
    same plausibility rule as a body (``decode_text``), so no charset a message names can turn the
    sender's ASCII into another script, or EBCDIC into 8-bit letters, that sanitize cannot read.

    A declared charset that does not read ASCII as ASCII (EBCDIC, UTF-7) is used only when its
    reading of these bytes is plain ASCII text (bytes really in EBCDIC); otherwise the bytes are
    read as any undeclared text. Under ``plain_decoding()`` the word is the dumb view of its
    bytes, and their EBCDIC reading when that is plausible, so extract's byte-level scan sees
    whatever a decoding hid (``reading.hidden_findings``).
    """
    if _PLAIN.get():
        ebcdic = ebcdic_view(data)
        return plain_text(data) + (" " + ebcdic if ebcdic else "")
    try:
        name = codecs.lookup(declared.strip().strip("\"'")).name if declared else None
    except LookupError:
        name = None
    if name and not ascii_compatible(name) and not name.startswith(("utf-16", "utf-32")):
        try:
            text = data.decode(name)
        except (UnicodeDecodeError, LookupError):
            text = ""
        if text and _plain_ascii_share(text) >= EBCDIC_TEXT_SHARE:
            return text
        name = None
    try:
        return decode_text(data, name)
    except Refused:  # NUL or control bytes: shown as they are, never hidden
        return plain_text(data)


# EBCDIC (a mainframe's text, copied in binary mode) has no byte of ASCII's
# printable range for a letter or a digit: every decoding here reads it as
# 8-bit garbage ("õóö`òò`ø÷ñô" is an SSN), and the plain view as well, so
# nothing was found and the garbage, an SSN to anyone who encodes it back,
# went to the store. Bytes that are mostly above 0x7f and read as plain
# ASCII text in cp500 are scanned in that decoding too.
EBCDIC = "cp500"
EBCDIC_HIGH_SHARE = 0.3
EBCDIC_TEXT_SHARE = 0.95
_NOT_PLAIN_ASCII = re.compile("[^\t\n\r\x20-\x7e\x85]")


def _plain_ascii_share(text: str) -> float:
    return (len(text) - len(_NOT_PLAIN_ASCII.findall(text))) / len(text) if text else 0.0


def ebcdic_view(data: bytes) -> str | None:
    """``data`` read as EBCDIC when it is plausibly EBCDIC text, else None."""
    sample = data[:65536]
    if not sample or len(sample.translate(None, bytes(range(0x80)))) < EBCDIC_HIGH_SHARE * len(sample):
        return None
    if _plain_ascii_share(sample.decode(EBCDIC)) < EBCDIC_TEXT_SHARE:
        return None
    return data.decode(EBCDIC).replace("\x85", "\n")  # EBCDIC's own newline, NEL


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
