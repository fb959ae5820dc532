"""The rows behind a query's hits: one statement for their text, paths and page maps, and each document's
shown paths, dates and page map worked out once, not once per hit.

A vector query walks the graph in about a millisecond; building its ten
hits cost a third as much again in Python (a statement for the windows,
another for the page maps, four JSON documents parsed and every path
escaped per hit: docs/search.md, *The walk at FAISS's speed*). A store's
hits come from few documents, and a document's paths, groups and dates do
not change between two queries of one loaded index, so what a caller is
shown of a document is kept here, keyed by the very column values it was
made from: a row edited since reads as another key, so nothing kept can
outlive the database's own text. The store is bounded (``KEPT``).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import dataclass

from bastion_agent.core import document_hits, records
from bastion_agent.core.access import can_see
from bastion_agent.core.records import Hit
from bastion_agent.sanitizing import pages as page_maps

# Documents kept between queries; past it the memory starts again empty. A document
# costs its escaped paths and its page map, and a page map longer than LONG_MAP
# characters (about a hundred pages) is parsed per hit as before, never kept: so
# the memory stays within a few tens of megabytes whatever the store holds.
KEPT = 1024
LONG_MAP = 2048

# The window's columns (``chunks``) each hit is built from; then come the document's, as the document
# record declares them (``document_hits.select_list``), and its page map (``document_pages``).
_WINDOW = 'c.chunk_id, c.doc, c.idx, c.start, c."end", c.text'
_WINDOW_COLUMNS = 6


@dataclass(frozen=True)
class Shown:
    """What one caller is shown of one document: the hit's per-document fields (``document_hits.hit_values``:
    its paths escaped, their latest date, ...), and its page map."""

    values: tuple[tuple[str, object], ...]  # (hit field, value): a list value is copied into each hit
    page_map: object  # the parsed ``document_pages.pages`` (None: the document has no pages)


def listed_ids(count: int) -> str:
    """``WITH ids(id) AS (VALUES (?), ...)``: ``count`` ids to look up one by one. ``chunk_id IN (...)`` would
    walk the index on from each id it finds, one step more when another window's id sorts after it, so the
    work of a search would tell whether a hidden window's id follows a hit's; an equality join seeks each
    id alone."""
    return "WITH ids(id) AS (VALUES " + ",".join("(?)" for _ in range(count)) + ")"


class HitRows:
    """Reads the rows of ranked windows and builds their hits, for one connection (one loaded index)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self._shown: dict[tuple, Shown] = {}
        self._with_pages: bool | None = None  # whether the store has ``document_pages`` (an old one may not)

    def statement(self, count: int) -> str:
        """The one statement for ``count`` windows (SQLite keeps it prepared: the text is the same per count)."""
        if self._with_pages is None:
            self._with_pages = self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'document_pages'").fetchone() is not None
        document = document_hits.select_list("d")
        pages = "p.pages" if self._with_pages else "NULL"
        joined = " LEFT JOIN document_pages p ON p.doc = c.doc" if self._with_pages else ""
        return (f"{listed_ids(count)} SELECT {_WINDOW}, {document}, {pages} FROM ids CROSS JOIN chunks c"
                f" ON c.chunk_id = ids.id LEFT JOIN documents d ON d.doc = c.doc{joined}")

    def rows(self, chunk_ids: list[str]) -> dict[str, tuple]:
        """Each listed window still in ``chunks``, by chunk id: its window's and its document's columns."""
        try:
            found = self.db.execute(self.statement(len(chunk_ids)), chunk_ids).fetchall()
        except sqlite3.OperationalError:
            if not self._with_pages:
                raise
            self._with_pages = None  # look again: the page maps' table may have gone (a busy database raises again)
            found = self.db.execute(self.statement(len(chunk_ids)), chunk_ids).fetchall()
        return {row[0]: row for row in found}

    def hits(self, ranked: list, rows: dict[str, tuple], mode: str, groups: frozenset | None) -> list[Hit]:
        """The hit of each ranked window (``fusion.Scored``) that has a row and whose document the caller may
        read as it is labelled now (``may_read``), in ranked order."""
        names = document_hits.selected_names()
        labels = names.index(document_hits.PREFIX + "groups") + _WINDOW_COLUMNS
        hits = []
        for item in ranked:
            row = rows.get(item.chunk_id)
            if row is not None and (groups is None or may_read(groups, row[labels])):
                hits.append(self.hit(item, row, mode, groups, names))
        return hits

    def hit(self, item, row: tuple, mode: str, groups: frozenset | None, names: tuple[str, ...]) -> Hit:
        """One hit: the ranking's fields by name, the window's columns, and what ``groups`` is shown of its document."""
        chunk_id, doc, idx, start, end, text = row[:_WINDOW_COLUMNS]
        shown = self.shown(doc, names, row[_WINDOW_COLUMNS:-1], row[-1], groups)
        where = page_where(shown.page_map, start, text)
        given = {"doc": doc, "idx": idx, "chunk_id": chunk_id, "start": start, "end": end, "text": text,
                 "mode": mode, "ocr": where.ocr, "page": where.page}
        for name, value in shown.values:
            given[name] = list(value) if isinstance(value, list) else value  # each hit its own list
        return _filled(item, given)

    def shown(self, doc: str, names: tuple[str, ...], document: tuple, pages, groups) -> Shown:
        """What ``groups`` is shown of a document, from its columns as read now (kept, by those values)."""
        if pages is not None and len(pages) > LONG_MAP:
            return shown_of(names, document, pages, groups)
        key = (doc, names, document, pages, groups)
        found = self._shown.get(key)
        if found is None:
            if len(self._shown) >= KEPT:
                self._shown.clear()
            found = self._shown[key] = shown_of(names, document, pages, groups)
        return found


