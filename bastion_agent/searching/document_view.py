"""The whole sanitized document behind a hit, as a caller may read it: its windows in order, overlaps once.

A hit is one window; a reader who wants the context opens the document.
The view is made from vectors.db alone (the windows' sanitized text, the
document's paths the caller may see and their dates, its groups and page map), never from the extract store
or even the sanitized store, so it shows exactly what search may show.

The windows' offsets are offsets in the sanitized text, so the view keeps
them: a window is placed at its ``start``, an overlap is written once, and
whitespace between two windows that do not touch (only possible with
``overlap_tokens = 0``) becomes one space per character. A hit's span and
the page map then apply to the view's text as they are.

A document its caller may not read is answered exactly as one that does not
exist: the same ``None``, after the same one query of the same rows, so
asking for ids tells nothing about what other groups hold.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field

from bastion_agent.core import access, document_hits
from bastion_agent.sanitizing.pages import where

DOC_ID = re.compile(r"[0-9a-f]{64}")
MAX_VIEW_CHARS = 4 * 1024 * 1024  # a longer document is cut here, and says so


@dataclass(frozen=True)
class Page:
    """Where a page starts in the view's text, its number (None: too many pages to number) and whether OCR read it."""

    start: int
    page: int | None
    ocr: bool


@dataclass(frozen=True)
class DocumentView:
    """One sanitized document for one caller: every window's text merged, where each window lies, its pages."""

    doc: str
    paths: list[str]
    modified: str | None
    text: str
    windows: list[dict] = field(default_factory=list)  # {"chunk_id", "idx", "start", "end"} in the view's text
    pages: list[Page] = field(default_factory=list)
    truncated: bool = False

    @property
    def ocr(self) -> bool:
        """Whether any of its text was read by OCR from a scan (it may hold recognition errors)."""
        return any(page.ocr for page in self.pages)

    def as_dict(self) -> dict:
        return {"doc": self.doc, "paths": self.paths, "modified": self.modified, "ocr": self.ocr,
                "truncated": self.truncated, "text": self.text, "windows": self.windows,
                "pages": [{"start": page.start, "page": page.page, "ocr": page.ocr} for page in self.pages]}

    def window_at(self, chunk_id: str) -> dict | None:
        return next((window for window in self.windows if window["chunk_id"] == chunk_id), None)


def document_view(db, doc: str, groups: frozenset | None) -> DocumentView | None:
    """The view of ``doc`` for a caller with ``groups`` (None: every group); None when absent or hidden alike."""
    if not DOC_ID.fullmatch(doc):
        return None
    cursor = db.cursor()
    cursor.row_factory = sqlite3.Row  # the document's columns by the names ``document_hits`` reads
    row = cursor.execute(f"SELECT {document_hits.select_list('d')} FROM documents d WHERE d.doc = ?", (doc,)).fetchone()
    windows = db.execute('SELECT chunk_id, idx, start, "end", text FROM chunks WHERE doc = ? ORDER BY start, idx',
                         (doc,)).fetchall()
    if row is None or not windows or not _visible(row[document_hits.PREFIX + "groups"], groups):
        return None
    shown = document_hits.hit_values(row, groups)  # the caller's paths only, and their latest date
    text, placed, truncated = _merged(windows)
    pages = _pages(db, doc, len(text))
    return DocumentView(doc, shown["paths"], shown["modified"], text, placed, pages, truncated)


def _visible(stored_groups: str | None, groups: frozenset | None) -> bool:
    if groups is None:
        return True
    labels = _list(stored_groups)
    return access.can_see(groups, (label for label in labels if isinstance(label, str)))


def _list(value: str | None) -> list:
    try:
        listed = json.loads(value or "[]")
    except ValueError:
        return []
    return listed if isinstance(listed, list) else []


def _merged(windows) -> tuple[str, list[dict], bool]:
    """The windows' text placed at their offsets, each character once, and each window's span in it."""
    parts: list[str] = []
    reached = 0
    placed = []
    for chunk_id, idx, start, end, window in windows:
        if start >= MAX_VIEW_CHARS:
            return "".join(parts), placed, True
        if start > reached:
            parts.append(" " * (start - reached))
            reached = start
        if end > reached:
            parts.append(window[reached - start:])
            reached = end
        placed.append({"chunk_id": chunk_id, "idx": idx, "start": start, "end": end})
    text = "".join(parts)
    return text[:MAX_VIEW_CHARS], placed, len(text) > MAX_VIEW_CHARS


def _pages(db, doc: str, length: int) -> list[Page]:
    from bastion_agent.embedding.vectorstore import document_pages

    entries = document_pages(db, [doc]).get(doc) or []
    pages = []
    for entry in entries:
        if isinstance(entry, list) and entry and type(entry[0]) is int and 0 <= entry[0] <= length:
            found = where(entries, entry[0])
            pages.append(Page(entry[0], found.page, found.ocr))
    return pages
