"""``.gz``, ``.bz2``, ``.xz``: a compressed file is read as the file it contains.

Debian ships every changelog as ``changelog.Debian.gz``; skipping them hides
exactly what people search a documentation folder for. The inner file's
kind comes from the name without the compression suffix
(``NEWS.md.gz`` is Markdown, ``changelog.gz`` text), and its reader runs on
the unpacked bytes.

A compressed file is also the classic bomb: a few kilobytes of gzip unpack
to gigabytes. So the bytes are unpacked in pieces of ``PIECE_BYTES``
(``read(n)`` on the standard library's decompressing files asks the
decompressor for at most ``n`` bytes), and unpacking stops, refused as
``too large unpacked``, as soon as the output passes the manifest's
``max_file_bytes`` (the limit every file meets) or, past
``RATIO_FLOOR_BYTES``, ``MAX_RATIO`` times the compressed size (text
compresses 3-10 times; far more is a bomb, refused before the size limit is
even reached). Memory is bounded by the limit, never by what the header
claims. No nesting: a ``.tar.gz`` or ``.gz.gz`` is not unpacked.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib

from bastion_agent.extracting.formats.base import (
    REASON_DAMAGED,
    REASON_UNPACKED,
    Refused,
)

PIECE_BYTES = 1024 * 1024
MAX_RATIO = 250
RATIO_FLOOR_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # the manifest's default max_file_mb

# suffix -> a file object that unpacks what it reads
OPENERS = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    ".bz2": lambda raw: bz2.BZ2File(raw, mode="rb"),
    ".xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),
}
SUFFIXES = tuple(OPENERS)
_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)


def split_suffix(name: str) -> tuple[str, str | None]:
    """``("changelog.Debian", ".gz")`` for ``changelog.Debian.gz``; ``(name, None)`` when not compressed."""
    lowered = name.lower()
    for suffix in SUFFIXES:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return name, None


def split_kind(kind: str) -> tuple[str, str | None]:
    """``("text", ".gz")`` for the kind ``text.gz``; ``(kind, None)`` for a kind that is not compressed."""
    for suffix in SUFFIXES:
        if kind.endswith(suffix):
            return kind[: -len(suffix)], suffix
    return kind, None


def unpack(suffix: str, data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The unpacked bytes of ``data``, or ``Refused`` ("too large unpacked", "damaged")."""
    limit = min(max_bytes, max(RATIO_FLOOR_BYTES, MAX_RATIO * len(data)))
    out = bytearray()
    try:
        with OPENERS[suffix](io.BytesIO(data)) as stream:
            while True:
                piece = stream.read(PIECE_BYTES)
                if not piece:
                    return bytes(out)
                out += piece
                if len(out) > limit:
                    raise Refused(REASON_UNPACKED)
    except _ERRORS:
        raise Refused(REASON_DAMAGED) from None
