"""Turn one file's bytes into plain text: pick the format, run its reader, count a refusal.

Every reader (in ``bastion_agent.extracting.formats``) is a pure function of the bytes:
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

from bastion_agent.extracting.formats import compressed, htmltext, mail, office, ocr, rtf
from bastion_agent.extracting.formats import htmlmain, troff
from bastion_agent.extracting.formats.base import (
    REASON_BINARY,
    REASON_DAMAGED,
    REASON_EMPTY,
    REASON_OUTPUT,
    OutputMeter,
    Paged,
    Refused,
    decode_text,
)

# Bump when any core reader's output changes: stored texts made by another
# version are extracted again instead of reused.
READER_VERSION = "4"  # 2: plausible decodings (UTF-16 shapes, ASCII-compatible charsets); 3: linear readers, output caps; 4: tables in one normal form (rows as lines, cells by tabs, spans kept)


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


_KINDS_BY_SUFFIX = {
    ".md": "markdown", ".markdown": "markdown", ".mdown": "markdown", ".mkd": "markdown",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".docx": "docx", ".docm": "docx", ".dotx": "docx",
    ".odt": "odt", ".ods": "ods", ".odp": "odp",
    ".pptx": "pptx", ".pptm": "pptx",
    ".xlsx": "xlsx", ".xlsm": "xlsx",
    ".eml": "eml",
    ".pdf": "pdf",
    ".rtf": "rtf",
    ".csv": "csv", ".tsv": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".xml": "xml", ".svg": "xml",
    # Scans, read by OCR (formats/ocr.py, extra ocr): their own kinds, so the listing says which
    ".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".tif": "tiff", ".tiff": "tiff",
    ".webp": "webp", ".bmp": "bmp", ".gif": "gif",
}
IMAGE_KINDS = frozenset({"png", "jpeg", "tiff", "webp", "bmp", "gif"})

# Formats that are binary by nature and that no reader here opens: they are
# skipped as "binary" without being decoded as text.
_BINARY_SUFFIXES = frozenset(
    ".doc .xls .ppt .msg .zip .gz .tgz .tbz2 .txz .bz2 .xz .zst .lz .lz4 .7z .rar .tar .jar .png .jpg .jpeg .gif .bmp .tif .tiff "
    ".webp .ico .heic .mp3 .mp4 .m4a .wav .flac .ogg .avi .mov .mkv .webm .exe .dll .so .dylib .o .a "
    ".class .pyc .wasm .bin .iso .dmg .sqlite .db .woff .woff2 .ttf .otf .eot .psd".split()
)

def kind_for(name: str, head: bytes) -> str:
    """The kind of a file from its name, or from its first bytes when the name says nothing.

    A compressed file (``.gz``, ``.bz2``, ``.xz``) is the kind of the file it
    holds, named by the rest of its name, plus the suffix: ``text.gz``,
    ``html.bz2``; one that holds an archive or another compressed file is ``binary``.
    """
    inner, packed = compressed.split_suffix(PurePosixPath(name).name)
    if packed is not None:
        kind = _kind_by_name(inner, b"")
        return f"{kind}{packed}" if kind in _READERS else "binary"
    return _kind_by_name(name, head)


def _kind_by_name(name: str, head: bytes) -> str:
    suffix = PurePosixPath(name).suffix.lower()
    if head.startswith(b"%PDF-"):
        return "pdf"
    if suffix in _KINDS_BY_SUFFIX:
        return _KINDS_BY_SUFFIX[suffix]
    if suffix in _BINARY_SUFFIXES:
        return "binary"
    if troff.is_page_name(suffix) or (not suffix and troff.looks_like_page(head)):
        return "troff"  # a man page: ls.1, base64.1.gz, Net::HTTP.3pm
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
    inner, packed = _split_kind(kind)
    reader = _READERS.get(inner)
    if reader is None:
        return Reading.skip(REASON_BINARY)
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


def _read_text(data: bytes) -> str:
    return decode_text(data)


def _read_pdf(data: bytes) -> Paged:
    from bastion_agent.extracting import pdf

    reading = pdf.read_pdf(data)
    if reading.text is None:
        raise Refused(reading.reason)
    return Paged(reading.text, reading.ocr_pages)


_READERS = {
    "text": _read_text,
    "markdown": _read_text,
    "csv": _read_text,
    "json": _read_text,
    "xml": _read_text,
    "html": htmlmain.read_html_main,
    "docx": office.read_docx,
    "odt": office.read_odf,
    "ods": office.read_odf,
    "odp": office.read_odf,
    "pptx": office.read_pptx,
    "xlsx": office.read_xlsx,
    "eml": mail.read_eml,
    "rtf": rtf.read_rtf,
    "pdf": _read_pdf,
    "troff": troff.read_troff,
    **{image: ocr.read_image for image in IMAGE_KINDS},
}

# Kinds whose reader changed after READER_VERSION 3 on their own: their texts are read again.
_KIND_VERSIONS = {"troff": "troff1", "html": "main1"}  # html: the main content, not the site chrome

def _split_kind(kind: str) -> tuple[str, str | None]:
    """``("text", ".gz")`` for ``text.gz``; ``(kind, None)`` for a kind that is not compressed."""
    for suffix in compressed.SUFFIXES:
        if kind.endswith(suffix):
            return kind[: -len(suffix)], suffix
    return kind, None


COMPRESSED_VERSION = "2"  # 2: the byte-level scan reads what a compressed file holds (texts kept by 1 are read again)
KINDS = frozenset(_READERS) | {kind + suffix for kind in _READERS for suffix in compressed.SUFFIXES}


def unavailable(kind: str) -> str | None:
    """Why ``kind`` cannot be read here at all (an extra not installed), else None.

    Asked by the extract stage before it sends a file to a worker, so the
    listing and ``version`` agree on what this installation can read.
    """
    if kind == "pdf":
        from bastion_agent.extracting import pdf

        return None if pdf.available() else pdf.REASON_NOT_INSTALLED
    if kind in IMAGE_KINDS:
        return ocr.unavailable()
    return None


def version(kind: str) -> str | None:
    """What the text of ``kind`` depends on besides the bytes; None when it cannot be read now.

    A stored text is reused only when this is unchanged, so upgrading a
    reader (or installing the PDF extra) re-extracts what it affects.
    """
    inner, packed = _split_kind(kind)
    if packed is not None:
        inner_version = version(inner)
        return None if inner_version is None else f"{inner_version}+{packed[1:]}-{COMPRESSED_VERSION}"
    if kind == "pdf":
        from bastion_agent.extracting import pdf

        return pdf.version()
    if kind in _KIND_VERSIONS:
        return f"{READER_VERSION}+{_KIND_VERSIONS[kind]}"
    if kind in IMAGE_KINDS:
        return ocr.version()
    if kind in _READERS:
        return READER_VERSION
    return None
