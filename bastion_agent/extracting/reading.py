"""Reading one file in a budgeted worker: its reader, then the byte-level scan.

Both run in the worker ``budget.py`` starts for each file (task ``read``),
under the file's memory, time and output budget: a hostile file costs that
file at most. The scan is extract's second wall against decodings that hide
text (the first is ``formats.base``'s plausible decodings): the bytes are
read again with every byte visible, and a finding the decoded text does not
show quarantines the document before any of its text is kept.
"""

from __future__ import annotations

from bastion_agent.core.budget import COSTLY_REASONS, Budget
from bastion_agent.extracting import readers
from bastion_agent.extracting.formats import compressed, ocr, registry
from bastion_agent.extracting.formats.base import Refused, ebcdic_view, plain_decoding
from bastion_agent.sanitizing.normalise import lookalike_view
from bastion_agent.sanitizing.scanner import merge, sanitizer_for
from bastion_agent.sanitizing.settings import SanitizeSettings

# Kinds whose bytes are text a reader decodes (``FileFormat.decodes_text``): the ones a decoding can hide text in.
QUARANTINE_KINDS = registry.QUARANTINE_KINDS
QUARANTINE = "quarantined"


def hidden_findings(data: bytes, text: str, settings: SanitizeSettings | None, kind: str = "text",
                    max_bytes: int = compressed.DEFAULT_MAX_BYTES) -> list[str]:
    """Rule ids of what the raw bytes show and the extracted text does not.

    The document is read a second time by the same reader under
    ``formats.base.plain_decoding()`` (NUL bytes dropped, every other byte
    one latin-1 character, RTF in cp1252), so whatever ASCII the bytes hold
    is visible whatever charset the document claims. A finding of that
    view whose value is ASCII and appears nowhere in the extracted text (or
    its look-alike view) was hidden by the decoding: extract quarantines
    the document. Findings with non-ASCII characters are left out, since
    the plain view garbles those by design; parts the reader drops anyway
    (HTML comments and scripts, e-mail headers other than the five it
    keeps) are dropped from the view too, so they quarantine nothing.

    A compressed document (``html.gz``) is scanned as the document it
    holds: its packed bytes show nothing, and the same hiding inside a
    ``.gz`` would otherwise go to the store unseen.
    """
    inner, packed = compressed.split_kind(kind)
    if inner not in QUARANTINE_KINDS or not data:
        return []
    if packed is not None:
        try:
            data = compressed.unpack(packed, data, max_bytes)
        except Refused:  # it was read once already; it unpacks the same way
            return []
        kind = inner
    with plain_decoding():
        plain = readers.read(kind, data).text
    dropped_plain, dropped_shown = _dropped_views(kind, data)
    views = [view for view in (plain, ebcdic_view(data), dropped_plain) if view and view != text]
    if not views:
        return []
    sanitizer = sanitizer_for(settings)
    normal = lookalike_view(text)
    seen = (text, normal.text if normal else text) + dropped_shown
    hidden = set()
    for view in views:
        for finding in merge(sanitizer.findings(view)):
            value = view[finding.start:finding.end].strip()
            if value and value.isascii() and not any(value in shown for shown in seen):
                hidden.add(finding.rule)
    return sorted(hidden)


def _dropped_views(kind: str, data: bytes) -> tuple[str | None, tuple[str, ...]]:
    """What a reader leaves out on purpose, in the plain view and as the document shows it.

    The man-page reader drops comments and requests, the HTML reader the
    site chrome around the main content: their ``FileFormat.whole_view``
    gives the whole (the raw text of a page; the whole visible text of
    HTML). Dropped text is not indexed, but the scan must still see it: the
    plain view of the whole is scanned too, and a value found there counts
    as shown when the same whole, decoded as the document says, holds it
    (a licence e-mail in a man page's comment is dropped, not hidden). Only
    a value that the decoding itself hides quarantines the document,
    wherever in the file it sits.
    """
    whole_view = registry.BY_KIND[kind].whole_view
    if whole_view is None:
        return None, ()
    try:
        with plain_decoding():
            plain = whole_view(data)
        return plain, (whole_view(data),)
    except Refused:
        return None, ()


def budget_task_read(note, kind: str, data: bytes, settings=None, max_bytes: int | None = None,
                     ocr_settings: ocr.OcrSettings | None = None) -> tuple[dict, bytes]:
    """Read one file's bytes as ``kind``; the text comes back as UTF-8 (surrogates escaped).

    The byte-level scan (``hidden_findings``) runs here too, under
    the same budget: a document whose bytes show a finding its decoded text
    hides comes back quarantined, without its text. A paged text (a PDF,
    an image) says in the header which pages OCR read (``ocr_pages``).
    """
    unpack_limit = {} if max_bytes is None else {"max_bytes": max_bytes}
    if ocr_settings is not None:
        ocr.configure(ocr_settings)  # [source] ocr, ocr_languages: the parent's choice, for the scans
    reading = readers.read(kind, data, max_chars=Budget.output_for(len(data)), **unpack_limit)
    if reading.text is None:
        if reading.reason in COSTLY_REASONS:
            return {"costly": reading.reason}, b""
        return {"reason": reading.reason}, b""
    hidden = hidden_findings(data, reading.text, settings, kind, **unpack_limit)
    if hidden:
        return {"reason": f"{QUARANTINE}: {', '.join(hidden)}"}, b""
    header = {} if reading.ocr_pages is None else {"ocr_pages": list(reading.ocr_pages)}
    return header, reading.text.encode("utf-8", "surrogatepass")
