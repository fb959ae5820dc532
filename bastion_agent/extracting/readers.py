"""Turn one file's bytes into plain text: pick the format, run its reader, count a refusal.

Which formats exist, their suffixes, readers and versions, is one table:
``formats/registry.py``. Every reader (in ``bastion_agent.extracting.formats``) is a pure function of the bytes:
the same bytes always give the same text, because chunk ids are derived from
that text. A reader never stops the stage: whatever it cannot read comes
back as a ``Reading`` whose ``reason`` says why ("binary", "damaged", ...),
and the extract stage counts it.

Only the standard library is used here; PDF lives in ``pdf.py`` because it
needs the optional ``pypdf`` extra, imported only when a PDF is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from bastion_agent.extracting.formats import compressed, registry
from bastion_agent.extracting.formats.base import (
    REASON_BINARY,
    REASON_DAMAGED,
    REASON_EMPTY,
    REASON_OUTPUT,
    OutputMeter,
    Paged,
    Refused,
)


@dataclass(frozen=True)
class Reading:
    """What a reader made of a file: text, or the reason there is none.

    ``ocr_pages`` is None for a text without pages; for a PDF or an image,
    the pages (numbers from 1) that OCR recognised, possibly none.
    """

    text: str | None
    reason: str | None = None
    ocr_pages: tuple[int, ...] | None = None

    @classmethod
    def skip(cls, reason: str) -> "Reading":
        return cls(None, reason)


def kind_for(name: str, head: bytes) -> str:
    """The kind of a file from its name, or from its first bytes when the name says nothing.

    A compressed file (``.gz``, ``.bz2``, ``.xz``) is the kind of the file it
    holds, named by the rest of its name, plus the suffix: ``text.gz``,
    ``html.bz2``; one that holds an archive or another compressed file is ``binary``.
    """
    inner, packed = compressed.split_suffix(PurePosixPath(name).name)
    if packed is not None:
        kind = _kind_by_name(inner, b"")
        return f"{kind}{packed}" if kind in registry.READABLE else "binary"
    return _kind_by_name(name, head)


def _kind_by_name(name: str, head: bytes) -> str:
    """First bytes that name a format, then the suffix, then a format's own test of name and head."""
    suffix = PurePosixPath(name).suffix.lower()
    for magic, kind in registry.MAGIC:
        if head.startswith(magic):
            return kind
    if suffix in registry.KINDS_BY_SUFFIX:
        return registry.KINDS_BY_SUFFIX[suffix]
    if suffix in registry.BINARY_SUFFIXES:
        return "binary"
    for recognises, kind in registry.RECOGNISERS:
        if recognises(suffix, head):
            return kind  # a man page: ls.1, base64.1.gz, Net::HTTP.3pm
    return "text"


def read(kind: str, data: bytes, max_chars: int | None = None,
         max_bytes: int = compressed.DEFAULT_MAX_BYTES) -> Reading:
    """Text of ``data`` read as ``kind``; never raises on bad input.

    ``max_chars`` caps the text: readers that expand their input stop as
    soon as they pass it, and the file is skipped as ``too_costly: output``.
    A ``MemoryError`` is left to the caller: in a budgeted worker it means
    the memory budget, which the parent reports as such. ``max_bytes`` (the
    manifest's ``max_file_bytes``) bounds what a compressed file may unpack to.
    """
    inner, packed = compressed.split_kind(kind)
    fmt = registry.READABLE.get(inner)
    if fmt is None:
        return Reading.skip(REASON_BINARY)
    reader = fmt.reader
    OutputMeter.left = max_chars
    try:
        if packed is not None:
            data = compressed.unpack(packed, data, max_bytes)
        text = reader(data)
        ocr_pages = None
        if isinstance(text, Paged):
            text, ocr_pages = text.text, text.ocr_pages
    except Refused as refused:
        return Reading.skip(refused.reason)
    except RecursionError:
        return Reading.skip(REASON_DAMAGED)
    except MemoryError:
        raise
    except Exception:  # a hostile file must never stop the stage; it is counted instead
        return Reading.skip(REASON_DAMAGED)
    finally:
        OutputMeter.left = None
    if max_chars is not None and len(text) > max_chars:
        return Reading.skip(REASON_OUTPUT)
    text = normalise(text)
    if not text.strip():
        return Reading.skip(REASON_EMPTY)
    return Reading(text, ocr_pages=ocr_pages)


def normalise(text: str) -> str:
    """Newlines as ``\\n``, no BOM, no NUL; nothing else is touched."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\u2028", "\n").replace("\u2029", "\n")
    if text.startswith("\ufeff"):
        text = text[1:]
    if _SURROGATE.search(text):  # e.g. RTF's \uN pairs: join them, replace lone halves
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", "")


_SURROGATE = re.compile("[\ud800-\udfff]")


COMPRESSED_VERSION = "2"  # 2: the byte-level scan reads what a compressed file holds (texts kept by 1 are read again)
KINDS = frozenset(registry.READABLE) | {kind + suffix for kind in registry.READABLE for suffix in compressed.SUFFIXES}


def unavailable(kind: str) -> str | None:
    """Why ``kind`` cannot be read here at all (an extra not installed), else None.

    Asked by the extract stage before it sends a file to a worker, so the
    listing and ``version`` agree on what this installation can read.
    """
    fmt = registry.READABLE.get(kind)
    if fmt is None or fmt.unavailable is None:
        return None
    return fmt.unavailable()


def versions() -> dict[str, str | None]:
    """Every readable kind's version (None: not readable here now), in kind order: the summary's ``readers``."""
    return {kind: version(kind) for kind in sorted(KINDS)}


def version(kind: str) -> str | None:
    """What the text of ``kind`` depends on besides the bytes; None when it cannot be read now.

    A stored text is reused only when this is unchanged, so upgrading a
    reader (its ``version`` in the registry, or ``base.DECODING_VERSION``
    for all of them) or installing the PDF extra re-extracts what it affects.
    """
    inner, packed = compressed.split_kind(kind)
    if packed is not None:
        inner_version = version(inner)
        return None if inner_version is None else f"{inner_version}+{packed[1:]}-{COMPRESSED_VERSION}"
    return registry.version_of(kind)
