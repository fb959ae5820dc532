"""Every file format extract knows, one ``FileFormat`` record each, and the tables derived from them.

A format used to be written into four tables in two modules (suffixes,
binary suffixes, readers, the kinds the byte-level scan reads) plus a
version kept by hand; forgetting one of them failed silently (a format
missing from the scan's kinds was simply never scanned). Here a format is
one entry of ``FORMATS``; ``readers.py`` (which reader for which file) and
``reading.py`` (the byte-level scan) read only the tables below.

The byte-level scan (``reading.hidden_findings``) reads a document a second
time under ``base.plain_decoding()`` and quarantines it when its raw bytes
show a finding that the decoded text hides. So every format states how the
scan covers it:

- ``decodes_text=True``: its bytes are text that a charset decodes, which is
  where a decoding can hide text. Its reader must decode through
  ``base.decode_text`` (or otherwise honour ``plain_decoding()``) so that the
  second reading shows every byte; ``formats/test_registry.py`` proves it
  for each such format. A reader that drops parts on purpose (comments,
  site chrome) also names ``whole_view``: the whole text, which the scan
  reads too, so nothing is hidden in the dropped parts.
- ``decodes_text=False``: the bytes are a container (ZIP, PDF, an image)
  whose text no charset decodes; ``not_text_because`` says so, and such a
  document is never quarantined.

Adding a format: a reader module in this folder, an entry here, its tests
beside them (``test_registry.py`` asks a sample of every format that
decodes text), and a row in docs/extract.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bastion_agent.extracting.formats import htmlmain, htmltext, mail, ocr, office, rtf, troff
from bastion_agent.extracting.formats.base import DECODING_VERSION, Paged, Refused, decode_text


@dataclass(frozen=True)
class FileFormat:
    """One kind of file: how it is recognised, read, scanned and versioned.

    ``version`` is this reader's own revision: a stored text is reused only
    while ``version_of(kind)`` is unchanged, so bumping it re-reads the
    files of this kind and no other. ``installed_version`` replaces the
    whole version for a format read by an optional extra (PDF, OCR): what
    the text depends on is then the extra's version, and None when it is
    not installed. ``reader`` None: a format known to be binary, never opened.
    """

    kind: str
    suffixes: tuple[str, ...]
    reader: Callable[[bytes], str | Paged] | None
    decodes_text: bool = False
    not_text_because: str = ""
    whole_view: Callable[[bytes], str] | None = None
    version: str = ""
    installed_version: Callable[[], str | None] | None = None
    unavailable: Callable[[], str | None] | None = None
    magic: bytes | None = None  # first bytes that name the format whatever the file is called
    recognises: Callable[[str, bytes], bool] | None = None  # (suffix, first bytes) when no suffix matched


def read_text(data: bytes) -> str:
    """Plain text, Markdown, CSV, JSON, XML: the decoded bytes as they are."""
    return decode_text(data)


def _read_pdf(data: bytes) -> Paged:
    from bastion_agent.extracting import pdf

    reading = pdf.read_pdf(data)
    if reading.text is None:
        raise Refused(reading.reason)
    return Paged(reading.text, reading.ocr_pages)


def _pdf_version() -> str | None:
    from bastion_agent.extracting import pdf

    return pdf.version()


def _pdf_unavailable() -> str | None:
    from bastion_agent.extracting import pdf

    return None if pdf.available() else pdf.REASON_NOT_INSTALLED


def _is_man_page(suffix: str, head: bytes) -> bool:
    """``ls.1``, ``Net::HTTP.3pm``, or a file without a suffix that starts like a page."""
    return troff.is_page_name(suffix) or (not suffix and troff.looks_like_page(head))


def _troff_whole(data: bytes) -> str:
    """The page's raw text: the reader drops comments and requests, the scan must not."""
    return decode_text(data)


_ZIP = "a ZIP container of XML parts, not text in a charset"
_SCAN = "an image: OCR reads its pixels, no charset applies"


def _text(kind: str, *suffixes: str) -> FileFormat:
    return FileFormat(kind, suffixes, read_text, decodes_text=True)


def _image(kind: str, *suffixes: str) -> FileFormat:
    return FileFormat(kind, suffixes, ocr.read_image, not_text_because=_SCAN,
                      installed_version=ocr.version, unavailable=ocr.unavailable)