_HIT_FIELDS = dataclasses.fields(Hit)
_HIT_NAMES = frozenset(field.name for field in _HIT_FIELDS)
_HIT_DEFAULTS = {field.name: field.default for field in _HIT_FIELDS if field.default is not dataclasses.MISSING}
_HIT_REQUIRED = _HIT_NAMES - _HIT_DEFAULTS.keys()


def new_hit(item, **given) -> Hit:
    """``records.build(Hit, item, **given)``, the same record, made in a fifth of the time.

    Hit's generated ``__init__`` sets its 21 fields one ``object.__setattr__``
    at a time (it is frozen); ten hits a query cost 0.1-0.3 ms that way,
    a tenth of a walk. So the fields' dict is filled at once
    (``records.filled``): the defaults, the ranking's fields, then ``given``.
    A ranking with a field Hit lacks, or a missing field, goes through
    ``records.build`` as before.
    """
    return _filled(item, given)


def _filled(item, given: dict) -> Hit:
    """``new_hit`` with ``given`` as a dict (the hits of a query pass theirs without unpacking it)."""
    record = records.hit_record()
    if record is not Hit:  # a test's subclass with a field of its own: built the general way
        return records.build(record, item, **given)
    held = getattr(item, "__dict__", None)
    if held is None or not held.keys() <= _HIT_NAMES or not given.keys() <= _HIT_NAMES:
        return records.build(Hit, item, **given)
    fields = dict(_HIT_DEFAULTS)
    fields.update(held)
    fields.update(given)
    if not _HIT_REQUIRED <= fields.keys():
        return records.build(Hit, item, **given)
    return records.filled(Hit, fields)


_NO_PAGE = page_maps.where(None, 0)  # what a window of a document without a page map says of its page


def page_of(page_map, start: int, text: str) -> dict:
    """``ocr`` and ``page`` of a window: those of the page its first visible character is on."""
    where = page_where(page_map, start, text)
    return {"ocr": where.ocr, "page": where.page}


def page_where(page_map, start: int, text: str):
    """The page a window's first visible character is on (a document without a page map: on none, made
    once, not once a hit)."""
    return page_maps.where(page_map, start + len(text) - len(text.lstrip())) if page_map else _NO_PAGE


def shown_of(names: tuple[str, ...], document: tuple, pages, groups) -> Shown:
    """``Shown`` from a document's columns (selected under ``names``): the hit's fields as ``groups`` may
    see them (``document_hits.hit_values``) and the page map (none when it does not parse)."""
    page_map = None
    if pages is not None:
        try:
            page_map = json.loads(pages)
        except ValueError:
            page_map = None
    values = document_hits.hit_values(dict(zip(names, document)), groups)
    return Shown(tuple(values.items()), page_map)


def may_read(groups: frozenset | None, document_groups: str | None) -> bool:
    """Whether a caller may read a window's document as ``vectors.db`` labels it now (unreadable: no group).

    The last check before a hit's text is shown. The caller's share
    (``visible``) was read when the index was loaded, and the index's SQLite
    connection sees every later commit: between an embed's first commit and
    the next reload (``serve`` beside ``watch``, or ``serve --watch``), a new
    document's windows, or a window whose rowid a new one reused, are in
    ``chunks`` but not in the share as it was read. Such a window is shown
    only when its document's current groups let the caller read it.
    """
    if groups is None:
        return True
    try:
        names = json.loads(document_groups or "[]")
    except (TypeError, ValueError):
        return False
    return isinstance(names, list) and can_see(groups, [name for name in names if isinstance(name, str)])
