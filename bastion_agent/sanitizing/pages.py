"""Pages of a document: where each page starts in the *sanitized* text, and whether OCR read it.

Extract writes the pages of a PDF or of a multi-page image with
``PAGE_BREAK`` between them (a form feed on a line of its own: a line-based
rule sees a blank line there, as it saw before pages were marked), and keeps
in its private listing which pages it recognised by OCR. Sanitize never
removes a form feed (``scanner.replace_findings`` keeps those of a redacted span)
and never adds one, so the n-th form feed of the sanitized text is the n-th
page break of the raw text. The page map is computed from the sanitized
text alone, after sanitizing: its offsets are offsets in the sanitized text,
never in the raw one (a raw offset would tell how long a redacted value was).

A map is a list of ``[start, page, ocr]``: ``start`` the offset in the
sanitized text where page ``page`` (counted from 1) starts, ``ocr`` whether
OCR read it. Pages without a visible character have no entry (no window can
start in them), so a PDF of thousands of blank pages has a short map, and no
map ever has more than ``MAX_PAGES`` entries: a text with more page breaks
than that gets the one entry ``[0, None, any_ocr]``, which still says that
recognition errors are possible, without page numbers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# The catalogue refuses a longer map as forged; extract reads no PDF of more pages (pdf.MAX_PAGES),
# nor recognises more than 500.
from bastion_agent.core.catalogue import MAX_PAGES

FORM_FEED = "\f"
PAGE_BREAK = "\n\f\n"


@dataclass(frozen=True)
class Where:
    """What a hit says about its page: whether OCR read it, and its number (None: not a paged document)."""

    ocr: bool = False
    page: int | None = None


def page_map(clean: str, ocr_pages) -> list[list]:
    """The map of a sanitized text whose pages ``ocr_pages`` (numbers from 1) were recognised by OCR."""
    recognised = {page for page in ocr_pages if isinstance(page, int) and not isinstance(page, bool)}
    if clean.count(FORM_FEED) >= MAX_PAGES:
        return [[0, None, bool(recognised)]]
    entries, start = [], 0
    for number, text in enumerate(clean.split(FORM_FEED), start=1):
        if text.strip():
            entries.append([start, number, number in recognised])
        start += len(text) + 1
    return entries


def where(entries, position: int) -> Where:
    """The page holding ``position`` of the sanitized text, by its map (``[]``/None: no pages)."""
    if not entries or not isinstance(entries, list):
        return Where()
    try:
        starts = [entry[0] for entry in entries]
        if not all(type(start) is int for start in starts):
            return Where()
        index = max(0, bisect.bisect_right(starts, position) - 1)
        _, page, ocr = entries[index]
    except (TypeError, ValueError, IndexError, KeyError):  # a map changed by hand: no page rather than a failed search
        return Where()
    return Where(ocr is True, page if isinstance(page, int) and not isinstance(page, bool) else None)