FORMATS: tuple[FileFormat, ...] = (
    _text("text"),
    _text("markdown", ".md", ".markdown", ".mdown", ".mkd"),
    _text("csv", ".csv", ".tsv"),
    _text("json", ".json", ".jsonl", ".ndjson"),
    _text("xml", ".xml", ".svg"),
    FileFormat("html", (".html", ".htm", ".xhtml"), htmlmain.read_html_main, decodes_text=True,
               whole_view=htmltext.read_html, version="main1"),  # main1: the main content, not the site chrome
    FileFormat("docx", (".docx", ".docm", ".dotx"), office.read_docx, not_text_because=_ZIP),
    FileFormat("odt", (".odt",), office.read_odf, not_text_because=_ZIP),
    FileFormat("ods", (".ods",), office.read_odf, not_text_because=_ZIP),
    FileFormat("odp", (".odp",), office.read_odf, not_text_because=_ZIP),
    FileFormat("pptx", (".pptx", ".pptm"), office.read_pptx, not_text_because=_ZIP),
    FileFormat("xlsx", (".xlsx", ".xlsm"), office.read_xlsx, not_text_because=_ZIP),
    FileFormat("eml", (".eml",), mail.read_eml, decodes_text=True),
    FileFormat("pdf", (".pdf",), _read_pdf, not_text_because="PDF objects and streams, read by pypdf",
               installed_version=_pdf_version, unavailable=_pdf_unavailable, magic=b"%PDF-"),
    FileFormat("rtf", (".rtf",), rtf.read_rtf, decodes_text=True),
    FileFormat("troff", (), troff.read_troff, decodes_text=True, whole_view=_troff_whole, version="troff1",
               recognises=_is_man_page),
    _image("png", ".png"),
    _image("jpeg", ".jpg", ".jpeg"),
    _image("tiff", ".tif", ".tiff"),
    _image("webp", ".webp"),
    _image("bmp", ".bmp"),
    _image("gif", ".gif"),
    # Binary by nature and opened by no reader here: skipped as "binary" without being decoded as text.
    FileFormat("binary", tuple(
        ".doc .xls .ppt .msg .zip .gz .tgz .tbz2 .txz .bz2 .xz .zst .lz .lz4 .7z .rar .tar .jar .ico .heic "
        ".mp3 .mp4 .m4a .wav .flac .ogg .avi .mov .mkv .webm .exe .dll .so .dylib .o .a .class .pyc .wasm "
        ".bin .iso .dmg .sqlite .db .woff .woff2 .ttf .otf .eot .psd".split()), None),
)

# ---------------------------------------------------------------- derived tables

BY_KIND: dict[str, FileFormat] = {fmt.kind: fmt for fmt in FORMATS}
READABLE: dict[str, FileFormat] = {fmt.kind: fmt for fmt in FORMATS if fmt.reader is not None}
KINDS_BY_SUFFIX: dict[str, str] = {suffix: fmt.kind for fmt in FORMATS if fmt.reader for suffix in fmt.suffixes}
BINARY_SUFFIXES = frozenset(suffix for fmt in FORMATS if fmt.reader is None for suffix in fmt.suffixes)
MAGIC: tuple[tuple[bytes, str], ...] = tuple((fmt.magic, fmt.kind) for fmt in FORMATS if fmt.magic)
RECOGNISERS: tuple[tuple[Callable[[str, bytes], bool], str], ...] = tuple(
    (fmt.recognises, fmt.kind) for fmt in FORMATS if fmt.recognises)
# Kinds whose bytes are text a reader decodes: the ones a decoding can hide text in.
QUARANTINE_KINDS = frozenset(fmt.kind for fmt in FORMATS if fmt.decodes_text)


def version_of(kind: str) -> str | None:
    """What a text of ``kind`` (not compressed) depends on besides its bytes; None when it cannot be read now.

    The shared decoding's version (``base.DECODING_VERSION``), then the
    format's own revision when it has one: ``4``, ``4+main1``. A format
    read by an extra answers with the extra's version.
    """
    fmt = READABLE.get(kind)
    if fmt is None:
        return None
    if fmt.installed_version is not None:
        return fmt.installed_version()
    return f"{DECODING_VERSION}+{fmt.version}" if fmt.version else DECODING_VERSION
