"""Rich Text Format as plain text, with a small tokenizer (the standard library has no RTF reader)."""

from __future__ import annotations

import codecs
import re

from bastion_agent.extracting.formats.base import (
    REASON_DAMAGED,
    Refused,
    ascii_compatible,
    plain_mode,
    tidy_lines,
)

_RTF_TOKEN = re.compile(rb"\\([a-zA-Z]+)(-?\d+)? ?|\\'([0-9a-fA-F]{2})|\\(.)|([{}])|([^\\{}\r\n]+)|[\r\n]+", re.DOTALL)
_RTF_SKIP_DESTINATIONS = frozenset(
    b"fonttbl colortbl stylesheet info pict object header footer headerl headerr headerf footerl footerr "
    b"footerf listtable listoverridetable rsidtbl generator themedata colorschememapping datastore "
    b"latentstyles xmlnstbl fldinst bkmkstart bkmkend".split()
)
_RTF_SYMBOLS = {b"~": "\xa0", b"-": "", b"_": "-", b"\n": "\n", b"\r": "\n"}
_RTF_BREAKS = {b"par": "\n", b"line": "\n", b"sect": "\n\n", b"page": "\n\n", b"tab": "\t", b"cell": "\t", b"row": "\n"}


def read_rtf(data: bytes) -> str:
    """Plain text of an RTF document: control words dropped, paragraphs kept.

    Hidden destinations (font and colour tables, pictures, document info,
    field instructions) are skipped; ``\\'hh`` escapes use the document's
    ``\\ansicpg`` code page (cp1252 by default); ``\\uN`` is a Unicode
    character followed by ``\\ucN`` fallback characters that are dropped.
    """
    if not data.lstrip().startswith(b"{\\rtf"):
        raise Refused(REASON_DAMAGED)
    codepage = "cp1252"
    out: list[str] = []
    stack: list[tuple[bool, int]] = []
    skipping, uc, pending_skip = False, 1, 0
    pending_bytes = bytearray()

    def flush():
        if pending_bytes:
            out.append(pending_bytes.decode(codepage, errors="replace"))
            pending_bytes.clear()

    for match in _RTF_TOKEN.finditer(data):
        word, arg, hexbyte, symbol, brace, plain = match.groups()
        if pending_skip:  # the fallback characters after \uN
            if hexbyte or symbol:
                pending_skip -= 1
                continue
            if plain:
                if len(plain) <= pending_skip:
                    pending_skip -= len(plain)
                    continue
                plain, pending_skip = plain[pending_skip:], 0
            else:
                pending_skip = 0
        if brace == b"{":
            stack.append((skipping, uc))
        elif brace == b"}":
            flush()
            skipping, uc = stack.pop() if stack else (skipping, uc)
        elif symbol == b"*":
            skipping = True
        elif word is not None:
            if word in _RTF_SKIP_DESTINATIONS:
                skipping = True
            elif word == b"ansicpg" and arg and not plain_mode():
                codepage = _rtf_codepage(arg)
            elif word == b"uc" and arg:
                uc = max(0, int(arg))
            elif skipping:
                continue
            elif word == b"u" and arg:
                flush()
                out.append(chr(int(arg) % 65536))
                pending_skip = uc
            elif word in _RTF_BREAKS:
                flush()
                out.append(_RTF_BREAKS[word])
        elif skipping:
            continue
        elif hexbyte:
            pending_bytes.append(int(hexbyte, 16))
        elif symbol is not None:
            flush()
            out.append(_RTF_SYMBOLS.get(symbol, symbol.decode("latin-1")))
        elif plain:
            flush()
            out.append(plain.decode(codepage, errors="replace"))
    flush()
    return tidy_lines("".join(out))


def _rtf_codepage(arg: bytes) -> str:
    """The code page of ``\\ansicpgN`` when it reads ASCII as ASCII, else cp1252.

    RTF is written in 7-bit ASCII; a code page that maps ASCII bytes to
    other characters (EBCDIC cp500, cp037...) is never what the author
    meant, and would turn the document's plain text into symbols that
    sanitize cannot read.
    """
    name = f"cp{int(arg)}"
    try:
        codecs.lookup(name)
    except LookupError:
        return "cp1252"
    return name if ascii_compatible(name) else "cp1252"
